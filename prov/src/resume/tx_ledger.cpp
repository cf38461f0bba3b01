// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The send half of a resumable connection's accounting (tx_ledger.h); the
// rules peer_consumed applies are argued in docs/resume.md, "Why exactly
// once holds".
#include "resume/tx_ledger.h"

#include <algorithm>
#include <bit>

namespace evd::resume {

const char* op_kind_name(op_kind k) noexcept {
    switch (k) {
    case op_kind::message: return "message";
    case op_kind::write: return "write";
    case op_kind::read: return "read";
    case op_kind::atomic: return "atomic";
    case op_kind::fetch_atomic: return "fetch_atomic";
    }
    return "unknown";
}

const char* tx_state_name(tx_state s) noexcept {
    switch (s) {
    case tx_state::queued: return "queued";
    case tx_state::on_wire: return "on_wire";
    case tx_state::in_doubt: return "in_doubt";
    case tx_state::done: return "done";
    }
    return "unknown";
}

const char* verdict_name(verdict v) noexcept {
    switch (v) {
    case verdict::resume: return "resume";
    case verdict::atomic_in_doubt: return "an atomic may have been applied and its outcome is lost";
    case verdict::read_in_doubt: return "a read cannot be repeated as it ran";
    case verdict::count_too_low: return "the peer counts fewer of our messages than completed here";
    case verdict::count_too_high: return "the peer counts more of our messages than were sent";
    }
    return "unknown";
}

bool overlaps(const remote_range& a, const remote_range& b) noexcept {
    if (!a.len || !b.len) return false;
    // [addr, addr + len) without overflow: the distance from the lower start
    // is inside the lower range.
    return a.addr <= b.addr ? b.addr - a.addr < a.len : a.addr - b.addr < b.len;
}

tx_ledger::tx_ledger(uint32_t capacity)
    : cap_(std::clamp<uint32_t>(capacity, 1, kMaxLedger)),
      mask_(std::bit_ceil(cap_) - 1),
      ring_(std::make_unique<entry[]>(static_cast<size_t>(mask_) + 1)) {}

uint64_t tx_ledger::add(op_kind k, remote_range r) noexcept {
    entry& e = at(tail_);
    e.kind = k;
    e.state = tx_state::queued;
    e.mark = msgs_taken_;
    e.range = (k == op_kind::read || k == op_kind::write) ? r : remote_range{};
    if (k == op_kind::message) ++msgs_taken_;
    return tail_++;
}

bool tx_ledger::next_queued(uint64_t& seq) const noexcept {
    for (uint64_t s = cursor_; s < tail_; ++s)
        if (at(s).state == tx_state::queued) {
            seq = s;
            return true;
        }
    return false;
}

void tx_ledger::posted(uint64_t seq) noexcept {
    entry& e = at(seq);
    e.state = tx_state::on_wire;
    cursor_ = seq + 1;
}

bool tx_ledger::take_back(uint64_t seq) noexcept {
    if (tail_ == head_ || seq != tail_ - 1 || seq < cursor_) return false;
    const entry& e = at(seq);
    if (e.state != tx_state::queued) return false;
    if (e.kind == op_kind::message) --msgs_taken_;
    --tail_;
    return true;
}

void tx_ledger::qp_failed() noexcept {
    for (uint64_t s = head_; s < cursor_; ++s)
        if (at(s).state == tx_state::on_wire) at(s).state = tx_state::in_doubt;
}

// The rules, for an operation in doubt whose mark is m (docs/resume.md):
//  message       m < n: consumed, done; else never consumed: replay.
//  write         m < n: a later message was consumed, so the write was
//                carried out before it: done. Else replay (writing the same
//                bytes again; what a peer polling its memory may see is in
//                docs/resume.md).
//  read          m < n: the peer may have acted on a later message, which
//                RC orders after the read, and changed what the read reads:
//                a replay could return what the first run never could.
//                Else replay, unless a later write of ours in doubt covers
//                the same memory: it may have run already.
//  atomic        m < n: applied, and nobody waits for its old value: done.
//                Else it may or may not have been applied.
//  fetch_atomic  its result is lost whether or not it was applied.
verdict tx_ledger::decide(uint64_t n, uint64_t* culprit) const noexcept {
    // At least every message known consumed (completed here, or found
    // consumed by an earlier resume); at most every message before the first
    // one still queued (never sent, or found unconsumed before and not sent
    // again): messages are consumed in order.
    uint64_t low = msgs_acked_, high = msgs_taken_;
    bool high_found = false;
    for (uint64_t s = head_; s < tail_; ++s) {
        const entry& e = at(s);
        if (e.kind != op_kind::message) continue;
        if (e.state == tx_state::done && e.mark + 1 > low) low = e.mark + 1;
        if (e.state == tx_state::queued && !high_found) {
            high = e.mark;
            high_found = true;
        }
    }
    if (n < low || n > high) {
        if (culprit) *culprit = n;
        return n < low ? verdict::count_too_low : verdict::count_too_high;
    }
    for (uint64_t s = head_; s < cursor_; ++s) {
        const entry& e = at(s);
        if (e.state != tx_state::in_doubt) continue;
        verdict v = verdict::resume;
        switch (e.kind) {
        case op_kind::message:
        case op_kind::write:
            break;
        case op_kind::read:
            if (e.mark < n) {
                v = verdict::read_in_doubt;
                break;
            }
            for (uint64_t w = s + 1; w < cursor_; ++w)
                if (at(w).state == tx_state::in_doubt && at(w).kind == op_kind::write &&
                    overlaps(at(w).range, e.range)) {
                    v = verdict::read_in_doubt;
                    break;
                }
            break;
        case op_kind::atomic:
            if (e.mark >= n) v = verdict::atomic_in_doubt;
            break;
        case op_kind::fetch_atomic:
            v = verdict::atomic_in_doubt;
            break;
        }
        if (v != verdict::resume) {
            if (culprit) *culprit = s;
            return v;
        }
    }
    return verdict::resume;
}

verdict tx_ledger::peer_consumed(uint64_t n, uint64_t* culprit) noexcept {
    const verdict v = decide(n, culprit);
    if (v != verdict::resume) return v;
    uint64_t first_queued = tail_;
    for (uint64_t s = head_; s < tail_; ++s) {
        entry& e = at(s);
        if (e.state == tx_state::in_doubt) {
            const bool carried_out = e.mark < n && e.kind != op_kind::read;
            e.state = carried_out ? tx_state::done : tx_state::queued;
        }
        if (e.state == tx_state::queued && s < first_queued) first_queued = s;
    }
    cursor_ = first_queued;
    return v;
}

}  // namespace evd::resume
