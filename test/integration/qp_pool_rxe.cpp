// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// QP reuse (qp_pool.h) on Soft-RoCE: a server domain on rxe0 and a client
// domain on rxe1 keep their CQs and EQs while endpoints come and go; each
// closed connection's QPs are kept, wait out rdma_cm's time-wait, are reset
// and taken by the next endpoints. The tests check that a reused QP carries
// nothing of its previous connection: receives the application left posted
// complete (FI_ECANCELED) before the QP is reused and never match a message
// of the next connection; sends stuck on a peer without receives complete at
// close; a reused QP is never handed out before its time-wait ends; a fatal
// completion on a reused QP ends the endpoint that has it now; closing the
// CQs or the domain a kept QP still holds succeeds. Counters come from
// fi_control(FI_EVD_QP_POOL_STATS).
// Runs inside the VM: test/vm/run-in-vm -- ./evd_integration --gtest_filter='QpPool*'
#include <gtest/gtest.h>
#include <rdma/fi_ext_evd.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "rxe_util.h"

namespace {

using rxetest::cm_rec;

constexpr size_t kMsg = 64;
constexpr int kTimewaitMs = 15000;  // rxe's time-wait is about 2 s; FI_EVD_QP_POOL_TIMEWAIT 10 s

class QpPoolRxe : public rxetest::PairFixture<QpPoolRxe> {
    friend class rxetest::PairFixture<QpPoolRxe>;

protected:
    // Per side: one buffer of 32 messages, registered once on the domain.
    struct bufs {
        std::vector<uint8_t> mem = std::vector<uint8_t>(32 * kMsg);
        struct fid_mr* mr = nullptr;
        uint8_t* at(size_t i) { return mem.data() + i * kMsg; }
        void* desc() const { return fi_mr_desc(mr); }
    };
    bufs sb, cb;
    int ctx[4][32] = {};  // contexts: generation x slot

    void SetUp() override {
        if (rxetest::on_iwarp()) GTEST_SKIP() << "evd keeps no QP for reuse on iWARP (fi_evd(7), IWARP)";
        PairFixture::SetUp();
        if (IsSkipped()) return;
        ASSERT_NO_FATAL_FAILURE(listen());
        ASSERT_NO_FATAL_FAILURE(open_client());
    }
    void TearDown() override {
        if (s.ep) { EXPECT_EQ(fi_close(&s.ep->fid), 0); }
        if (c.ep) { EXPECT_EQ(fi_close(&c.ep->fid), 0); }
        s.ep = c.ep = nullptr;
        if (sb.mr) { EXPECT_EQ(fi_close(&sb.mr->fid), 0); }
        if (cb.mr) { EXPECT_EQ(fi_close(&cb.mr->fid), 0); }
        close_side(c);
        close_side(s);
        close_listener();
    }

    struct fi_info* pair_hints() { return rxetest::rma_hints(16); }
    // The first request opens the side's domain, CQs and buffer; later
    // ones only a new endpoint on them.
    void open_side(rxetest::pair_side& x, struct fi_info* info) {
        bufs& b = &x == &s ? sb : cb;
        if (!x.dom) {
            ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
            ASSERT_NO_FATAL_FAILURE(open_cqs(x, FI_WAIT_NONE, 256));
            ASSERT_EQ(fi_mr_reg(x.dom, b.mem.data(), b.mem.size(), FI_SEND | FI_RECV | FI_WRITE,
                                0, 0, 0, &b.mr, nullptr),
                      0);
        } else {
            fi_freeinfo(x.info);
            x.info = info;
        }
        ASSERT_NO_FATAL_FAILURE(open_endpoint(x));
        ASSERT_EQ(fi_enable(x.ep), 0);
    }

    // A new client endpoint on c's domain connects; the server accepts on a
    // new endpoint of s's. post(side) runs on each before connect/accept.
    template <class F>
    void reconnect(F post) {
        ASSERT_NO_FATAL_FAILURE(open_side(c, fi_dupinfo(c.info)));
        ASSERT_NO_FATAL_FAILURE(handshake(post));
    }
    void reconnect() {
        reconnect([](rxetest::pair_side&) {});
    }

    // The client shuts the connection down; both sides see FI_SHUTDOWN and
    // close their endpoints.
    void disconnect() {
        ASSERT_EQ(fi_shutdown(c.ep, 0), 0);
        for (auto* x : {&s, &c}) {
            cm_rec r = next_event(x->eq);
            ASSERT_GT(r.rc, 0) << rxetest::describe(r);
            EXPECT_EQ(r.event, static_cast<uint32_t>(FI_SHUTDOWN));
            EXPECT_EQ(r.fid, &x->ep->fid);
        }
        EXPECT_EQ(fi_close(&c.ep->fid), 0);
        EXPECT_EQ(fi_close(&s.ep->fid), 0);
        c.ep = s.ep = nullptr;
    }

    // The server closes its endpoint while connected (its QP still takes
    // messages); the client sees FI_SHUTDOWN and closes its own.
    void server_closes() {
        EXPECT_EQ(fi_close(&s.ep->fid), 0);
        s.ep = nullptr;
        cm_rec r = next_event(c.eq);
        ASSERT_GT(r.rc, 0) << rxetest::describe(r);
        EXPECT_EQ(r.event, static_cast<uint32_t>(FI_SHUTDOWN));
        EXPECT_EQ(fi_close(&c.ep->fid), 0);
        c.ep = nullptr;
    }

    static struct fi_evd_qp_pool_stats pool(rxetest::pair_side& x) {
        struct fi_evd_qp_pool_stats st {};
        EXPECT_EQ(fi_control(&x.dom->fid, FI_EVD_QP_POOL_STATS, &st), 0);
        return st;
    }
    // Both sides' endpoints so far: `reused` took a kept QP, `created` made one.
    void expect_endpoints(uint64_t reused, uint64_t created) {
        for (auto* x : {&s, &c}) {
            auto st = pool(*x);
            EXPECT_EQ(st.reused, reused) << (x == &s ? "server" : "client");
            EXPECT_EQ(st.created, created) << (x == &s ? "server" : "client");
        }
    }
    // Progresses every EQ (time-wait's end comes through rdma_cm's channel)
    // until both sides have `n` idle QPs; false after kTimewaitMs.
    bool wait_idle(uint64_t n) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimewaitMs);
        while (std::chrono::steady_clock::now() < end) {
            rxetest::pump_eqs(fab, {peq, s.eq, c.eq}, nullptr);
            if (pool(s).idle >= n && pool(c).idle >= n) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
    }

    void post_recv(rxetest::pair_side& x, size_t slot, int gen) {
        bufs& b = &x == &s ? sb : cb;
        std::memset(b.at(slot), 0, kMsg);
        ASSERT_EQ(fi_recv(x.ep, b.at(slot), kMsg, b.desc(), 0, &ctx[gen][slot]), 0);
    }
    void post_send(rxetest::pair_side& x, size_t slot, int gen, uint8_t fill) {
        bufs& b = &x == &s ? sb : cb;
        std::memset(b.at(slot), fill, kMsg);
        ASSERT_EQ(fi_send(x.ep, b.at(slot), kMsg, b.desc(), 0, &ctx[gen][slot]), 0);
    }
    // The next completion of cq: its context, or nullptr (none within ms);
    // *err gets the error of an error completion, 0 otherwise.
    static void* next_completion(struct fid_cq* cq, int* err, int ms = 5000) {
        struct fi_cq_data_entry e {};
        ssize_t r = rxetest::cq_wait_one(cq, e, ms);
        *err = 0;
        if (r == 1) return e.op_context;
        if (r != -FI_EAVAIL) return nullptr;
        struct fi_cq_err_entry ee {};
        EXPECT_EQ(fi_cq_readerr(cq, &ee, 0), 1);
        *err = ee.err;
        return ee.op_context;
    }
    // True when cq has nothing to read.
    static bool cq_empty(struct fid_cq* cq) {
        struct fi_cq_data_entry e {};
        return fi_cq_read(cq, &e, 1) == -FI_EAGAIN;
    }
};

// The QPs of a closed connection are kept, wait out the time-wait, and the
// next connection's endpoints on both sides take them; data flows on it.
TEST_F(QpPoolRxe, AClosedConnectionsQpsAreReusedAfterTheTimewait) {
    ASSERT_NO_FATAL_FAILURE(handshake([](rxetest::pair_side&) {}));
    ASSERT_NO_FATAL_FAILURE(rxetest::message_flows(c.dom, c.ep, c.tx, s.dom, s.ep, s.rx,
                                                   std::vector<uint8_t>(kMsg, 0x11)));
    ASSERT_NO_FATAL_FAILURE(disconnect());
    for (auto* x : {&s, &c}) {
        auto st = pool(*x);
        EXPECT_EQ(st.created, 1u);
        EXPECT_EQ(st.retired, 1u);
        EXPECT_EQ(st.discarded, 0u);
        EXPECT_EQ(st.waiting + st.idle, 1u);
    }
    ASSERT_TRUE(wait_idle(1)) << "no QP became idle: RDMA_CM_EVENT_TIMEWAIT_EXIT never came";
    ASSERT_NO_FATAL_FAILURE(reconnect());
    expect_endpoints(1, 1);
    EXPECT_EQ(pool(s).idle + pool(c).idle, 0u);
    ASSERT_NO_FATAL_FAILURE(rxetest::message_flows(c.dom, c.ep, c.tx, s.dom, s.ep, s.rx,
                                                   std::vector<uint8_t>(kMsg, 0x22)));
    ASSERT_NO_FATAL_FAILURE(rxetest::message_flows(s.dom, s.ep, s.tx, c.dom, c.ep, c.rx,
                                                   std::vector<uint8_t>(kMsg, 0x33)));
}

// A connection made right after one closed does not get its QPs: the peer
// could still address them until the time-wait ends.
TEST_F(QpPoolRxe, AQpIsNotReusedBeforeItsTimewaitEnds) {
    ASSERT_NO_FATAL_FAILURE(handshake([](rxetest::pair_side&) {}));
    ASSERT_NO_FATAL_FAILURE(disconnect());
    ASSERT_NO_FATAL_FAILURE(reconnect());
    expect_endpoints(0, 2);
    EXPECT_EQ(pool(s).retired + pool(c).retired, 2u);
    ASSERT_NO_FATAL_FAILURE(rxetest::message_flows(c.dom, c.ep, c.tx, s.dom, s.ep, s.rx,
                                                   std::vector<uint8_t>(kMsg, 0x44)));
}

// Receives the server left posted complete with FI_ECANCELED, each once and
// in order, before its QP is reused; the next connection's messages land
// only in that connection's receives. Four generations on one QP: the client
// shuts the connection down (the server's QP leaves RTS at the disconnect),
// or the server closes its endpoint while connected (its QP is still in RTS
// at fi_close), in turn.
TEST_F(QpPoolRxe, ReceivesLeftPostedNeverReachTheNextConnection) {
    constexpr int kPosted = 8, kSent = 3;
    for (int gen = 0; gen < 4; ++gen) {
        auto post = [&](rxetest::pair_side& x) {
            if (&x != &s) return;
            for (int i = 0; i < kPosted; ++i) post_recv(s, i, gen);
        };
        if (gen == 0)
            ASSERT_NO_FATAL_FAILURE(handshake(post));
        else
            ASSERT_NO_FATAL_FAILURE(reconnect(post));
        EXPECT_EQ(pool(s).reused, static_cast<uint64_t>(gen));
        for (int i = 0; i < kSent; ++i)
            ASSERT_NO_FATAL_FAILURE(post_send(c, 16 + i, gen, static_cast<uint8_t>(gen * 16 + i)));
        for (int i = 0; i < kSent; ++i) {
            int err = -1;
            EXPECT_EQ(next_completion(c.tx, &err), &ctx[gen][16 + i]);
            EXPECT_EQ(err, 0);
            EXPECT_EQ(next_completion(s.rx, &err), &ctx[gen][i]) << "generation " << gen;
            EXPECT_EQ(err, 0);
            EXPECT_EQ(sb.at(i)[0], static_cast<uint8_t>(gen * 16 + i));
        }
        if (gen % 2)
            ASSERT_NO_FATAL_FAILURE(server_closes());
        else
            ASSERT_NO_FATAL_FAILURE(disconnect());
        for (int i = kSent; i < kPosted; ++i) {
            int err = 0;
            EXPECT_EQ(next_completion(s.rx, &err), &ctx[gen][i]) << "generation " << gen;
            EXPECT_EQ(err, FI_ECANCELED);
        }
        EXPECT_TRUE(cq_empty(s.rx));
        EXPECT_TRUE(cq_empty(c.tx));
        ASSERT_TRUE(wait_idle(1)) << "generation " << gen;
    }
    expect_endpoints(3, 1);
}

// Sends stuck behind a peer that posted no receive (receiver not ready,
// retried forever) complete with FI_ECANCELED when the client closes its
// endpoint; the reused QP then carries only the next connection's send.
TEST_F(QpPoolRxe, SendsStuckAtCloseCompleteAndAreNotResent) {
    ASSERT_NO_FATAL_FAILURE(handshake([](rxetest::pair_side&) {}));
    constexpr int kStuck = 4;
    for (int i = 0; i < kStuck; ++i)
        ASSERT_NO_FATAL_FAILURE(post_send(c, i, 0, static_cast<uint8_t>(0xA0 + i)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(cq_empty(c.tx));
    // The client closes while connected (no fi_shutdown): its sends flush.
    EXPECT_EQ(fi_close(&c.ep->fid), 0);
    c.ep = nullptr;
    for (int i = 0; i < kStuck; ++i) {
        int err = 0;
        EXPECT_EQ(next_completion(c.tx, &err), &ctx[0][i]);
        EXPECT_NE(err, 0);
    }
    EXPECT_TRUE(cq_empty(c.tx));
    cm_rec r = next_event(s.eq);
    ASSERT_GT(r.rc, 0) << rxetest::describe(r);
    EXPECT_EQ(r.event, static_cast<uint32_t>(FI_SHUTDOWN));
    EXPECT_EQ(fi_close(&s.ep->fid), 0);
    s.ep = nullptr;
    ASSERT_TRUE(wait_idle(1));
    ASSERT_NO_FATAL_FAILURE(reconnect([&](rxetest::pair_side& x) {
        if (&x == &s)
            for (int i = 0; i < 2; ++i) post_recv(s, i, 1);
    }));
    EXPECT_EQ(pool(c).reused, 1u);
    ASSERT_NO_FATAL_FAILURE(post_send(c, 8, 1, 0x5A));
    int err = -1;
    EXPECT_EQ(next_completion(c.tx, &err), &ctx[1][8]);
    EXPECT_EQ(err, 0);
    EXPECT_EQ(next_completion(s.rx, &err), &ctx[1][0]);
    EXPECT_EQ(err, 0);
    EXPECT_EQ(sb.at(0)[0], 0x5A);
    // Nothing of the old sends arrives: the second receive stays posted.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(cq_empty(s.rx));
    EXPECT_TRUE(cq_empty(c.tx));
}

// Closing the CQs and the domain while their QPs are kept (waiting, then
// idle) succeeds: the kept QPs go first.
TEST_F(QpPoolRxe, ClosingTheCqsAndDomainOfKeptQpsSucceeds) {
    ASSERT_NO_FATAL_FAILURE(handshake([](rxetest::pair_side&) {}));
    ASSERT_NO_FATAL_FAILURE(disconnect());
    EXPECT_EQ(pool(c).waiting + pool(c).idle, 1u);
    // The client's side closes while its QP waits (TearDown checks each
    // fi_close returns 0); the server's once its QP is idle.
    EXPECT_EQ(fi_close(&cb.mr->fid), 0);
    cb.mr = nullptr;
    close_side(c);
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimewaitMs);
    while (pool(s).idle < 1 && std::chrono::steady_clock::now() < end) {
        rxetest::pump_eqs(fab, {peq, s.eq}, nullptr);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(pool(s).idle, 1u);
}

// The QP number maps to the endpoint that has the QP now: a fatal
// completion on a reused QP (an RDMA write with a key the peer never
// issued) ends the new client endpoint, reported with its fid, and leaves
// the QP out of the pool at close.
TEST_F(QpPoolRxe, AFatalCompletionOnAReusedQpEndsTheEndpointThatHasItNow) {
    ASSERT_NO_FATAL_FAILURE(handshake([](rxetest::pair_side&) {}));
    ASSERT_NO_FATAL_FAILURE(disconnect());
    ASSERT_TRUE(wait_idle(1));
    ASSERT_NO_FATAL_FAILURE(reconnect());
    expect_endpoints(1, 1);
    int wctx = 0;
    ASSERT_EQ(fi_write(c.ep, cb.at(0), kMsg, cb.desc(), 0, 0, 0x5eed, &wctx), 0);
    int err = 0;
    EXPECT_EQ(next_completion(c.tx, &err), &wctx);
    EXPECT_EQ(err, FI_EACCES);
    cm_rec r = next_event(c.eq);
    ASSERT_EQ(r.rc, -FI_EAVAIL) << rxetest::describe(r);
    EXPECT_EQ(r.err.fid, &c.ep->fid);
    EXPECT_EQ(r.err.err, FI_EACCES);
    EXPECT_EQ(fi_close(&c.ep->fid), 0);
    c.ep = nullptr;
    auto st = pool(c);
    EXPECT_EQ(st.retired, 1u) << "only the first connection's QP was kept";
    EXPECT_EQ(st.waiting + st.idle, 0u);
}

// A receive posted after the connection ended (between FI_SHUTDOWN and
// fi_close) would sit behind the receive flush marker and might never be
// flushed: fi_recv refuses it (-FI_EOPBADSTATE), so nothing is lost and
// both QPs are kept. (Before, the receive was posted and its QP destroyed;
// the completion could be lost, as the TSan soak once saw. A receive that
// races the marker in still keeps its QP out: rq_after_marker, ep.h.)
TEST_F(QpPoolRxe, AReceiveAfterTheDisconnectIsRefusedAndBothQpsAreKept) {
    ASSERT_NO_FATAL_FAILURE(handshake([](rxetest::pair_side&) {}));
    ASSERT_EQ(fi_shutdown(c.ep, 0), 0);
    for (auto* x : {&s, &c}) {
        cm_rec r = next_event(x->eq);
        ASSERT_GT(r.rc, 0) << rxetest::describe(r);
        EXPECT_EQ(r.event, static_cast<uint32_t>(FI_SHUTDOWN));
    }
    EXPECT_EQ(fi_recv(s.ep, sb.at(0), kMsg, sb.desc(), 0, &ctx[0][0]), -FI_EOPBADSTATE);
    EXPECT_EQ(fi_close(&s.ep->fid), 0);
    EXPECT_EQ(fi_close(&c.ep->fid), 0);
    s.ep = c.ep = nullptr;
    EXPECT_EQ(pool(s).retired, 1u);
    EXPECT_EQ(pool(s).discarded, 0u);
    EXPECT_EQ(pool(c).retired, 1u);
}

// A connection the server refused never had a QP worth keeping.
TEST_F(QpPoolRxe, ARefusedConnectionKeepsNoQp) {
    ASSERT_EQ(fi_connect(c.ep, c.info->dest_addr, nullptr, 0), 0);
    cm_rec req = next_event(peq);
    ASSERT_GT(req.rc, 0) << rxetest::describe(req);
    ASSERT_EQ(req.event, static_cast<uint32_t>(FI_CONNREQ));
    EXPECT_EQ(fi_reject(pep, req.info->handle, nullptr, 0), 0);
    fi_freeinfo(req.info);
    cm_rec r = next_event(c.eq);
    EXPECT_EQ(r.rc, -FI_EAVAIL) << rxetest::describe(r);
    EXPECT_EQ(fi_close(&c.ep->fid), 0);
    c.ep = nullptr;
    auto st = pool(c);
    EXPECT_EQ(st.retired, 0u);
    EXPECT_EQ(st.waiting + st.idle, 0u);
}

}  // namespace
