// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The terminal record of a resumable endpoint not joined again
// (resume_err.h).
#include "resume/resume_err.h"

#include <cstdio>
#include <cstring>

#include "resume/resume_wire.h"

namespace evd::resume {

// The public refusal codes are the wire's (resume_wire.h).
static_assert(FI_EVD_RESUME_REFUSED_UNKNOWN == static_cast<int>(resume_refusal::unknown_token));
static_assert(FI_EVD_RESUME_REFUSED_PEER == static_cast<int>(resume_refusal::wrong_peer));
static_assert(FI_EVD_RESUME_REFUSED_STALE == static_cast<int>(resume_refusal::stale_generation));
static_assert(FI_EVD_RESUME_REFUSED_ENDED == static_cast<int>(resume_refusal::not_resumable));
static_assert(FI_EVD_RESUME_REFUSED_VERDICT == static_cast<int>(resume_refusal::verdict_ends));
static_assert(FI_EVD_RESUME_REFUSED_MALFORMED == static_cast<int>(resume_refusal::malformed));
static_assert(FI_EVD_RESUME_REFUSED_BUSY == static_cast<int>(resume_refusal::busy));

static_assert(sizeof(struct fi_evd_resume_err) == 40);
static_assert(FI_EVD_RESUME_CAUSE_COMPLETION == static_cast<int>(failure_source::completion) + 1);
static_assert(FI_EVD_RESUME_CAUSE_ASYNC == static_cast<int>(failure_source::async_event) + 1);
static_assert(FI_EVD_RESUME_CAUSE_CM == static_cast<int>(failure_source::cm_event) + 1);

namespace {

int reason_of(give_up why) noexcept {
    switch (why) {
    case give_up::deadline: return FI_EVD_RESUME_DEADLINE;
    case give_up::refused: return FI_EVD_RESUME_REFUSED;
    case give_up::peer_gone: return FI_EVD_RESUME_PEER_GONE;
    case give_up::verdict: return FI_EVD_RESUME_VERDICT;
    case give_up::not_transient: return FI_EVD_RESUME_NOT_TRANSIENT;
    case give_up::none:
    case give_up::closed: break;
    }
    return 0;
}

const char* reason_text(int reason) noexcept {
    switch (reason) {
    case FI_EVD_RESUME_DEADLINE: return "not joined again within the resume deadline";
    case FI_EVD_RESUME_REFUSED: return "the peer refused to resume";
    case FI_EVD_RESUME_PEER_GONE: return "nobody listens at the peer's address any more";
    case FI_EVD_RESUME_VERDICT:
        return "an operation in doubt could be neither repeated nor known done";
    case FI_EVD_RESUME_NOT_TRANSIENT: return "the failure is not one to ride through";
    }
    return "unknown reason";
}

const char* cause_text(uint32_t source, int code) noexcept {
    if (source < 1 || source > 3) return nullptr;
    const failure_row* r = failure_lookup(static_cast<failure_source>(source - 1), code);
    return r ? r->name : nullptr;
}

}  // namespace

int resume_prov_errno(give_up why) noexcept {
    return FI_EVD_PERR(FI_EVD_PERR_RESUME, reason_of(why));
}

struct fi_evd_resume_err resume_err_make(const outage& o) noexcept {
    struct fi_evd_resume_err e {};
    e.magic = FI_EVD_RESUME_ERR_MAGIC;
    e.version = FI_EVD_RESUME_ERR_VERSION;
    e.size = sizeof e;
    e.reason = static_cast<uint32_t>(reason_of(o.why));
    e.attempts = o.attempts;
    e.outage_ms = o.ms;
    e.cause_source = static_cast<uint32_t>(o.cause_source) + 1;
    e.cause_code = o.cause_code;
    e.refusal = o.why == give_up::refused ? o.refusal : 0;
    e.generation = o.generation;
    return e;
}

const char* resume_err_text(int prov_errno, const void* err_data, char* buf, size_t len) noexcept {
    if (prov_errno <= 0 || FI_EVD_PERR_CLASS(prov_errno) != FI_EVD_PERR_RESUME || !buf || !len)
        return nullptr;
    const int reason = FI_EVD_PERR_CODE(prov_errno);
    // fi_eq_strerror is not told err_data's size: the magic first, then the
    // size the record says it has, as the async records are read
    struct fi_evd_resume_err e {};
    bool have = false;
    if (err_data) {
        uint32_t magic = 0;
        std::memcpy(&magic, err_data, sizeof magic);
        if (magic == FI_EVD_RESUME_ERR_MAGIC) {
            uint16_t vs[2];
            std::memcpy(vs, static_cast<const uint8_t*>(err_data) + 4, sizeof vs);
            if (vs[0] == FI_EVD_RESUME_ERR_VERSION && vs[1] >= sizeof e) {
                std::memcpy(&e, err_data, sizeof e);
                have = static_cast<int>(e.reason) == reason;
            }
        }
    }
    if (!have) {
        snprintf(buf, len, "evd: the resumable connection could not be joined again: %s",
                 reason_text(reason));
        return buf;
    }
    char refusal[96] = "";
    if (reason == FI_EVD_RESUME_REFUSED)
        snprintf(refusal, sizeof refusal, " (%s)", resume_refusal_name(e.refusal));
    const char* cause = cause_text(e.cause_source, e.cause_code);
    snprintf(buf, len,
             "evd: the resumable connection could not be joined again: %s%s, after %llu ms and "
             "%u attempt%s; its first failure: %s",
             reason_text(reason), refusal, static_cast<unsigned long long>(e.outage_ms),
             e.attempts, e.attempts == 1 ? "" : "s", cause ? cause : "not recorded");
    return buf;
}

}  // namespace evd::resume
