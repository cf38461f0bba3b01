// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// What a resumable endpoint keeps of an operation (resume/op_store.h) and
// what its ledger takes it as (msg/ep_resume.h, rs_op_kind): the copy must
// post exactly what the application posted, with inline bytes that survive
// the application's reuse of its buffer.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <vector>

#include "msg/ep_resume.h"
#include "resume/op_store.h"

namespace resume_op_store_test {

using evd::resume::keep_error;
using evd::resume::op_kind;
using evd::resume::op_store;

TEST(ResumeOpStore, ASendIsKeptAsPostedWithItsOwnScatterList) {
    op_store st(4, 3, 32, 4, 2);
    struct ibv_sge sg[2] = {{0x1000, 10, 7}, {0x2000, 20, 8}};
    struct ibv_send_wr wr {};
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.sg_list = sg;
    wr.num_sge = 2;
    wr.imm_data = 0x01020304;
    wr.wr.rdma.remote_addr = 0xabc0;
    wr.wr.rdma.rkey = 99;
    wr.send_flags = IBV_SEND_FENCE;
    int ctx;
    uint64_t bytes = 0;
    ASSERT_EQ(st.keep_send(2, wr, &ctx, 1, false, false, &bytes), keep_error::none);
    EXPECT_EQ(bytes, 30u) << "what the list covers";
    sg[0].addr = 0xdead;  // the application's list is its own again
    const auto& op = st.send(2);
    EXPECT_EQ(op.context, &ctx);
    EXPECT_EQ(op.counter, 1);
    EXPECT_FALSE(op.hidden);
    EXPECT_EQ(op.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
    EXPECT_EQ(op.wr.imm_data, 0x01020304u);
    EXPECT_EQ(op.wr.wr.rdma.remote_addr, 0xabc0u);
    EXPECT_EQ(op.wr.wr.rdma.rkey, 99u);
    EXPECT_EQ(op.wr.send_flags, static_cast<unsigned>(IBV_SEND_FENCE));
    EXPECT_EQ(op.wr.next, nullptr);
    ASSERT_EQ(op.wr.num_sge, 2);
    EXPECT_NE(op.wr.sg_list, sg);
    EXPECT_EQ(op.wr.sg_list[0].addr, 0x1000u);
    EXPECT_EQ(op.wr.sg_list[1].lkey, 8u);
    EXPECT_GT(st.bytes(), 0u);
}

TEST(ResumeOpStore, InlineBytesAreCopiedSoTheApplicationMayReuseItsBuffer) {
    op_store st(2, 2, 16, 2, 1);
    std::vector<uint8_t> a(6, 0x11), b(10, 0x22);
    struct ibv_sge sg[2] = {{reinterpret_cast<uintptr_t>(a.data()), 6, 0},
                            {reinterpret_cast<uintptr_t>(b.data()), 10, 0}};
    struct ibv_send_wr wr {};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = sg;
    wr.num_sge = 2;
    wr.send_flags = IBV_SEND_INLINE;
    ASSERT_EQ(st.keep_send(1, wr, nullptr, 0, false, true), keep_error::none);
    std::memset(a.data(), 0, a.size());
    std::memset(b.data(), 0, b.size());
    const auto& op = st.send(1);
    ASSERT_EQ(op.wr.num_sge, 1) << "one entry over the slot's copy";
    ASSERT_EQ(op.wr.sg_list[0].length, 16u);
    const auto* p = reinterpret_cast<const uint8_t*>(op.wr.sg_list[0].addr);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(p[i], i < 6 ? 0x11 : 0x22) << i;
    EXPECT_TRUE(op.hidden);
    // another slot's copy is elsewhere
    ASSERT_EQ(st.keep_send(0, wr, nullptr, 0, false, true), keep_error::none);
    EXPECT_NE(st.send(0).wr.sg_list[0].addr, op.wr.sg_list[0].addr);
}

TEST(ResumeOpStore, WhatCannotBeKeptIsRefusedAndNamed) {
    op_store st(2, 1, 8, 2, 1);
    uint8_t buf[16] = {};
    struct ibv_sge sg[2] = {{reinterpret_cast<uintptr_t>(buf), 9, 0},
                            {reinterpret_cast<uintptr_t>(buf), 1, 0}};
    struct ibv_send_wr wr {};
    wr.sg_list = sg;
    wr.num_sge = 2;
    EXPECT_EQ(st.keep_send(0, wr, nullptr, 0, false, false), keep_error::too_many_sges);
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_INLINE;
    EXPECT_EQ(st.keep_send(0, wr, nullptr, 0, false, false), keep_error::inline_too_big);
    struct ibv_recv_wr rw {};
    rw.sg_list = sg;
    rw.num_sge = 2;
    EXPECT_EQ(st.keep_recv(0, rw, 5), keep_error::too_many_sges);
    rw.num_sge = 1;
    ASSERT_EQ(st.keep_recv(1, rw, 5), keep_error::none);
    EXPECT_EQ(st.recv(1).user_id, 5u);
    EXPECT_EQ(st.recv(1).wr.sg_list[0].length, 9u);
    for (auto e : {keep_error::none, keep_error::too_many_sges, keep_error::inline_too_big})
        EXPECT_STRNE(evd::resume::keep_error_text(e), "unknown");
}

// What a completion reports, as without resumption (cq.h): a success
// nobody asked for is hidden, its failure is shown with its context; an
// operation without a context (fi_inject) shows neither.
TEST(ResumeOpStore, AFailureIsShownUnlessTheOperationHasNoContext) {
    op_store st(4, 1, 8, 1, 1);
    struct ibv_send_wr wr {};
    int ctx;
    struct row {
        bool hidden, no_ctx, ok;
        bool shown;
    } rows[] = {
        {false, false, true, true},  {false, false, false, true},  // asked for
        {true, false, true, false},  {true, false, false, true},   // selective, no FI_COMPLETION
        {false, true, true, false},  {false, true, false, false},  // fi_inject
    };
    for (const row& r : rows) {
        ASSERT_EQ(st.keep_send(0, wr, &ctx, 0, r.hidden, r.no_ctx), keep_error::none);
        const uint64_t id = evd::rs_report_id(st.send(0), r.ok);
        EXPECT_EQ(id != evd::wr_id_suppressed(), r.shown)
            << r.hidden << r.no_ctx << r.ok;
        if (r.shown) { EXPECT_EQ(id, reinterpret_cast<uintptr_t>(&ctx)); }
    }
}

// One row per opcode evd posts: what the ledger must take it as.
TEST(ResumeOpStore, EachOpcodeIsTakenAsTheKindItsRuleNeeds) {
    uint64_t sink = 0, other = 0;
    const uintptr_t sink_addr = reinterpret_cast<uintptr_t>(&sink);
    struct row {
        enum ibv_wr_opcode op;
        uintptr_t sge_addr;
        op_kind want;
    } rows[] = {
        {IBV_WR_SEND, 0, op_kind::message},
        {IBV_WR_SEND_WITH_IMM, 0, op_kind::message},
        {IBV_WR_RDMA_WRITE_WITH_IMM, 0, op_kind::message},  // consumes a receive
        {IBV_WR_RDMA_WRITE, 0, op_kind::write},
        {IBV_WR_RDMA_READ, 0, op_kind::read},
        {IBV_WR_ATOMIC_FETCH_AND_ADD, sink_addr, op_kind::atomic},  // base FI_SUM
        {IBV_WR_ATOMIC_FETCH_AND_ADD, reinterpret_cast<uintptr_t>(&other), op_kind::fetch_atomic},
        {IBV_WR_ATOMIC_CMP_AND_SWP, sink_addr, op_kind::fetch_atomic},
    };
    for (const row& r : rows) {
        struct ibv_sge sg {r.sge_addr, 8, 0};
        struct ibv_send_wr wr {};
        wr.opcode = r.op;
        wr.sg_list = &sg;
        wr.num_sge = 1;
        EXPECT_EQ(evd::rs_op_kind(wr, sink_addr), r.want) << r.op;
    }
    // a domain without a sink has no result-less atomic
    struct ibv_sge sg {0, 8, 0};
    struct ibv_send_wr wr {};
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    EXPECT_EQ(evd::rs_op_kind(wr, 0), op_kind::fetch_atomic);
}

}  // namespace resume_op_store_test
