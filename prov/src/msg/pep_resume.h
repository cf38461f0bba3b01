// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// A listener's resumable connections (docs/resume.md, "The exchange", step
// 3): the token table of the connections it accepted with a resume offer,
// shared by the listener and each endpoint it holds a token for, so that
// either may close first. Made at fi_listen; the listener reads it when a
// resume request arrives, an endpoint adds itself at fi_accept and leaves
// at fi_close.
#pragma once

#include <atomic>
#include <cstddef>

#include "lock.h"
#include "resume/token_table.h"

namespace evd {

struct resume_tokens {
    explicit resume_tokens(size_t max) : tbl(max) {}
    mutex mu;  // a leaf: only the table's pure calls run under it
    resume::token_table tbl EVD_GUARDED_BY(mu);
    std::atomic<int> refs{1};
};

// The connections one listener resumes at most: a request beyond that is
// offered no token, and the connection is not resumable.
inline constexpr size_t kResumeTokensPerListener = 1024;

// A new table (one reference), or nullptr when there is no memory (the
// listener then offers no resumption, with a warning).
resume_tokens* resume_tokens_new() noexcept;
void resume_tokens_ref(resume_tokens* t) noexcept;
void resume_tokens_unref(resume_tokens* t) noexcept;

// 128 random bits from the kernel (getrandom), never all zero; false when
// none could be had (no resumption is offered then).
bool resume_draw_token(resume::token_t* t) noexcept;

}  // namespace evd
