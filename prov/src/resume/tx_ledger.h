// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The send half of a resumable connection's accounting (docs/resume.md):
// every operation the endpoint took on its send queue, in the order it was
// taken, until it leaves the ledger (completed to the application); and what
// becomes of each when the connection's QP fails and the peer says how many
// of this side's messages it has consumed.
//
// Pure: no rdma-core call, no lock, no allocation after the constructor
// (which runs at fi_enable). The endpoint keeps what it needs to post an
// operation again (its work request, the copy of inject data, the context)
// in slots of its own indexed like the ledger's: slot_of(seq). The
// caller serialises calls (the endpoint's lock). Slots are a power of two
// (the capacity rounded up), so finding one is a mask, not a division.
//
// Why the decisions are sound is written in docs/resume.md; in short, RC
// executes one side's requests at the peer in the order they were posted,
// so "the peer consumed message k" means every operation posted before
// message k was carried out there.
#pragma once

#include <cstdint>
#include <memory>

namespace evd::resume {

// What an operation does at the peer, as far as resuming is concerned.
enum class op_kind : uint8_t {
    message,       // consumes one receive at the peer: send, senddata, inject,
                   // injectdata, RMA write with immediate data
    write,         // RMA write without immediate data
    read,          // RMA read
    atomic,        // atomic whose old value nobody waits for (fi_atomic)
    fetch_atomic,  // fetching or compare atomic: a result comes back
};
const char* op_kind_name(op_kind k) noexcept;

// The most operations a ledger holds (far above any device's queue depth);
// a larger capacity is clamped to it.
inline constexpr uint32_t kMaxLedger = 1u << 24;

enum class tx_state : uint8_t {
    queued,    // taken, not on a QP (taken while resuming, or to be replayed)
    on_wire,   // posted on the current QP, not completed yet
    in_doubt,  // its QP failed first: carried out at the peer, or not
    done,      // certainly carried out at the peer; leaves the ledger in order
};
const char* tx_state_name(tx_state s) noexcept;

// What peer_consumed decided.
enum class verdict : uint8_t {
    resume,           // post next_queued() in order on the new QP
    atomic_in_doubt,  // an atomic may have been applied and its outcome is lost
    read_in_doubt,    // a read's replay could see memory its first run could not
    count_too_low,    // the peer counts fewer messages than completed here
    count_too_high,   // the peer counts more messages than were ever sent
};
const char* verdict_name(verdict v) noexcept;

// The peer memory a read or write covers (remote virtual address and
// length; evd's keys address virtual memory, FI_MR_VIRT_ADDR).
struct remote_range {
    uint64_t addr = 0;
    uint64_t len = 0;
};
bool overlaps(const remote_range& a, const remote_range& b) noexcept;

class tx_ledger {
  public:
    // capacity: the send queue's depth (at most this many operations are
    // outstanding), 1 to kMaxLedger. Throws std::bad_alloc.
    explicit tx_ledger(uint32_t capacity);

    uint32_t capacity() const noexcept { return cap_; }
    // The slot of seq, below slots(): what the endpoint indexes its own
    // per-operation state by.
    uint32_t slots() const noexcept { return mask_ + 1; }
    uint32_t slot_of(uint64_t seq) const noexcept { return static_cast<uint32_t>(seq & mask_); }
    uint64_t outstanding() const noexcept { return tail_ - head_; }
    bool full() const noexcept { return outstanding() == cap_; }
    uint64_t head() const noexcept { return head_; }  // oldest outstanding seq
    uint64_t tail() const noexcept { return tail_; }  // the next seq add() gives

    // Takes an operation at the end of the send order and returns its
    // sequence number; it starts queued. The caller checked !full().
    uint64_t add(op_kind k, remote_range r = {}) noexcept;

    // The oldest queued operation that is to be posted; false when none is.
    // Operations go on a QP in ledger order: post this one, call posted(),
    // ask again.
    bool next_queued(uint64_t& seq) const noexcept;
    // seq (next_queued's answer) is on the current QP now.
    void posted(uint64_t seq) noexcept;
    // The operation add() just gave (seq, the newest, still queued) was not
    // taken after all (its post failed): it leaves as if never added. False,
    // changing nothing, for any other seq.
    bool take_back(uint64_t seq) noexcept;

    // The current QP completed seq successfully, so every operation before
    // it completed too (RC completes a send queue in order). Calls
    // retire(seq, true) for each operation that leaves, in order, including
    // done ones that follow. Returns false, changing nothing, when seq is
    // not on the wire (not outstanding, or a QP before the current one).
    template <class F>
    bool complete_through(uint64_t seq, F&& retire);

    // The current QP completed seq in error, and the connection ends
    // without resuming (resumption off, or the failure is not one to ride
    // through): seq, the oldest outstanding, leaves with retire(seq, false).
    // Returns false, changing nothing, when seq is not the head on the wire
    // (RC completes a send queue in order, and a resumable endpoint signals
    // every request).
    template <class F>
    bool fail_head(uint64_t seq, F&& retire);

    // The QP failed and every completion it made has been read: what is on
    // the wire is now in doubt. Nothing leaves.
    void qp_failed() noexcept;

    // The peer consumed n of this side's messages since the connection
    // began. Decides every operation in doubt: done (carried out), queued
    // (to be posted again), or, when one cannot be decided soundly, a
    // verdict other than resume, with *culprit the first such seq (for
    // count verdicts, n). Nothing changes unless the verdict is resume.
    verdict peer_consumed(uint64_t n, uint64_t* culprit) noexcept;

    // After verdict::resume: the done operations at the head leave, in
    // order (retire(seq, true)).
    template <class F>
    void retire_done(F&& retire);

    // The connection ends: every operation leaves in order; done ones and
    // nothing else with ok == true.
    template <class F>
    void cancel_all(F&& retire);

    op_kind kind(uint64_t seq) const noexcept { return at(seq).kind; }
    tx_state state(uint64_t seq) const noexcept { return at(seq).state; }
    // Messages this side has taken, and how many of them are known to have
    // been consumed (completed here).
    uint64_t messages_taken() const noexcept { return msgs_taken_; }
    uint64_t messages_acked() const noexcept { return msgs_acked_; }

  private:
    struct entry {
        op_kind kind = op_kind::message;
        tx_state state = tx_state::queued;
        // A message: its index among this side's messages. Anything else:
        // how many messages were taken before it (the index of the first
        // message after it).
        uint64_t mark = 0;
        remote_range range;
    };
    entry& at(uint64_t seq) noexcept { return ring_[slot_of(seq)]; }
    const entry& at(uint64_t seq) const noexcept { return ring_[slot_of(seq)]; }
    // The head leaves; ok says it completed.
    template <class F>
    void pop_head(bool ok, F& retire);
    verdict decide(uint64_t n, uint64_t* culprit) const noexcept;

    uint32_t cap_;
    uint32_t mask_;  // slots() - 1
    std::unique_ptr<entry[]> ring_;
    uint64_t head_ = 0;
    uint64_t tail_ = 0;
    uint64_t cursor_ = 0;      // first seq not yet posted on the current QP
    uint64_t msgs_taken_ = 0;  // messages add()ed
    uint64_t msgs_acked_ = 0;  // messages known consumed: mark + 1 of the last retired
};

template <class F>
void tx_ledger::pop_head(bool ok, F& retire) {
    entry& e = at(head_);
    if (ok && e.kind == op_kind::message && e.mark + 1 > msgs_acked_) msgs_acked_ = e.mark + 1;
    const uint64_t seq = head_++;
    if (cursor_ < head_) cursor_ = head_;
    retire(seq, ok);
}

template <class F>
bool tx_ledger::complete_through(uint64_t seq, F&& retire) {
    if (seq < head_ || seq >= cursor_ || at(seq).state != tx_state::on_wire) return false;
    for (uint64_t s = head_; s <= seq; ++s)
        if (at(s).state != tx_state::on_wire && at(s).state != tx_state::done) return false;
    while (head_ <= seq) pop_head(true, retire);
    retire_done(retire);
    return true;
}

template <class F>
bool tx_ledger::fail_head(uint64_t seq, F&& retire) {
    if (seq != head_ || seq >= cursor_) return false;
    const tx_state st = at(seq).state;
    if (st != tx_state::on_wire && st != tx_state::in_doubt) return false;
    pop_head(false, retire);
    return true;
}

template <class F>
void tx_ledger::retire_done(F&& retire) {
    while (head_ < tail_ && at(head_).state == tx_state::done) pop_head(true, retire);
}

template <class F>
void tx_ledger::cancel_all(F&& retire) {
    while (head_ < tail_) pop_head(at(head_).state == tx_state::done, retire);
}

}  // namespace evd::resume
