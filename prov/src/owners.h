// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The RAII owners of what evd gets from rdma-core, libfabric and the kernel:
// one owner type per kind of handle, so that every handle has exactly one
// owner and no function needs a cleanup ladder. A handle whose release can
// fail where the caller must react (ibv_destroy_cq while a QP still uses
// the CQ, say) is released explicitly with release_with(), which keeps the
// owner when the release fails.
#pragma once

#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "evd.h"

namespace evd {

// Says with FI_WARN that the release call named in `where` (a deleter's
// signature, which names it) failed with errno `err`: an owner being
// destroyed has nobody to return the error to, and the handle is leaked.
// (owners.cpp)
void report_release_failure(const char* where, int err) noexcept;
// The release function's name in such a signature (what the warning says).
std::string_view release_fn_name(const char* where) noexcept;

// unique_ptr deleter calling Fn. A release that fails is reported
// (report_release_failure): rdma-core's destroy calls answer 0 or an errno
// (ibv_*), or -1 with errno set (rdma_destroy_id). A handle whose failure the
// caller must act on is released with release_with() instead.
template <auto Fn>
struct call_deleter {
    template <class T>
    void operator()(T* p) const noexcept {
        if (!p) return;
        if constexpr (std::is_void_v<decltype(Fn(p))>) {
            Fn(p);
        } else {
            static_assert(std::is_same_v<decltype(Fn(p)), int>,
                          "a release call answers 0 or an error number");
            const int rc = Fn(p);
            if (rc != 0)
                report_release_failure(__PRETTY_FUNCTION__, rc == -1 ? errno : rc < 0 ? -rc : rc);
        }
    }
};

using info_ptr = std::unique_ptr<struct fi_info, call_deleter<fi_freeinfo>>;
using cm_channel_ptr =
    std::unique_ptr<struct rdma_event_channel, call_deleter<rdma_destroy_event_channel>>;
using comp_channel_ptr =
    std::unique_ptr<struct ibv_comp_channel, call_deleter<ibv_destroy_comp_channel>>;
using ibv_cq_ptr = std::unique_ptr<struct ibv_cq, call_deleter<ibv_destroy_cq>>;
using ibv_qp_ptr = std::unique_ptr<struct ibv_qp, call_deleter<ibv_destroy_qp>>;
using ibv_srq_ptr = std::unique_ptr<struct ibv_srq, call_deleter<ibv_destroy_srq>>;
using ibv_mr_ptr = std::unique_ptr<struct ibv_mr, call_deleter<ibv_dereg_mr>>;
using ibv_pd_ptr = std::unique_ptr<struct ibv_pd, call_deleter<ibv_dealloc_pd>>;
using ibv_ah_ptr = std::unique_ptr<struct ibv_ah, call_deleter<ibv_destroy_ah>>;
using ibv_context_ptr = std::unique_ptr<struct ibv_context, call_deleter<ibv_close_device>>;
using cm_id_ptr = std::unique_ptr<struct rdma_cm_id, call_deleter<rdma_destroy_id>>;
using addrinfo_ptr = std::unique_ptr<struct rdma_addrinfo, call_deleter<rdma_freeaddrinfo>>;
using ifaddrs_ptr = std::unique_ptr<struct ifaddrs, call_deleter<freeifaddrs>>;

// Releases p's handle with fn (an rdma-core destroy call answering 0 or an
// errno); on success the owner forgets it, on failure it still owns it.
template <class P, class Fn>
int release_with(P& p, Fn fn) {
    if (!p) return 0;
    int rc = fn(p.get());
    if (rc == 0) (void)p.release();
    return rc;
}

// An eventfd as a doorbell: signal makes it readable (true when written; a
// doorbell already rung stays rung), drain clears it (true when it was
// readable). Both are no-ops on fd -1.
inline bool eventfd_signal(int fd) noexcept {
    uint64_t one = 1;
    return fd >= 0 && ::write(fd, &one, sizeof one) == static_cast<ssize_t>(sizeof one);
}
inline bool eventfd_drain(int fd) noexcept {
    uint64_t v;
    return fd >= 0 && ::read(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
}

// A file descriptor (eventfd, epoll, timerfd): closed with its owner.
struct fd_owner {
    int fd = -1;
    fd_owner() = default;
    explicit fd_owner(int f) : fd(f) {}
    fd_owner(const fd_owner&) = delete;
    fd_owner& operator=(const fd_owner&) = delete;
    ~fd_owner() { reset(); }
    // Closes the fd held (if any) and holds f instead.
    void reset(int f = -1) noexcept {
        if (fd >= 0) ::close(fd);
        fd = f;
    }
    // For an eventfd (eventfd_signal, eventfd_drain).
    bool signal() const noexcept { return eventfd_signal(fd); }
    bool drain() const noexcept { return eventfd_drain(fd); }
};

// Runs an undo step unless the work it protects completed (dismiss()): for
// registrations that are not handles (an EQ source, a registry entry).
template <class F>
class undo_on_exit {
public:
    explicit undo_on_exit(F f) : f_(std::move(f)) {}
    undo_on_exit(const undo_on_exit&) = delete;
    undo_on_exit& operator=(const undo_on_exit&) = delete;
    ~undo_on_exit() {
        if (armed_) f_();
    }
    void dismiss() noexcept { armed_ = false; }

private:
    F f_;
    bool armed_ = true;
};

}  // namespace evd
