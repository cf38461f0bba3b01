// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// What an owner (owners.h) says when the call releasing its handle fails.
#include "owners.h"

#include <cerrno>
#include <cstring>
#include <string_view>

namespace evd {

// g++ writes a deleter's signature "... [with T = ibv_qp; auto Fn =
// ibv_destroy_qp]", clang "... [Fn = &ibv_destroy_qp, T = ibv_qp]".
std::string_view release_fn_name(const char* where) noexcept {
    std::string_view s(where);
    const size_t at = s.find("Fn = ");
    if (at == std::string_view::npos) return s;
    s.remove_prefix(at + 5);
    if (!s.empty() && s.front() == '&') s.remove_prefix(1);
    const size_t end = s.find_first_of(",;]");
    return end == std::string_view::npos ? s : s.substr(0, end);
}

void report_release_failure(const char* where, int err) noexcept {
    const int saved = errno;  // a deleter runs inside a reset() the caller may follow with errno
    const std::string_view name = release_fn_name(where);
    EVD_WARN(FI_LOG_CORE, "%.*s failed: %s (the handle is leaked)\n",
             static_cast<int>(name.size()), name.data(), std::strerror(err));
    errno = saved;
}

}  // namespace evd
