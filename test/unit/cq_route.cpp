// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Which QPs complete into a CQ, without a device (prov/src/cq/cq_route.cpp):
// cq_attach_qp and cq_detach_qp on a CQ whose ibv_cq is a fake
// (fake_cq.h), the datagram admission list, and the pulls that the closing
// flush (cq_pull_marker) and progress probes (cq_pull_probe) wait with: what
// they pull on the way is kept for the application, in order.
#include <gtest/gtest.h>

#include <vector>

#include "cq/cq_state.h"
#include "fake_cq.h"
#include "msg/ep.h"

namespace {

using cqtest::kQpn;
using cqtest::test_cq;

uint64_t ctx_id(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// An endpoint as fi_enable leaves it for the CQ's purposes: bound to `tx`
// and `rx`, of kind T (an FI_EP_MSG endpoint unless said), with no
// counters (no data-path state).
template <class T = evd::msg_ep>
struct test_ep {
    T e;
    test_ep(evd::cq* tx, evd::cq* rx) {
        e.tx_cq = tx;
        e.rx_cq = rx;
    }
};

TEST(CqRoute, AnAttachedQpIsListedAndItsDetachForgetsIt) {
    test_cq t;
    test_ep<> a(&t.c, &t.c), b(&t.c, &t.c);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, 10, &a.e), 0);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, 11, &b.e), 0);
    EXPECT_EQ(t.qps(), (std::vector<uint32_t>{10, 11}));
    evd::cq_detach_qp(&t.c, 10);
    EXPECT_EQ(t.qps(), std::vector<uint32_t>{11});
    evd::cq_detach_qp(&t.c, 10);  // twice: nothing more happens
    evd::cq_detach_qp(&t.c, 11);
    EXPECT_TRUE(t.qps().empty());
}

TEST(CqRoute, OnlyADatagramEndpointsReceiveCqAdmitsItsQpAsDatagrams) {
    test_cq rx, tx;
    test_ep<evd::ud_ep> ud(&tx.c, &rx.c);
    test_ep<> rc(&tx.c, &rx.c);
    ASSERT_EQ(evd::cq_attach_qp(&rx.c, 20, &ud.e), 0);
    ASSERT_EQ(evd::cq_attach_qp(&tx.c, 20, &ud.e), 0);
    ASSERT_EQ(evd::cq_attach_qp(&rx.c, 21, &rc.e), 0);
    EXPECT_EQ(rx.ud_qps(), std::vector<uint32_t>{20});
    EXPECT_TRUE(tx.ud_qps().empty()) << "its sends carry no header to strip";
    evd::cq_detach_qp(&rx.c, 20);
    EXPECT_TRUE(rx.ud_qps().empty());
    evd::cq_detach_qp(&tx.c, 20);
    evd::cq_detach_qp(&rx.c, 21);
}

TEST(CqRoute, ADetachedQpNumberLeavesNoMarkerOrProbeForTheNextQpOfThatNumber) {
    test_cq t;
    test_ep<> a(&t.c, &t.c);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, kQpn, &a.e), 0);
    t.push(evd::wr_id_flush_marker());
    t.push(evd::wr_id_probe());
    struct fi_cq_entry out[4];
    EXPECT_EQ(t.read(out, 4), -FI_EAGAIN);
    ASSERT_EQ(t.markers(), std::vector<uint32_t>{kQpn});
    ASSERT_EQ(t.probes(), std::vector<uint32_t>{kQpn});
    evd::cq_detach_qp(&t.c, kQpn);
    EXPECT_TRUE(t.markers().empty());
    EXPECT_TRUE(t.probes().empty());
    // a later QP given the same number: its own flush waits for its own marker
    test_ep<> b(&t.c, &t.c);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, kQpn, &b.e), 0);
    EXPECT_EQ(evd::cq_pull_marker(&t.c, kQpn), 0) << "the old QP's marker counted for it";
    evd::cq_detach_qp(&t.c, kQpn);
}

TEST(CqRoute, PullingAMarkerKeepsWhatCameBeforeItForTheApplicationInOrder) {
    test_cq t;
    test_ep<> a(&t.c, &t.c);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, kQpn, &a.e), 0);
    int x, y, z;
    t.push(ctx_id(&x));
    t.push(ctx_id(&y), IBV_WC_WR_FLUSH_ERR);
    t.push(evd::wr_id_flush_marker());
    t.push(ctx_id(&z));  // after the marker: polled in the same batch, kept
    ASSERT_EQ(evd::cq_pull_marker(&t.c, kQpn), 1);
    EXPECT_TRUE(t.markers().empty()) << "a pulled marker is taken";
    struct fi_cq_entry out[4] = {};
    ASSERT_EQ(t.read(out, 4), 1);
    EXPECT_EQ(out[0].op_context, &x);
    struct fi_cq_err_entry e = {};
    ASSERT_EQ(t.readerr(&e), 1);
    EXPECT_EQ(e.op_context, &y);
    EXPECT_EQ(e.err, FI_ECANCELED);
    ASSERT_EQ(t.read(out, 4), 1);
    EXPECT_EQ(out[0].op_context, &z);
    evd::cq_detach_qp(&t.c, kQpn);
}

TEST(CqRoute, AnotherQpsMarkerDoesNotEndThePull) {
    test_cq t;
    test_ep<> a(&t.c, &t.c), b(&t.c, &t.c);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, kQpn, &a.e), 0);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, kQpn + 1, &b.e), 0);
    t.push(evd::wr_id_flush_marker(), IBV_WC_SUCCESS, IBV_WC_SEND, 0, kQpn + 1);
    EXPECT_EQ(evd::cq_pull_marker(&t.c, kQpn), 0) << "the CQ ran dry without kQpn's";
    EXPECT_EQ(t.markers(), std::vector<uint32_t>{kQpn + 1}) << "noted for its own pull";
    EXPECT_EQ(evd::cq_pull_marker(&t.c, kQpn + 1), 1);
    evd::cq_detach_qp(&t.c, kQpn);
    evd::cq_detach_qp(&t.c, kQpn + 1);
}

TEST(CqRoute, AProbePullFindsItsProbeBehindTheApplicationsCompletions) {
    test_cq t;
    test_ep<> a(&t.c, &t.c);
    ASSERT_EQ(evd::cq_attach_qp(&t.c, kQpn, &a.e), 0);
    int x;
    t.push(ctx_id(&x));
    t.push(evd::wr_id_probe());
    ASSERT_EQ(evd::cq_pull_probe(&t.c, kQpn), 1);
    EXPECT_TRUE(t.probes().empty());
    struct fi_cq_entry out[2] = {};
    ASSERT_EQ(t.read(out, 2), 1);
    EXPECT_EQ(out[0].op_context, &x);
    evd::cq_detach_qp(&t.c, kQpn);
}

TEST(CqRoute, ProgressMovesCompletionsToTheRingWithoutShowingEvdsOwn) {
    test_cq t;
    int x, y;
    t.push(ctx_id(&x));
    t.push(evd::wr_id_suppressed());
    t.push(ctx_id(&y));
    EXPECT_EQ(evd::cq_progress(&t.c), 3) << "every completion polled counts";
    EXPECT_TRUE(t.f.pending.empty());
    struct fi_cq_entry out[4] = {};
    ASSERT_EQ(t.read(out, 4), 2);
    EXPECT_EQ(out[0].op_context, &x);
    EXPECT_EQ(out[1].op_context, &y);
}

}  // namespace
