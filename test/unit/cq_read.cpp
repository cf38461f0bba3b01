// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The CQ's read path without a device (prov/src/cq/cq_read.cpp): a CQ whose
// ibv_cq is a fake handing out scripted work completions (ibv_poll_cq calls
// its context's poll_cq op), read through fi_cq_read's own code. What every
// completion becomes (emit), which are hidden or only noted (admit), and how
// an error waits in the ring with what came after it, in order.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/fi_eq.h>

#include <vector>

#include "cq/cq_state.h"
#include "fake_cq.h"

namespace {

using cqtest::kQpn;
using cqtest::test_cq;

uint64_t id_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(CqRead, SuccessesComeOutInOrderWithTheirContexts) {
    test_cq t;
    int ctx[3];
    for (int& x : ctx) t.push(id_of(&x));
    struct fi_cq_entry out[8] = {};
    ASSERT_EQ(t.read(out, 8), 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i].op_context, &ctx[i]) << i;
    EXPECT_EQ(t.read(out, 8), -FI_EAGAIN);
}

TEST(CqRead, AReadTakesNoMoreThanItsCount) {
    test_cq t;
    int ctx[5];
    for (int& x : ctx) t.push(id_of(&x));
    struct fi_cq_entry out[2] = {};
    ASSERT_EQ(t.read(out, 2), 2);
    EXPECT_EQ(out[1].op_context, &ctx[1]);
    ASSERT_EQ(t.read(out, 2), 2);
    EXPECT_EQ(out[0].op_context, &ctx[2]);
    ASSERT_EQ(t.read(out, 2), 1);
    EXPECT_EQ(out[0].op_context, &ctx[4]);
}

TEST(CqRead, AnErrorStopsTheReadAndWhatFollowsItWaitsInOrder) {
    test_cq t;
    int a, b, c, d;
    t.push(id_of(&a));
    t.push(id_of(&b), IBV_WC_REM_ACCESS_ERR);
    t.push(id_of(&c));
    t.push(id_of(&d));
    struct fi_cq_entry out[8] = {};
    ASSERT_EQ(t.read(out, 8), 1);
    EXPECT_EQ(out[0].op_context, &a);
    EXPECT_EQ(t.read(out, 8), -FI_EAVAIL);
    EXPECT_EQ(t.read(out, 8), -FI_EAVAIL) << "the error stays at the head until readerr";
    struct fi_cq_err_entry e = {};
    ASSERT_EQ(t.readerr(&e), 1);
    EXPECT_EQ(e.op_context, &b);
    EXPECT_EQ(e.err, evd::wc_fi_errno(IBV_WC_REM_ACCESS_ERR));
    EXPECT_EQ(e.prov_errno, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(e.err_data_size, 0u);
    ASSERT_EQ(t.read(out, 8), 2) << "what was polled after the error, from the ring";
    EXPECT_EQ(out[0].op_context, &c);
    EXPECT_EQ(out[1].op_context, &d);
    EXPECT_EQ(t.readerr(&e), -FI_EAGAIN);
}

TEST(CqRead, ReaderrFindsAnErrorNobodyPolledYet) {
    test_cq t;
    int a;
    t.push(id_of(&a), IBV_WC_WR_FLUSH_ERR);
    struct fi_cq_err_entry e = {};
    ASSERT_EQ(t.readerr(&e), 1);
    EXPECT_EQ(e.op_context, &a);
    EXPECT_EQ(e.err, FI_ECANCELED);
    struct fi_cq_entry out[2];
    EXPECT_EQ(t.read(out, 2), -FI_EAGAIN);
}

TEST(CqRead, EvdsOwnCompletionsAreNeverShownButMarkersAndProbesAreNoted) {
    test_cq t;
    int user;
    t.push(evd::wr_id_suppressed());  // a success nobody asked to see
    t.push(evd::wr_id_flush_marker());
    t.push(evd::wr_id_probe());
    t.push(id_of(&user));
    struct fi_cq_entry out[8] = {};
    ASSERT_EQ(t.read(out, 8), 1);
    EXPECT_EQ(out[0].op_context, &user);
    EXPECT_EQ(t.markers(), std::vector<uint32_t>{kQpn});
    EXPECT_EQ(t.probes(), std::vector<uint32_t>{kQpn});
}

TEST(CqRead, ARequestWithoutAContextIsNotShownEvenInError) {
    // ofi_rxm and MPI dereference an error entry's op_context: one that
    // nobody gave must never reach them (the endpoint's terminal event says it)
    test_cq t;
    int after;
    t.push(evd::wr_id_suppressed(), IBV_WC_RETRY_EXC_ERR);
    t.push(evd::wr_id_probe(), IBV_WC_RETRY_EXC_ERR);
    t.push(id_of(&after), IBV_WC_WR_FLUSH_ERR);
    struct fi_cq_entry out[4];
    EXPECT_EQ(t.read(out, 4), -FI_EAVAIL);
    struct fi_cq_err_entry e = {};
    ASSERT_EQ(t.readerr(&e), 1);
    EXPECT_EQ(e.op_context, &after);
    EXPECT_EQ(t.readerr(&e), -FI_EAGAIN);
    EXPECT_TRUE(t.probes().empty()) << "a failed probe is not a completed one";
}

TEST(CqRead, MsgAndDataFormatsCarryFlagsLengthAndImmediateData) {
    test_cq m(FI_CQ_FORMAT_MSG);
    int r;
    m.push(id_of(&r), IBV_WC_SUCCESS, IBV_WC_RECV, 100);
    struct fi_cq_msg_entry me[2] = {};
    ASSERT_EQ(m.read(me, 2), 1);
    EXPECT_EQ(me[0].op_context, &r);
    EXPECT_EQ(me[0].len, 100u);
    EXPECT_TRUE(me[0].flags & FI_RECV);

    test_cq d(FI_CQ_FORMAT_DATA);
    struct ibv_wc wc {};
    wc.wr_id = id_of(&r);
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = 8;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = htonl(0x12345678);
    wc.qp_num = kQpn;
    d.f.pending.push_back(wc);
    struct fi_cq_data_entry de[2] = {};
    ASSERT_EQ(d.read(de, 2), 1);
    EXPECT_EQ(de[0].len, 8u);
    EXPECT_EQ(de[0].data, 0x12345678u);
    EXPECT_TRUE(de[0].flags & FI_REMOTE_CQ_DATA);
}

TEST(CqRead, AReadLargerThanOnePollTakesEveryBatchInOrder) {
    // kCqPollBatch a poll: a read of 80 polls three times; evd's hidden
    // successes in the middle of a batch are dropped, the rest keep order
    test_cq t(FI_CQ_FORMAT_DATA);
    std::vector<int> ctx(75);
    size_t k = 0;
    for (size_t i = 0; i < 80; ++i) {
        if (i % 16 == 5) t.push(evd::wr_id_suppressed());
        else t.push(id_of(&ctx[k++]));
    }
    ASSERT_EQ(k, ctx.size());
    std::vector<struct fi_cq_data_entry> out(100);
    ASSERT_EQ(t.read(out.data(), out.size()), static_cast<ssize_t>(ctx.size()));
    for (size_t i = 0; i < ctx.size(); ++i) EXPECT_EQ(out[i].op_context, &ctx[i]) << i;
    EXPECT_GE(t.f.polls, 3);
    EXPECT_EQ(t.read(out.data(), out.size()), -FI_EAGAIN);
}

TEST(CqRead, AnErrorInALaterBatchStopsTheReadThere) {
    test_cq t(FI_CQ_FORMAT_DATA);
    std::vector<int> ctx(40);
    for (size_t i = 0; i < ctx.size(); ++i)
        t.push(id_of(&ctx[i]), i == 35 ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS);
    std::vector<struct fi_cq_data_entry> out(64);
    ASSERT_EQ(t.read(out.data(), out.size()), 35);
    EXPECT_EQ(out[34].op_context, &ctx[34]);
    EXPECT_EQ(t.read(out.data(), out.size()), -FI_EAVAIL);
    struct fi_cq_err_entry e = {};
    ASSERT_EQ(t.readerr(&e), 1);
    EXPECT_EQ(e.op_context, &ctx[35]);
    ASSERT_EQ(t.read(out.data(), out.size()), 4);
    EXPECT_EQ(out[3].op_context, &ctx[39]);
}

TEST(CqRead, ReadfromOnAConnectedCqGivesNoSource) {
    test_cq t(FI_CQ_FORMAT_MSG);
    int a, b;
    t.push(id_of(&a));
    t.push(id_of(&b));
    struct fi_cq_msg_entry out[4] = {};
    fi_addr_t from[4] = {1, 2, 3, 4};
    ASSERT_EQ(evd::cq_do_read(&t.c, out, 4, from), 2);
    EXPECT_EQ(out[1].op_context, &b);
    EXPECT_EQ(from[0], FI_ADDR_NOTAVAIL);
    EXPECT_EQ(from[1], FI_ADDR_NOTAVAIL);
    EXPECT_EQ(from[2], 3u) << "nothing written past what was read";
}

// fi_cq_read of one entry takes its own short path (cq_read_one): the same
// answers as the general read, one completion at a time.
TEST(CqReadOne, SuccessesAndNothingAreAnsweredAtOnce) {
    test_cq t;
    int a, b;
    t.push(id_of(&a));
    t.push(id_of(&b));
    struct fi_cq_entry e = {};
    ASSERT_EQ(t.read_one(&e), 1);
    EXPECT_EQ(e.op_context, &a);
    ASSERT_EQ(t.read_one(&e), 1);
    EXPECT_EQ(e.op_context, &b);
    EXPECT_EQ(t.read_one(&e), -FI_EAGAIN);
}

TEST(CqReadOne, EvdsOwnCompletionsArePassedOverToTheUsersNext) {
    test_cq t;
    int user;
    t.push(evd::wr_id_suppressed());
    t.push(evd::wr_id_flush_marker());
    t.push(evd::wr_id_probe());
    t.push(id_of(&user));
    struct fi_cq_entry e = {};
    ASSERT_EQ(t.read_one(&e), 1);
    EXPECT_EQ(e.op_context, &user);
    EXPECT_EQ(t.markers(), std::vector<uint32_t>{kQpn});
    EXPECT_EQ(t.probes(), std::vector<uint32_t>{kQpn});
    EXPECT_EQ(t.read_one(&e), -FI_EAGAIN);
}

TEST(CqReadOne, AnErrorWaitsInTheRingAndWhatFollowsComesAfterIt) {
    test_cq t;
    int a, b, c;
    t.push(id_of(&a));
    t.push(id_of(&b), IBV_WC_REM_ACCESS_ERR);
    t.push(id_of(&c));
    struct fi_cq_entry e = {};
    ASSERT_EQ(t.read_one(&e), 1);
    EXPECT_EQ(e.op_context, &a);
    EXPECT_EQ(t.read_one(&e), -FI_EAVAIL);
    EXPECT_EQ(t.read_one(&e), -FI_EAVAIL) << "the error stays at the head until readerr";
    struct fi_cq_err_entry err = {};
    ASSERT_EQ(t.readerr(&err), 1);
    EXPECT_EQ(err.op_context, &b);
    ASSERT_EQ(t.read_one(&e), 1) << "what was polled after the error";
    EXPECT_EQ(e.op_context, &c);
    EXPECT_EQ(t.read_one(&e), -FI_EAGAIN);
}

TEST(CqReadOne, TheDataFormatCarriesFlagsLengthAndImmediateData) {
    test_cq t(FI_CQ_FORMAT_DATA);
    int r;
    t.push(id_of(&r), IBV_WC_SUCCESS, IBV_WC_RECV, 8);
    t.f.pending.back().wc_flags = IBV_WC_WITH_IMM;
    t.f.pending.back().imm_data = htonl(0xabcd);
    struct fi_cq_data_entry e = {};
    ASSERT_EQ(t.read_one(&e), 1);
    EXPECT_EQ(e.op_context, &r);
    EXPECT_EQ(e.len, 8u);
    EXPECT_EQ(e.data, 0xabcdu);
    EXPECT_TRUE(e.flags & FI_RECV);
    EXPECT_TRUE(e.flags & FI_REMOTE_CQ_DATA);
}

TEST(CqRead, BadArgumentsAreRefusedWithoutPolling) {
    test_cq t;
    int a;
    t.push(id_of(&a));
    EXPECT_EQ(t.read(nullptr, 1), -FI_EINVAL);
    struct fi_cq_entry out[1];
    EXPECT_EQ(t.read(out, 0), 0);
    EXPECT_EQ(t.f.polls, 0);
    EXPECT_EQ(evd::cq_readerr(&t.c.fid, nullptr, 0), -FI_EINVAL);
}

}  // namespace
