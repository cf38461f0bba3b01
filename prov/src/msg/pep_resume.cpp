// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// A listener's resumable connections (pep_resume.h).
#include "msg/pep_resume.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "evd.h"

namespace evd {

resume_tokens* resume_tokens_new() noexcept {
    try {
        return new resume_tokens(kResumeTokensPerListener);
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_listen: no memory for the resume tokens: connections "
                 "accepted here are not resumable\n");
        return nullptr;
    }
}

void resume_tokens_ref(resume_tokens* t) noexcept {
    if (t) t->refs.fetch_add(1, std::memory_order_relaxed);
}

void resume_tokens_unref(resume_tokens* t) noexcept {
    if (t && t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete t;
}

bool resume_draw_token(resume::token_t* t) noexcept {
    for (int tries = 0; tries < 4; ++tries) {
        const ssize_t n = getrandom(t->data(), t->size(), 0);
        if (n != static_cast<ssize_t>(t->size())) {
            if (n < 0 && errno == EINTR) continue;
            EVD_WARN(FI_LOG_EP_CTRL, "getrandom: %s: no resume token drawn\n",
                     n < 0 ? strerror(errno) : "short read");
            return false;
        }
        for (uint8_t b : *t)
            if (b) return true;  // all zero is no token: draw again
    }
    return false;
}

}  // namespace evd
