// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The receive half of a resumable connection's accounting (docs/resume.md):
// how many of the peer's messages this side has consumed since the
// connection began (what the resume exchange tells the peer), and the
// receives the application posted on the endpoint's own receive queue, in
// order, until a message consumes them.
//
// RC consumes a QP's receive queue in order, one receive per message (an
// RMA write with immediate data is a message here), and reports the
// receives in order; so the oldest receive on the wire is always the one a
// message consumed, and a receive the failed QP flushed held nothing: the
// peer sends again every message past the count. A connection on a shared
// receive context only counts (count_shared): its receives belong to the
// context, which a QP's failure does not flush.
//
// Pure, like tx_ledger.h: no rdma-core call, no lock, no allocation after
// the constructor; slots of the endpoint's own are indexed slot_of(seq), a
// mask as in tx_ledger.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "resume/tx_ledger.h"  // kMaxLedger

namespace evd::resume {

class rx_ledger {
  public:
    // capacity: the receive queue's depth, 1 to kMaxLedger. Nothing is
    // allocated: a receive is on the wire or queued, and which one follows
    // from the cursor.
    explicit rx_ledger(uint32_t capacity) noexcept
        : cap_(std::clamp<uint32_t>(capacity, 1, kMaxLedger)), mask_(std::bit_ceil(cap_) - 1) {}

    uint32_t capacity() const noexcept { return cap_; }
    uint32_t slots() const noexcept { return mask_ + 1; }
    uint32_t slot_of(uint64_t seq) const noexcept { return static_cast<uint32_t>(seq & mask_); }
    uint64_t outstanding() const noexcept { return tail_ - head_; }
    bool full() const noexcept { return outstanding() == cap_; }
    uint64_t head() const noexcept { return head_; }
    // Receives posted on the current QP and not completed yet.
    uint64_t on_wire() const noexcept { return cursor_ - head_; }

    // Takes a receive the application posted; it starts queued. The caller
    // checked !full().
    uint64_t add() noexcept { return tail_++; }
    // The oldest queued receive, to post on the current QP; false when none.
    bool next_queued(uint64_t& seq) const noexcept {
        if (cursor_ == tail_) return false;
        seq = cursor_;
        return true;
    }
    // seq (next_queued's answer) is on the current QP.
    void posted(uint64_t seq) noexcept { cursor_ = seq + 1; }
    // The receive add() just gave (seq, the newest, not on a QP) was not
    // taken after all (its post failed). False, changing nothing, for any
    // other seq.
    bool take_back(uint64_t seq) noexcept {
        if (tail_ == head_ || seq != tail_ - 1 || seq < cursor_) return false;
        --tail_;
        return true;
    }

    // A message of the peer completed the oldest receive on the wire: its
    // seq in *seq. False, counting nothing, when no receive is on the wire
    // (a completion evd cannot place).
    bool consume(uint64_t* seq) noexcept {
        if (head_ == cursor_) return false;
        *seq = head_++;
        ++consumed_;
        return true;
    }
    // The oldest receive on the wire completed in error, and the connection
    // ends without resuming: it leaves, consuming nothing; its seq in *seq.
    // False when no receive is on the wire.
    bool fail_head(uint64_t* seq) noexcept {
        if (head_ == cursor_) return false;
        *seq = head_++;
        return true;
    }
    // A message of the peer consumed a receive of a shared receive context.
    void count_shared() noexcept { ++consumed_; }
    // Messages of the peer consumed since the connection began.
    uint64_t consumed() const noexcept { return consumed_; }

    // The QP failed and every completion it made has been read: the
    // receives it flushed are queued again, in order.
    void qp_failed() noexcept { cursor_ = head_; }

    // The connection ends: every receive leaves, in order, unconsumed.
    template <class F>
    void cancel_all(F&& retire) {
        while (head_ < tail_) retire(head_++);
        cursor_ = head_;
    }

  private:
    uint32_t cap_;
    uint32_t mask_;
    uint64_t head_ = 0;    // oldest receive not consumed
    uint64_t cursor_ = 0;  // first receive not on the current QP
    uint64_t tail_ = 0;    // the next seq add() gives
    uint64_t consumed_ = 0;
};

}  // namespace evd::resume
