// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The resume accounting's rules one at a time (prov/src/resume/): each case
// is a failure at a chosen point and what the ledgers must decide, as
// docs/resume.md states them. resume_sim.cpp runs the same code through
// random schedules.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "resume/rx_ledger.h"
#include "resume/tx_ledger.h"

namespace resume_ledger_test {

using evd::resume::op_kind;
using evd::resume::overlaps;
using evd::resume::remote_range;
using evd::resume::rx_ledger;
using evd::resume::tx_ledger;
using evd::resume::tx_state;
using evd::resume::verdict;

using retired_list = std::vector<std::pair<uint64_t, bool>>;

// Takes the operations in order and posts them on the QP.
std::vector<uint64_t> take(tx_ledger& l, std::initializer_list<op_kind> kinds) {
    std::vector<uint64_t> seqs;
    for (op_kind k : kinds) {
        uint64_t s = l.add(k, {0x1000, 8});
        seqs.push_back(s);
    }
    uint64_t q;
    while (l.next_queued(q)) l.posted(q);
    return seqs;
}

std::vector<uint64_t> queued(const tx_ledger& l) {
    std::vector<uint64_t> v;
    for (uint64_t s = l.head(); s < l.tail(); ++s)
        if (l.state(s) == tx_state::queued) v.push_back(s);
    return v;
}

TEST(ResumeLedger, CompletionsRetireInOrderUpToTheCompletedOne) {
    tx_ledger l(8);
    take(l, {op_kind::message, op_kind::write, op_kind::message});
    retired_list r;
    ASSERT_TRUE(l.complete_through(1, [&](uint64_t s, bool ok) { r.emplace_back(s, ok); }));
    EXPECT_EQ(r, (retired_list{{0, true}, {1, true}}));
    EXPECT_EQ(l.messages_acked(), 1u);
    EXPECT_EQ(l.outstanding(), 1u);
    // a completion for what already left, or was never posted, is refused
    EXPECT_FALSE(l.complete_through(1, [&](uint64_t, bool) { ADD_FAILURE(); }));
    EXPECT_FALSE(l.complete_through(5, [&](uint64_t, bool) { ADD_FAILURE(); }));
}

TEST(ResumeLedger, MessagesThePeerConsumedAreDoneTheRestReplayInOrder) {
    tx_ledger l(8);
    take(l, {op_kind::message, op_kind::message, op_kind::message, op_kind::message});
    retired_list r;
    ASSERT_TRUE(l.complete_through(0, [&](uint64_t s, bool ok) { r.emplace_back(s, ok); }));
    l.qp_failed();
    // the peer consumed 3: message 1 and 2 arrived although their
    // acknowledgements were lost; message 3 did not
    uint64_t culprit = 99;
    ASSERT_EQ(l.peer_consumed(3, &culprit), verdict::resume);
    EXPECT_EQ(l.state(1), tx_state::done);
    EXPECT_EQ(l.state(2), tx_state::done);
    EXPECT_EQ(queued(l), (std::vector<uint64_t>{3}));
    l.retire_done([&](uint64_t s, bool ok) { r.emplace_back(s, ok); });
    EXPECT_EQ(r, (retired_list{{0, true}, {1, true}, {2, true}}));
    uint64_t q;
    ASSERT_TRUE(l.next_queued(q));
    EXPECT_EQ(q, 3u);
}

TEST(ResumeLedger, AWriteBeforeAConsumedMessageIsDoneOneAfterIsReplayed) {
    tx_ledger l(8);
    take(l, {op_kind::write, op_kind::message, op_kind::write});
    l.qp_failed();
    ASSERT_EQ(l.peer_consumed(1, nullptr), verdict::resume);
    EXPECT_EQ(l.state(0), tx_state::done);
    EXPECT_EQ(l.state(1), tx_state::done);
    EXPECT_EQ(l.state(2), tx_state::queued);
}

TEST(ResumeLedger, ReplayedOperationsCompleteInOrderOnTheNewQp) {
    tx_ledger l(8);
    // a read and a message, both in doubt
    l.add(op_kind::read, {0x2000, 8});
    l.add(op_kind::message);
    uint64_t q;
    while (l.next_queued(q)) l.posted(q);
    l.qp_failed();
    // the peer consumed nothing: the read replays, the message too
    ASSERT_EQ(l.peer_consumed(0, nullptr), verdict::resume);
    EXPECT_EQ(queued(l), (std::vector<uint64_t>{0, 1}));
    retired_list r;
    l.retire_done([&](uint64_t s, bool ok) { r.emplace_back(s, ok); });
    EXPECT_TRUE(r.empty());
    while (l.next_queued(q)) l.posted(q);
    ASSERT_TRUE(l.complete_through(1, [&](uint64_t s, bool ok) { r.emplace_back(s, ok); }));
    EXPECT_EQ(r, (retired_list{{0, true}, {1, true}}));
}

TEST(ResumeLedger, AReadThePeerMayHaveActedAfterEndsTheConnection) {
    tx_ledger l(8);
    take(l, {op_kind::read, op_kind::message});
    l.qp_failed();
    uint64_t culprit = 99;
    EXPECT_EQ(l.peer_consumed(1, &culprit), verdict::read_in_doubt);
    EXPECT_EQ(culprit, 0u);
    EXPECT_EQ(l.state(0), tx_state::in_doubt) << "nothing changes on a verdict that ends";
}

TEST(ResumeLedger, AReadFollowedByAnOverlappingWriteInDoubtEndsTheConnection) {
    tx_ledger l(8);
    l.add(op_kind::read, {0x1000, 64});
    l.add(op_kind::write, {0x1030, 8});  // inside the read
    uint64_t q;
    while (l.next_queued(q)) l.posted(q);
    l.qp_failed();
    EXPECT_EQ(l.peer_consumed(0, nullptr), verdict::read_in_doubt);

    tx_ledger m(8);
    m.add(op_kind::read, {0x1000, 64});
    m.add(op_kind::write, {0x1040, 8});  // just past it
    while (m.next_queued(q)) m.posted(q);
    m.qp_failed();
    EXPECT_EQ(m.peer_consumed(0, nullptr), verdict::resume);
    EXPECT_EQ(queued(m), (std::vector<uint64_t>{0, 1}));
}

TEST(ResumeLedger, AtomicsAreNeverAppliedTwice) {
    // a base atomic before a consumed message was applied: done
    tx_ledger a(8);
    take(a, {op_kind::atomic, op_kind::message});
    a.qp_failed();
    EXPECT_EQ(a.peer_consumed(1, nullptr), verdict::resume);
    EXPECT_EQ(a.state(0), tx_state::done);
    // after the last consumed message: unknown
    tx_ledger b(8);
    take(b, {op_kind::message, op_kind::atomic});
    b.qp_failed();
    uint64_t culprit = 0;
    EXPECT_EQ(b.peer_consumed(1, &culprit), verdict::atomic_in_doubt);
    EXPECT_EQ(culprit, 1u);
    // a fetching atomic's result is lost either way
    tx_ledger c(8);
    take(c, {op_kind::fetch_atomic, op_kind::message});
    c.qp_failed();
    EXPECT_EQ(c.peer_consumed(1, nullptr), verdict::atomic_in_doubt);
}

TEST(ResumeLedger, ACountOutsideWhatWasSentAndAckedIsRefused) {
    tx_ledger l(8);
    take(l, {op_kind::message, op_kind::message});
    ASSERT_TRUE(l.complete_through(0, [](uint64_t, bool) {}));
    l.qp_failed();
    uint64_t culprit = 0;
    EXPECT_EQ(l.peer_consumed(0, &culprit), verdict::count_too_low);
    EXPECT_EQ(l.peer_consumed(3, &culprit), verdict::count_too_high);
    EXPECT_EQ(culprit, 3u);
    // a message taken while the connection was down was never sent
    l.add(op_kind::message);
    EXPECT_EQ(l.peer_consumed(3, nullptr), verdict::count_too_high);
    EXPECT_EQ(l.peer_consumed(2, nullptr), verdict::resume);
}

TEST(ResumeLedger, ASecondFailureDuringTheReplayDecidesAgain) {
    tx_ledger l(8);
    take(l, {op_kind::message, op_kind::message, op_kind::message});
    l.qp_failed();
    ASSERT_EQ(l.peer_consumed(1, nullptr), verdict::resume);
    l.retire_done([](uint64_t, bool) {});
    // message 1 goes out again, then the new QP fails too
    uint64_t q;
    ASSERT_TRUE(l.next_queued(q));
    EXPECT_EQ(q, 1u);
    l.posted(q);
    l.qp_failed();
    EXPECT_EQ(l.state(1), tx_state::in_doubt);
    EXPECT_EQ(l.state(2), tx_state::queued) << "never sent again: not in doubt";
    // the peer got message 1 the second time; message 2 was never re-sent,
    // so the peer cannot have consumed it
    EXPECT_EQ(l.peer_consumed(3, nullptr), verdict::count_too_high);
    ASSERT_EQ(l.peer_consumed(2, nullptr), verdict::resume);
    EXPECT_EQ(l.state(1), tx_state::done);
    EXPECT_EQ(queued(l), (std::vector<uint64_t>{2}));
}

TEST(ResumeLedger, EndingCompletesEverythingInOrderOnlyWhatWasCarriedOutSucceeds) {
    tx_ledger l(8);
    take(l, {op_kind::message, op_kind::read, op_kind::message, op_kind::fetch_atomic});
    l.qp_failed();
    ASSERT_EQ(l.peer_consumed(0, nullptr), verdict::atomic_in_doubt);
    retired_list r;
    l.cancel_all([&](uint64_t s, bool ok) { r.emplace_back(s, ok); });
    EXPECT_EQ(r, (retired_list{{0, false}, {1, false}, {2, false}, {3, false}}));
    EXPECT_EQ(l.outstanding(), 0u);
}

TEST(ResumeLedger, TheLedgerHoldsAsManyAsTheQueueAndWraps) {
    tx_ledger l(4);
    for (int round = 0; round < 5; ++round) {
        while (!l.full()) l.add(op_kind::message);
        uint64_t q;
        while (l.next_queued(q)) l.posted(q);
        ASSERT_TRUE(l.complete_through(l.tail() - 1, [](uint64_t, bool) {}));
    }
    EXPECT_EQ(l.tail(), 20u);
    EXPECT_EQ(l.messages_acked(), 20u);
}

TEST(ResumeLedger, SlotsAreAPowerOfTwoAndNeverShared) {
    tx_ledger l(5);
    EXPECT_EQ(l.capacity(), 5u);
    EXPECT_EQ(l.slots(), 8u);
    // the outstanding operations always sit in distinct slots
    for (int round = 0; round < 7; ++round) {
        std::vector<bool> used(l.slots());
        while (!l.full()) {
            const uint64_t s = l.add(op_kind::message);
            ASSERT_FALSE(used[l.slot_of(s)]) << "seq " << s;
            used[l.slot_of(s)] = true;
        }
        uint64_t q;
        while (l.next_queued(q)) l.posted(q);
        ASSERT_TRUE(l.complete_through(l.tail() - 1, [](uint64_t, bool) {}));
    }
    EXPECT_EQ(tx_ledger(0).capacity(), 1u);
    EXPECT_EQ(rx_ledger(0).slots(), 1u);
    EXPECT_EQ(rx_ledger(1000).slots(), 1024u);
    EXPECT_EQ(rx_ledger(UINT32_MAX).capacity(), evd::resume::kMaxLedger);
}

TEST(ResumeLedger, RangesOverlapWithoutWrapping) {
    struct row {
        remote_range a, b;
        bool overlap;
    } rows[] = {
        {{0x1000, 8}, {0x1000, 8}, true},
        {{0x1000, 8}, {0x1008, 8}, false},
        {{0x1008, 8}, {0x1000, 9}, true},
        {{0x1000, 0}, {0x1000, 8}, false},
        {{UINT64_MAX - 7, 8}, {0, 8}, false},
        {{UINT64_MAX - 7, UINT64_MAX}, {UINT64_MAX, 1}, true},
    };
    for (const row& r : rows) {
        EXPECT_EQ(overlaps(r.a, r.b), r.overlap) << r.a.addr << "+" << r.a.len;
        EXPECT_EQ(overlaps(r.b, r.a), r.overlap) << r.b.addr << "+" << r.b.len;
    }
}

TEST(ResumeLedger, ReceivesTheFailedQpFlushedArePostedAgainInOrder) {
    rx_ledger r(4);
    for (int i = 0; i < 3; ++i) r.add();
    uint64_t q;
    while (r.next_queued(q)) r.posted(q);
    uint64_t s = 99;
    ASSERT_TRUE(r.consume(&s));
    EXPECT_EQ(s, 0u);
    r.qp_failed();
    std::vector<uint64_t> again;
    while (r.next_queued(q)) {
        again.push_back(q);
        r.posted(q);
    }
    EXPECT_EQ(again, (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(r.consumed(), 1u);
    r.count_shared();
    EXPECT_EQ(r.consumed(), 2u);
    std::vector<uint64_t> left;
    r.cancel_all([&](uint64_t x) { left.push_back(x); });
    EXPECT_EQ(left, (std::vector<uint64_t>{1, 2}));
    EXPECT_FALSE(r.consume(&s)) << "nothing on the wire";
}

TEST(ResumeLedger, APostThatFailedLeavesAsIfNeverTaken) {
    tx_ledger l(4);
    take(l, {op_kind::message});
    const uint64_t s = l.add(op_kind::message);
    EXPECT_FALSE(l.take_back(0)) << "only the newest, still queued";
    ASSERT_TRUE(l.take_back(s));
    EXPECT_EQ(l.tail(), s);
    EXPECT_EQ(l.messages_taken(), 1u) << "the message count goes back too";
    EXPECT_FALSE(l.take_back(s)) << "it is gone";
    // the next operation takes its seq and its message index
    const uint64_t t = l.add(op_kind::message);
    EXPECT_EQ(t, s);
    l.posted(t);
    uint64_t culprit = 0;
    EXPECT_EQ(l.peer_consumed(2, &culprit), verdict::resume);

    rx_ledger r(2);
    const uint64_t a = r.add();
    EXPECT_TRUE(r.take_back(a));
    EXPECT_EQ(r.outstanding(), 0u);
    r.posted(r.add());
    EXPECT_FALSE(r.take_back(0)) << "on the wire already";
}

TEST(ResumeLedger, WithoutResumingAFailedQpRetiresEachOperationInOrderAsFailed) {
    tx_ledger l(8);
    take(l, {op_kind::message, op_kind::read, op_kind::fetch_atomic});
    retired_list r;
    auto note = [&](uint64_t s, bool ok) { r.emplace_back(s, ok); };
    ASSERT_TRUE(l.complete_through(0, note));
    EXPECT_FALSE(l.fail_head(2, note)) << "not the head: completions come in order";
    ASSERT_TRUE(l.fail_head(1, note));
    ASSERT_TRUE(l.fail_head(2, note));
    EXPECT_FALSE(l.fail_head(3, note)) << "never taken";
    EXPECT_EQ(r, (retired_list{{0, true}, {1, false}, {2, false}}));
    EXPECT_EQ(l.outstanding(), 0u);
    EXPECT_EQ(l.messages_acked(), 1u) << "a failed operation acknowledges nothing";

    rx_ledger x(4);
    for (int i = 0; i < 2; ++i) x.posted(x.add());
    uint64_t s = 99;
    ASSERT_TRUE(x.consume(&s));
    ASSERT_TRUE(x.fail_head(&s));
    EXPECT_EQ(s, 1u);
    EXPECT_FALSE(x.fail_head(&s)) << "nothing on the wire";
    EXPECT_EQ(x.consumed(), 1u) << "a failed receive consumed nothing";
}

}  // namespace resume_ledger_test
