// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The life of one resumable connection (session.h).
#include "resume/session.h"

#include <algorithm>

namespace evd::resume {

const char* session_state_name(session_state s) noexcept {
    switch (s) {
    case session_state::connected: return "connected";
    case session_state::draining: return "draining";
    case session_state::waiting: return "waiting";
    case session_state::exchanging: return "exchanging";
    case session_state::ended: return "ended";
    }
    return "unknown";
}

const char* give_up_name(give_up g) noexcept {
    switch (g) {
    case give_up::none: return "none";
    case give_up::deadline: return "not joined again within the resume deadline";
    case give_up::refused: return "the peer refused to resume";
    case give_up::peer_gone: return "nobody listens at the peer's address any more";
    case give_up::verdict: return "an operation in doubt cannot be repeated or known done";
    case give_up::not_transient: return "the failure is not one to ride through";
    case give_up::closed: return "the endpoint was closed";
    }
    return "unknown";
}

session::session(side s, config c) noexcept : side_(s), cfg_(c) {
    cfg_.backoff_first_ms = std::max<uint32_t>(cfg_.backoff_first_ms, 1);
    cfg_.backoff_first_ms = std::min<uint32_t>(cfg_.backoff_first_ms, 1u << 30);
    cfg_.backoff_max_ms = std::clamp<uint32_t>(cfg_.backoff_max_ms, cfg_.backoff_first_ms, 1u << 30);
}

session_step session::end(give_up g) noexcept {
    session_step s;
    s.end = true;
    s.why = g;
    if (request_pending_) {  // its id is answered: no
        s.reject = true;
        s.reject_gen = pending_gen_;
        request_pending_ = false;
    }
    state_ = session_state::ended;
    why_ = g;
    next_try_ = UINT64_MAX;
    deadline_ = UINT64_MAX;
    outage_ = false;
    return s;
}

void session::open_outage(uint64_t now) noexcept {
    if (outage_) return;  // the same outage goes on: same deadline, same backoff
    outage_ = true;
    deadline_ = now + cfg_.deadline_ms;
    backoff_ = cfg_.backoff_first_ms;
    attempts_ = 0;
}

void session::progress() noexcept {
    if (state_ != session_state::connected) return;
    outage_ = false;
    deadline_ = UINT64_MAX;
}

// Active, waiting: the next attempt goes out now.
session_step session::try_now() noexcept {
    session_step s;
    state_ = session_state::exchanging;
    next_try_ = UINT64_MAX;
    ++gen_;
    ++attempts_;
    s.connect = true;
    return s;
}

session_step session::failed(uint64_t now, bool transient) noexcept {
    if (state_ == session_state::ended) return {};
    if (!transient) {
        session_step s = end(give_up::not_transient);
        s.qp_to_error = true;
        return s;
    }
    if (state_ == session_state::draining) return {};  // the same failure, seen again
    if (state_ == session_state::waiting) return {};   // its QP is drained already
    // connected: an outage starts, or goes on when the new QP never made
    // progress; exchanging: the new QP failed too, under the same deadline
    open_outage(now);
    state_ = session_state::draining;
    next_try_ = UINT64_MAX;
    session_step s;
    s.qp_to_error = true;
    return s;
}

session_step session::drained(uint64_t now) noexcept {
    if (state_ != session_state::draining) return {};
    if (now >= deadline_) return end(give_up::deadline);
    state_ = session_state::waiting;
    if (side_ == side::active) {
        // the first try of an outage goes at once (it may be over already);
        // after a failed attempt the backoff holds
        if (attempts_ == 0) return try_now();
        next_try_ = now + backoff_;
        backoff_ = std::min(cfg_.backoff_max_ms, backoff_ * 2);
        return {};
    }
    if (request_pending_) {
        request_pending_ = false;
        return request(now, pending_gen_);
    }
    return {};
}

session_step session::port_active(uint64_t now) noexcept {
    if (state_ != session_state::waiting || side_ != side::active) return {};
    if (now >= deadline_) return end(give_up::deadline);
    return try_now();
}

uint64_t session::due() const noexcept {
    if (state_ == session_state::ended) return UINT64_MAX;
    // connected again, the outage still open: its deadline holds until
    // progress() (tick() then ends only if the QP failed again; a QP that
    // works but is slow to complete is not an outage)
    if (state_ == session_state::connected) return UINT64_MAX;
    return std::min(deadline_, next_try_);
}

session_step session::tick(uint64_t now) noexcept {
    if (state_ == session_state::connected || state_ == session_state::ended) return {};
    if (now >= deadline_) return end(give_up::deadline);
    if (state_ == session_state::waiting && side_ == side::active && now >= next_try_)
        return try_now();
    return {};
}

session_step session::attempt_failed(uint64_t now, attempt_outcome o) noexcept {
    if (state_ != session_state::exchanging || side_ != side::active) return {};
    switch (o) {
    case attempt_outcome::refused: return end(give_up::refused);
    case attempt_outcome::no_listener: return end(give_up::peer_gone);
    case attempt_outcome::unreachable: break;
    }
    if (now >= deadline_) return end(give_up::deadline);
    state_ = session_state::waiting;
    next_try_ = now + backoff_;
    backoff_ = std::min(cfg_.backoff_max_ms, backoff_ * 2);
    return {};
}

session_step session::request(uint64_t now, uint32_t generation) noexcept {
    if (side_ != side::passive) return {};
    session_step stale;
    stale.reject = true;
    stale.reject_gen = generation;
    if (state_ == session_state::ended) return stale;
    // the token table refuses these already; never go back
    if (generation <= gen_ || (request_pending_ && generation <= pending_gen_)) return stale;
    switch (state_) {
    case session_state::connected:
        // the peer saw the failure first: this side's QP goes too, and the
        // request is taken once it is drained
    case session_state::exchanging: {
        // or a newer request while the accept of the last one is out: the
        // peer gave up on that attempt, whose QP (holding receives already)
        // is drained like any failed one, under the same deadline
        session_step s = failed(now, true);
        request_pending_ = true;
        pending_gen_ = generation;
        return s;
    }
    case session_state::draining: {
        session_step s;
        if (request_pending_) {  // overtaken: the older one is answered no
            s.reject = true;
            s.reject_gen = pending_gen_;
        }
        request_pending_ = true;
        pending_gen_ = generation;
        return s;
    }
    case session_state::waiting: {
        if (now >= deadline_) {
            session_step s = end(give_up::deadline);
            s.reject = true;
            s.reject_gen = generation;
            return s;
        }
        state_ = session_state::exchanging;
        gen_ = generation;
        ++attempts_;
        session_step s;
        s.accept = true;
        return s;
    }
    case session_state::ended: break;
    }
    return stale;
}

session_step session::resumed(uint64_t now) noexcept {
    if (state_ != session_state::exchanging) return {};
    if (now >= deadline_) return end(give_up::deadline);
    state_ = session_state::connected;
    next_try_ = UINT64_MAX;
    session_step s;
    s.replay = true;
    return s;
}

session_step session::verdict_ends() noexcept {
    if (state_ == session_state::ended) return {};
    return end(give_up::verdict);
}

session_step session::closed() noexcept {
    if (state_ == session_state::ended) return {};
    return end(give_up::closed);
}

}  // namespace evd::resume
