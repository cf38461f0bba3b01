// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Resumable connections on Soft-RoCE (fi_evd(7), RESUMABLE CONNECTIONS;
// docs/resume.md): the domain control, and a resumable connection's data
// path, where every operation goes through the ledgers and is posted from
// evd's own copy. The whole data-path, counter and atomic suites run once
// more with FI_EVD_RESUME_TIMEOUT set (run-in-guest.sh), so what they check
// holds on resumable endpoints too; this suite checks what they do not: a
// long mixed stream beyond the ledger's capacity, and inject buffers reused
// at once.
// Runs inside the VM: test/vm/run-in-vm -- ./evd_integration --gtest_filter='ResumeRxe*'
#include <gtest/gtest.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext_evd.h>
#include <rdma/fi_rma.h>
#include <rdma/rdma_cma.h>
#include <arpa/inet.h>
#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/common.h"
#include "../common/held.h"
#include "rxe_util.h"

using evdtest::held;

namespace resume_rxe_test {

using clk = std::chrono::steady_clock;

constexpr int kDeadlineMs = 30000;
constexpr size_t kDepth = 64;  // both queues: the stream below is many times this

class ResumeRxe : public rxetest::PairFixture<ResumeRxe> {
    friend class rxetest::PairFixture<ResumeRxe>;

  protected:
    void TearDown() override {
        rxetest::partition(false);  // never leave the path cut or the link down
        rxetest::link_up();         // for later tests
        close_side(c);
        if (share_listener_eq) s.eq = nullptr;  // the listener's: closed with it
        close_side(s);
        close_listener();
    }
    // The server's endpoint on the listener's EQ, as ofi_rxm binds them:
    // only then does its listener offer resumption (fi_evd(7)).
    bool share_listener_eq = false;
    struct fi_info* pair_hints() { return rxetest::rma_hints(kDepth); }
    int deadline_ms = kDeadlineMs;  // what open_side gives each domain
    void open_side(rxetest::pair_side& x, struct fi_info* info) {
        ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
        if (share_listener_eq && &x == &s) {
            EXPECT_EQ(fi_close(&x.eq->fid), 0);
            x.eq = peq;
        }
        int ms = deadline_ms;
        ASSERT_EQ(fi_control(&x.dom->fid, FI_EVD_RESUME_TIMEOUT_SET, &ms), 0);
        ASSERT_NO_FATAL_FAILURE(open_cqs(x, FI_WAIT_NONE, 4 * kDepth));
        ASSERT_NO_FATAL_FAILURE(open_endpoint(x));
        ASSERT_EQ(fi_enable(x.ep), 0);
    }
    static held<struct fid_mr> reg(rxetest::pair_side& x, void* buf, size_t len, uint64_t access) {
        held<struct fid_mr> mr;
        EXPECT_EQ(fi_mr_reg(x.dom, buf, len, access, 0, 0, 0, mr.out(), nullptr), 0);
        return mr;
    }
};

// The control reads what the domain starts with (FI_EVD_RESUME_TIMEOUT, or
// 0), sets what it is given, and refuses what is outside 0..MAX, changing
// nothing.
TEST_F(ResumeRxe, TheDomainControlSetsReadsAndRefuses) {
    ASSERT_NO_FATAL_FAILURE(listen());
    struct fid_domain* dom = nullptr;
    ASSERT_EQ(fi_domain(fab, srv_info, &dom, nullptr), 0);
    int v = -5;
    ASSERT_EQ(fi_control(&dom->fid, FI_EVD_RESUME_TIMEOUT_GET, &v), 0);
    const char* env = std::getenv("FI_EVD_RESUME_TIMEOUT");
    EXPECT_EQ(v, env ? std::atoi(env) : 0) << "a domain starts with FI_EVD_RESUME_TIMEOUT";
    int set = 12345;
    EXPECT_EQ(fi_control(&dom->fid, FI_EVD_RESUME_TIMEOUT_SET, &set), 0);
    for (int bad : {-1, FI_EVD_RESUME_TIMEOUT_MAX + 1}) {
        EXPECT_EQ(fi_control(&dom->fid, FI_EVD_RESUME_TIMEOUT_SET, &bad), -FI_EINVAL) << bad;
    }
    EXPECT_EQ(fi_control(&dom->fid, FI_EVD_RESUME_TIMEOUT_SET, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_control(&dom->fid, FI_EVD_RESUME_TIMEOUT_GET, &v), 0);
    EXPECT_EQ(v, 12345) << "a refused value changes nothing";
    set = 0;
    EXPECT_EQ(fi_control(&dom->fid, FI_EVD_RESUME_TIMEOUT_SET, &set), 0);
    // an endpoint enabled now is not resumable, and says so
    struct fi_cq_attr ca {};
    struct fid_cq* cq = nullptr;
    struct fid_eq* eq = nullptr;
    struct fi_eq_attr ea {};
    ASSERT_EQ(fi_eq_open(fab, &ea, &eq, nullptr), 0);
    ASSERT_EQ(fi_cq_open(dom, &ca, &cq, nullptr), 0);
    struct fid_ep* ep = nullptr;
    ASSERT_EQ(fi_endpoint(dom, srv_info, &ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    ASSERT_EQ(fi_enable(ep), 0);
    v = -1;
    EXPECT_EQ(fi_control(&ep->fid, FI_EVD_RESUME_TIMEOUT_GET, &v), 0);
    EXPECT_EQ(v, 0);
    EXPECT_EQ(fi_close(&ep->fid), 0);
    EXPECT_EQ(fi_close(&cq->fid), 0);
    EXPECT_EQ(fi_close(&eq->fid), 0);
    EXPECT_EQ(fi_close(&dom->fid), 0);
}

// A stream of sends (each from a buffer of its own), injects from one buffer
// rewritten after every call, sends with CQ data and RMA writes, 16 times the
// queues' depth, posted as fast as -FI_EAGAIN allows: every receive
// completes once, in order, with its context and the bytes of its message;
// every requested send-side completion comes once, in order, with its
// context, and no other; the writes land; a final read returns them.
TEST_F(ResumeRxe, AMixedStreamBeyondTheLedgerCompletesOnceInOrderWithItsContexts) {
    ASSERT_NO_FATAL_FAILURE(connect());
    for (auto* x : {&c, &s}) {  // both went through the ledgers
        int v = 0;
        ASSERT_EQ(fi_control(&x->ep->fid, FI_EVD_RESUME_TIMEOUT_GET, &v), 0);
        EXPECT_EQ(v, kDeadlineMs);
    }
    const bool iwarp = rxetest::on_iwarp();
    const size_t inj = c.info->tx_attr->inject_size;
    ASSERT_GE(inj, 16u);
    const size_t n = 16 * kDepth, msg = 64;
    std::vector<uint8_t> rbufs(kDepth * msg), sbufs(n * msg), ibuf(inj), target(n * 8), back(n * 8);
    auto rm = reg(s, rbufs.data(), rbufs.size(), FI_RECV);
    auto sm = reg(c, sbufs.data(), sbufs.size(), FI_SEND);
    auto tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE | FI_REMOTE_READ);
    auto bm = reg(c, back.data(), back.size(), FI_WRITE | FI_READ);
    ASSERT_TRUE(rm && sm && tm && bm);
    const uint64_t key = fi_mr_key(tm);
    const uint64_t base = reinterpret_cast<uintptr_t>(target.data());
    std::vector<int> rctx(kDepth), sctx(n);
    size_t rposted = 0, rdone = 0;
    auto post_recv = [&]() {
        const size_t slot = rposted % kDepth;
        ASSERT_EQ(fi_recv(s.ep, &rbufs[slot * msg], msg, fi_mr_desc(rm), 0, &rctx[slot]), 0);
        ++rposted;
    };
    for (size_t i = 0; i < kDepth; ++i) ASSERT_NO_FATAL_FAILURE(post_recv());
    // what the receiver must see: message k carries k in its first 8 bytes
    size_t sent = 0, messages = 0, got_tx = 0;
    std::vector<size_t> tx_order;  // the contexts' indexes, in posting order
    auto drain = [&]() {
        struct fi_cq_data_entry e[8];
        ssize_t r = fi_cq_read(c.tx, e, 8);
        ASSERT_TRUE(r > 0 || r == -FI_EAGAIN) << fi_strerror(static_cast<int>(-r));
        for (ssize_t i = 0; i < r; ++i) {
            ASSERT_LT(got_tx, tx_order.size()) << "a completion nobody asked for";
            EXPECT_EQ(e[i].op_context, &sctx[tx_order[got_tx]]) << "send completion " << got_tx;
            ++got_tx;
        }
        r = fi_cq_read(s.rx, e, 8);
        ASSERT_TRUE(r > 0 || r == -FI_EAGAIN) << fi_strerror(static_cast<int>(-r));
        for (ssize_t i = 0; i < r; ++i) {
            const size_t slot = rdone % kDepth;
            EXPECT_EQ(e[i].op_context, &rctx[slot]) << "receive " << rdone;
            uint64_t k = 0;
            std::memcpy(&k, &rbufs[slot * msg], 8);
            EXPECT_EQ(k, rdone) << "receive " << rdone << " holds another message";
            ++rdone;
            ASSERT_NO_FATAL_FAILURE(post_recv());
        }
    };
    auto retry = [&](auto post) {
        const auto end = clk::now() + std::chrono::seconds(30);
        for (;;) {
            const ssize_t r = post();
            if (r == 0) return;
            ASSERT_EQ(r, -FI_EAGAIN) << fi_strerror(static_cast<int>(-r));
            ASSERT_LT(clk::now(), end) << "no progress";
            ASSERT_NO_FATAL_FAILURE(drain());
        }
    };
    while (sent < n) {
        const uint64_t k = messages;
        switch (sent % 5) {
        case 0:  // a send whose completion is asked for
            std::memcpy(&sbufs[sent * msg], &k, 8);
            tx_order.push_back(sent);
            ASSERT_NO_FATAL_FAILURE(retry([&] {
                return fi_send(c.ep, &sbufs[sent * msg], msg, fi_mr_desc(sm), 0, &sctx[sent]);
            }));
            ++messages;
            break;
        case 1:  // inject: the buffer is rewritten at once
        case 3:
            std::memcpy(ibuf.data(), &k, 8);
            ASSERT_NO_FATAL_FAILURE(retry([&] { return fi_inject(c.ep, ibuf.data(), 16, 0); }));
            std::memset(ibuf.data(), 0xa5, inj);
            ++messages;
            break;
        case 2:  // send with CQ data (iWARP carries none: a plain send there)
            std::memcpy(&sbufs[sent * msg], &k, 8);
            tx_order.push_back(sent);
            ASSERT_NO_FATAL_FAILURE(retry([&] {
                if (iwarp) return fi_send(c.ep, &sbufs[sent * msg], msg, fi_mr_desc(sm), 0, &sctx[sent]);
                return fi_senddata(c.ep, &sbufs[sent * msg], msg, fi_mr_desc(sm), k, 0,
                                   &sctx[sent]);
            }));
            ++messages;
            break;
        case 4: {  // an 8-byte write of its own index into the target
            const uint64_t v = sent;
            std::memcpy(&back[sent * 8], &v, 8);
            tx_order.push_back(sent);
            ASSERT_NO_FATAL_FAILURE(retry([&] {
                return fi_write(c.ep, &back[sent * 8], 8, fi_mr_desc(bm), 0, base + sent * 8, key,
                                &sctx[sent]);
            }));
            break;
        }
        }
        ++sent;
        if (sent % 8 == 0) { ASSERT_NO_FATAL_FAILURE(drain()); }
    }
    const auto end = clk::now() + std::chrono::seconds(30);
    while ((got_tx < tx_order.size() || rdone < messages) && clk::now() < end)
        ASSERT_NO_FATAL_FAILURE(drain());
    EXPECT_EQ(got_tx, tx_order.size());
    EXPECT_EQ(rdone, messages);
    // the writes landed; read them back in one go
    std::memset(back.data(), 0, back.size());
    int rd;
    ASSERT_EQ(fi_read(c.ep, back.data(), back.size(), fi_mr_desc(bm), 0, base, key, &rd), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(rxetest::cq_wait_one(c.tx, e, 20000), 1);
    EXPECT_EQ(e.op_context, &rd);
    for (size_t i = 4; i < n; i += 5) {
        uint64_t v = 0;
        std::memcpy(&v, &back[i * 8], 8);
        EXPECT_EQ(v, i) << "write " << i;
    }
}


// An outage held back (fi_evd(7), RESUMABLE CONNECTIONS; docs/resume.md,
// step 2): sends posted while the link under rxe0 is down fail on rxe0's
// QP once its retries run out (rxe1's traffic to rxe0 stays on the host's
// loopback, so the sender here is the server, the passive side). On a resumable endpoint nothing of that
// reaches the application: no CQ error, no EQ record, and sends posted
// during the outage are taken (queued). The exchange that would join the
// peer again is the active side's to start, and the active side here has
// nothing on its send queue, so it never sees the failure and the outage
// ends at its deadline: then,
// and only then, every send completes exactly once, in posting order, with
// FI_ECANCELED and its own context, and after them comes the one terminal
// record, err as without resumption and err_data a fi_evd_resume_err
// saying why. A post after it is refused.
TEST_F(ResumeRxe, AnOutageIsHeldBackUntilItsDeadlineThenEveryOperationIsCancelledOnceInOrder) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "siw ends every connection when its interface goes down";
    constexpr int kOutageMs = 8000;
    deadline_ms = kOutageMs;
    // resumable both ways; the client never comes back: it sends nothing and
    // never reads its send CQ, where its keepalive's failure waits
    share_listener_eq = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    constexpr size_t kMsg = 64, kBefore = 8, kDuring = 4;
    rxetest::pair_side& tx = s;  // on rxe0, whose link goes down
    rxetest::pair_side& rx = c;
    std::vector<uint8_t> rbufs(kDepth * kMsg), sbufs((kBefore + kDuring) * kMsg, 0x5a);
    auto rm = reg(rx, rbufs.data(), rbufs.size(), FI_RECV);
    auto sm = reg(tx, sbufs.data(), sbufs.size(), FI_SEND);
    ASSERT_TRUE(rm && sm);
    std::vector<int> rctx(kDepth), sctx(kBefore + kDuring);
    for (size_t i = 0; i < kDepth; ++i)
        ASSERT_EQ(fi_recv(rx.ep, &rbufs[i * kMsg], kMsg, fi_mr_desc(rm), 0, &rctx[i]), 0);
    ASSERT_EQ(rxetest::link_down(), 0);
    const auto down = clk::now();
    for (size_t i = 0; i < kBefore; ++i)
        ASSERT_EQ(fi_send(tx.ep, &sbufs[i * kMsg], kMsg, fi_mr_desc(sm), 0, &sctx[i]), 0);
    auto ms_since_down = [&] {
        return std::chrono::duration<double, std::milli>(clk::now() - down).count();
    };
    std::vector<struct fi_cq_err_entry> errs;  // the client's CQ, in order
    std::vector<double> err_at;
    size_t successes = 0;
    auto read_cq = [&] {
        struct fi_cq_data_entry e[8];
        for (;;) {
            ssize_t r = fi_cq_read(tx.tx, e, 8);
            if (r > 0) {
                successes += static_cast<size_t>(r);
                continue;
            }
            if (r != -FI_EAVAIL) break;
            struct fi_cq_err_entry ee {};
            ASSERT_EQ(fi_cq_readerr(tx.tx, &ee, 0), 1);
            errs.push_back(ee);
            err_at.push_back(ms_since_down());
        }
    };
    bool posted_during = false, up = false;
    rxetest::cm_rec rec;
    double rec_at = 0;
    const auto end = down + std::chrono::milliseconds(kOutageMs + 25000);
    while (clk::now() < end) {
        ASSERT_NO_FATAL_FAILURE(read_cq());
        if (!up && ms_since_down() > 4000) {
            ASSERT_EQ(rxetest::link_up(), 0);  // a 4 s flap, as issue 35's scenarios
            up = true;
        }
        if (up && !posted_during && ms_since_down() > 5000) {
            // inside the outage: on rxe its first failure comes at link down
            // (the QP is flushed as its packets cannot leave), at most ~3 s later
            for (size_t i = kBefore; i < kBefore + kDuring; ++i)
                ASSERT_EQ(fi_send(tx.ep, &sbufs[i * kMsg], kMsg, fi_mr_desc(sm), 0, &sctx[i]), 0)
                    << "a send during the outage is taken";
            posted_during = true;
        }
        rec = next_event(tx.eq, 50);
        if (rec.rc != -FI_EAGAIN) {
            rec_at = ms_since_down();
            break;
        }
        struct fi_eq_cm_entry ent;
        uint32_t ev;
        ASSERT_EQ(fi_eq_read(rx.eq, &ev, &ent, sizeof(ent), 0), -FI_EAGAIN)
            << "the receiving endpoint got a record";
        struct fi_cq_data_entry re;
        ASSERT_EQ(fi_cq_read(rx.rx, &re, 1), -FI_EAGAIN) << "a send reached the receiver";
    }
    ASSERT_NO_FATAL_FAILURE(read_cq());
    ASSERT_TRUE(posted_during) << "the outage ended before the sends during it were posted (at "
                               << rec_at << " ms)";
    ASSERT_EQ(rec.rc, -FI_EAVAIL) << "no terminal record: " << rxetest::describe(rec) << "; "
                                  << successes << " sends completed, " << errs.size()
                                  << " failed";
    std::printf("# terminal record %.0f ms after link down (deadline %d ms); %zu cancelled, "
                "the first at %.0f ms\n", rec_at, kOutageMs, errs.size(),
                err_at.empty() ? -1.0 : err_at.front());
    EXPECT_EQ(rec.fid, &tx.ep->fid);
    EXPECT_EQ(rec.err.err, FI_ETIMEDOUT) << "the deadline's: " << fi_strerror(rec.err.err);
    EXPECT_EQ(FI_EVD_PERR_CLASS(rec.err.prov_errno), static_cast<unsigned>(FI_EVD_PERR_RESUME));
    EXPECT_EQ(FI_EVD_PERR_CODE(rec.err.prov_errno), FI_EVD_RESUME_DEADLINE);
    EXPECT_GE(rec_at, static_cast<double>(kOutageMs)) << "ended before its deadline";
    ASSERT_EQ(rec.err_data.size(), sizeof(struct fi_evd_resume_err));
    struct fi_evd_resume_err re {};
    std::memcpy(&re, rec.err_data.data(), sizeof(re));
    EXPECT_EQ(re.magic, FI_EVD_RESUME_ERR_MAGIC);
    EXPECT_EQ(re.reason, static_cast<uint32_t>(FI_EVD_RESUME_DEADLINE));
    EXPECT_EQ(re.cause_source, static_cast<uint32_t>(FI_EVD_RESUME_CAUSE_COMPLETION));
    EXPECT_GE(re.outage_ms, static_cast<uint64_t>(kOutageMs));
    EXPECT_EQ(re.attempts, 0u) << "the passive side accepted no request";
    // every send exactly once, in order, cancelled, with its context; none
    // before the deadline (nothing of the failure reached the CQ before)
    EXPECT_EQ(successes, 0u) << "a send completed while the link was down";
    ASSERT_EQ(errs.size(), kBefore + kDuring);
    for (size_t i = 0; i < errs.size(); ++i) {
        EXPECT_EQ(errs[i].op_context, &sctx[i]) << "completion " << i;
        EXPECT_EQ(errs[i].err, FI_ECANCELED) << "completion " << i << ": "
                                             << fi_strerror(errs[i].err);
        EXPECT_GE(err_at[i], static_cast<double>(kOutageMs)) << "completion " << i
                                                             << " before the deadline";
    }
    EXPECT_EQ(fi_send(tx.ep, sbufs.data(), kMsg, fi_mr_desc(sm), 0, &sctx[0]), -FI_EOPBADSTATE);
    struct fi_cq_data_entry e {};
    EXPECT_EQ(fi_cq_read(tx.tx, &e, 1), -FI_EAGAIN) << "a completion after the record";
}


// A connection resumed (fi_evd(7), RESUMABLE CONNECTIONS; docs/resume.md,
// "The exchange"): traffic both ways across a 4 s flap of the link under
// rxe0. rxe0's QP (the passive side's) fails at link down; rxe1's QP (the
// active side's) when its retries to that failed QP run out. The active
// side then joins the peer again on a new QP, the two exchange how many of
// each other's messages they consumed, and each replays what the other did
// not consume: every message arrives exactly once and in order, every send
// completes once, successfully, with its own context, in posting order, and
// nothing of the failure reaches either application. The same connection
// then carries new traffic both ways.
TEST_F(ResumeRxe, AFlapUnderTrafficBothWaysIsResumedWithEveryMessageOnceInOrder) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "siw ends every connection when its interface goes down";
    share_listener_eq = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    constexpr size_t kMsg = 64, kN = 24;  // each way, across the flap
    struct way {
        rxetest::pair_side* tx;
        rxetest::pair_side* rx;
        std::vector<uint8_t> sbuf, rbuf;
        held<struct fid_mr> smr, rmr;
        std::vector<int> sctx, rctx;
        size_t sent = 0, tx_done = 0, rx_done = 0, rx_posted = 0;
    };
    way ways[2] = {{&s, &c, {}, {}, {}, {}, {}, {}}, {&c, &s, {}, {}, {}, {}, {}, {}}};
    for (way& w : ways) {
        w.sbuf.assign((kN + 8) * kMsg, 0);
        w.rbuf.assign(kDepth * kMsg, 0);
        w.smr = reg(*w.tx, w.sbuf.data(), w.sbuf.size(), FI_SEND);
        w.rmr = reg(*w.rx, w.rbuf.data(), w.rbuf.size(), FI_RECV);
        ASSERT_TRUE(w.smr && w.rmr);
        w.sctx.resize(kN + 8);
        w.rctx.resize(kDepth);
    }
    auto post_recv = [&](way& w) {
        const size_t slot = w.rx_posted % kDepth;
        ASSERT_EQ(fi_recv(w.rx->ep, &w.rbuf[slot * kMsg], kMsg, fi_mr_desc(w.rmr), 0,
                          &w.rctx[slot]), 0);
        ++w.rx_posted;
    };
    auto send = [&](way& w) {
        const uint64_t k = w.sent;
        std::memcpy(&w.sbuf[k * kMsg], &k, 8);
        ASSERT_EQ(fi_send(w.tx->ep, &w.sbuf[k * kMsg], kMsg, fi_mr_desc(w.smr), 0, &w.sctx[k]), 0);
        ++w.sent;
    };
    for (way& w : ways)
        for (size_t i = 0; i < kDepth; ++i) ASSERT_NO_FATAL_FAILURE(post_recv(w));
    // nothing of the failure may reach either side: a CQ error or an EQ
    // record fails the test
    auto poll = [&](way& w) {
        struct fi_cq_data_entry e[8];
        ssize_t r = fi_cq_read(w.tx->tx, e, 8);
        ASSERT_TRUE(r > 0 || r == -FI_EAGAIN) << "send CQ: " << fi_strerror(static_cast<int>(-r));
        for (ssize_t i = 0; i < r; ++i) {
            ASSERT_LT(w.tx_done, w.sent) << "a send completion nobody posted";
            EXPECT_EQ(e[i].op_context, &w.sctx[w.tx_done]) << "send " << w.tx_done;
            ++w.tx_done;
        }
        r = fi_cq_read(w.rx->rx, e, 8);
        ASSERT_TRUE(r > 0 || r == -FI_EAGAIN) << "receive CQ: " << fi_strerror(static_cast<int>(-r));
        for (ssize_t i = 0; i < r; ++i) {
            const size_t slot = w.rx_done % kDepth;
            EXPECT_EQ(e[i].op_context, &w.rctx[slot]) << "receive " << w.rx_done;
            uint64_t k = 0;
            std::memcpy(&k, &w.rbuf[slot * kMsg], 8);
            EXPECT_EQ(k, w.rx_done) << "message " << w.rx_done << " arrived out of order or twice";
            ++w.rx_done;
            ASSERT_NO_FATAL_FAILURE(post_recv(w));
        }
    };
    auto quiet_eqs = [&] {
        for (struct fid_eq* q : {s.eq, c.eq}) {
            rxetest::cm_rec r = next_event(q, 1);
            ASSERT_EQ(r.rc, -FI_EAGAIN) << "a record during the outage: " << rxetest::describe(r);
        }
    };
    // a few messages before the flap, then the rest while the link is down
    for (way& w : ways)
        for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(send(w));
    ASSERT_EQ(rxetest::link_down(), 0);
    const auto down = clk::now();
    auto ms_since_down = [&] {
        return std::chrono::duration<double, std::milli>(clk::now() - down).count();
    };
    bool up = false;
    double all_at = -1;
    const auto end = down + std::chrono::seconds(50);
    while (clk::now() < end) {
        for (way& w : ways) {
            if (w.sent < kN && w.sent - w.tx_done < kDepth / 2) {
                ASSERT_NO_FATAL_FAILURE(send(w));
            }
            ASSERT_NO_FATAL_FAILURE(poll(w));
        }
        ASSERT_NO_FATAL_FAILURE(quiet_eqs());
        if (!up && ms_since_down() > 4000) {
            ASSERT_EQ(rxetest::link_up(), 0);
            up = true;
        }
        bool all = up;
        for (way& w : ways) all = all && w.sent == kN && w.tx_done == kN && w.rx_done == kN;
        if (all) {
            all_at = ms_since_down();
            break;
        }
    }
    std::printf("# server->client: %zu sent, %zu completed, %zu received; client->server: %zu, "
                "%zu, %zu; all in at %.0f ms after link down\n", ways[0].sent, ways[0].tx_done,
                ways[0].rx_done, ways[1].sent, ways[1].tx_done, ways[1].rx_done, all_at);
    ASSERT_GE(all_at, 0.0) << "the connection was not resumed within 50 s";
    // the same connection carries new traffic both ways
    for (way& w : ways) ASSERT_NO_FATAL_FAILURE(send(w));
    const auto again = clk::now() + std::chrono::seconds(20);
    bool fresh = false;
    while (!fresh && clk::now() < again) {
        for (way& w : ways) ASSERT_NO_FATAL_FAILURE(poll(w));
        fresh = true;
        for (way& w : ways) fresh = fresh && w.tx_done == kN + 1 && w.rx_done == kN + 1;
    }
    EXPECT_TRUE(fresh) << "no traffic after the resume";
    ASSERT_NO_FATAL_FAILURE(quiet_eqs());
}


// The side that failed alone (docs/resume.md, "An idle side"): a silent
// partition of 20 s (both ends drop every packet, no port event), longer
// than RC's retries (about 14 s on rxe), while only the passive side sends:
// only its QP fails. The active side, which alone can join the peer again,
// has nothing on its send queue and sees no port event, so nothing of its
// own would ever fail (measured across nodes: the passive side's deadline
// then ends the connection, test/README.md, run 20). Reading its CQs and EQ
// as an MPI rank waiting in a receive does, it posts its keepalive
// (FI_EVD_RESUME_KEEPALIVE, a tenth of the deadline), whose retries run out
// in the partition; it then joins the peer again once the path is back and
// the connection is resumed inside the passive side's deadline: every
// message arrives once and in order, every send completes once with its
// context, no record on either EQ, and nothing of the keepalive reaches the
// active side's CQs.
TEST_F(ResumeRxe, APassiveSideThatFailedAloneInASilentPartitionIsJoinedAgainByItsIdlePeer) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "siw's connections are TCP streams, not resumed";
    share_listener_eq = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    constexpr size_t kMsg = 64, kBefore = 8, kDuring = 4, kN = kBefore + kDuring;
    rxetest::pair_side& tx = s;  // the passive side, on rxe0
    rxetest::pair_side& rx = c;  // the active side: receives only
    std::vector<uint8_t> rbufs(kDepth * kMsg), sbufs(kN * kMsg);
    auto rm = reg(rx, rbufs.data(), rbufs.size(), FI_RECV);
    auto sm = reg(tx, sbufs.data(), sbufs.size(), FI_SEND);
    ASSERT_TRUE(rm && sm);
    std::vector<int> rctx(kDepth), sctx(kN);
    for (size_t i = 0; i < kDepth; ++i)
        ASSERT_EQ(fi_recv(rx.ep, &rbufs[i * kMsg], kMsg, fi_mr_desc(rm), 0, &rctx[i]), 0);
    size_t sent = 0, tx_done = 0, rx_done = 0;
    auto send = [&] {
        const uint64_t k = sent;
        std::memcpy(&sbufs[k * kMsg], &k, 8);
        ASSERT_EQ(fi_send(tx.ep, &sbufs[k * kMsg], kMsg, fi_mr_desc(sm), 0, &sctx[k]), 0);
        ++sent;
    };
    auto poll = [&] {
        struct fi_cq_data_entry e[8];
        ssize_t r = fi_cq_read(tx.tx, e, 8);
        ASSERT_TRUE(r > 0 || r == -FI_EAGAIN) << "send CQ: " << fi_strerror(static_cast<int>(-r));
        for (ssize_t i = 0; i < r; ++i) {
            ASSERT_LT(tx_done, sent) << "a send completion nobody posted";
            EXPECT_EQ(e[i].op_context, &sctx[tx_done]) << "send " << tx_done;
            ++tx_done;
        }
        r = fi_cq_read(rx.rx, e, 8);
        ASSERT_TRUE(r > 0 || r == -FI_EAGAIN) << "receive CQ: " << fi_strerror(static_cast<int>(-r));
        for (ssize_t i = 0; i < r; ++i) {
            EXPECT_EQ(e[i].op_context, &rctx[rx_done]) << "receive " << rx_done;
            uint64_t k = 0;
            std::memcpy(&k, &rbufs[rx_done * kMsg], 8);
            EXPECT_EQ(k, rx_done) << "message " << rx_done << " arrived out of order or twice";
            ++rx_done;
        }
        // the active side's send CQ: its keepalives are never shown
        r = fi_cq_read(rx.tx, e, 8);
        ASSERT_EQ(r, -FI_EAGAIN) << "the receiving side's send CQ: "
                                 << (r > 0 ? "a completion" : fi_strerror(static_cast<int>(-r)));
        for (struct fid_eq* q : {tx.eq, rx.eq}) {
            rxetest::cm_rec rec = next_event(q, 1);
            ASSERT_EQ(rec.rc, -FI_EAGAIN) << "a record during the outage: " << rxetest::describe(rec);
        }
    };
    constexpr int kCutMs = 20000;
    ASSERT_EQ(rxetest::partition(true), 0);
    const auto cut = clk::now();
    auto ms_since_cut = [&] {
        return std::chrono::duration<double, std::milli>(clk::now() - cut).count();
    };
    for (size_t i = 0; i < kBefore; ++i) ASSERT_NO_FATAL_FAILURE(send());
    bool healed = false;
    double all_at = -1;
    // the passive side's deadline runs from its failure, about 14 s in
    const auto end = cut + std::chrono::milliseconds(14000 + kDeadlineMs);
    while (clk::now() < end) {
        ASSERT_NO_FATAL_FAILURE(poll());
        if (!healed && ms_since_cut() > kCutMs) {
            ASSERT_EQ(rxetest::partition(false), 0);
            healed = true;
        }
        if (healed && sent < kN) {
            ASSERT_NO_FATAL_FAILURE(send());
        }
        if (healed && tx_done == kN && rx_done == kN) {
            all_at = ms_since_cut();
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    rxetest::partition(false);
    std::printf("# %zu sent, %zu completed, %zu received; all in at %.0f ms after the cut "
                "(healed at %d ms, deadline %d ms)\n", sent, tx_done, rx_done, all_at, kCutMs,
                kDeadlineMs);
    ASSERT_GE(all_at, 0.0) << "not resumed within the passive side's deadline";
    // the same connection carries new traffic, into the next receive posted
    ASSERT_EQ(fi_send(tx.ep, &sbufs[0], kMsg, fi_mr_desc(sm), 0, &sctx[0]), 0);
    const auto again = clk::now() + std::chrono::seconds(20);
    bool tx_ok = false, rx_ok = false;
    while (!(tx_ok && rx_ok) && clk::now() < again) {
        struct fi_cq_data_entry e {};
        if (!tx_ok && fi_cq_read(tx.tx, &e, 1) == 1) tx_ok = e.op_context == &sctx[0];
        if (!rx_ok && fi_cq_read(rx.rx, &e, 1) == 1) rx_ok = e.op_context == &rctx[kN];
    }
    EXPECT_TRUE(tx_ok && rx_ok) << "no traffic after the resume";
}


namespace {
// A resume message as resume_wire.h lays it out (36 bytes, network order),
// written here by hand, as a forger would.
std::vector<uint8_t> resume_bytes(uint8_t kind, const uint8_t* token, uint32_t gen,
                                  uint64_t count) {
    std::vector<uint8_t> b(36, 0);
    b[0] = 'e';
    b[1] = 'v';
    b[2] = 0x52;
    b[3] = kind;
    if (token) std::memcpy(&b[4], token, 16);
    const uint32_t g = htonl(gen);
    std::memcpy(&b[20], &g, 4);
    for (int i = 0; i < 8; ++i) b[24 + i] = static_cast<uint8_t>(count >> (56 - 8 * i));
    return b;
}

// Sends a connect request carrying `pd` to the listener at dst from bare
// librdmacm and returns the event that answers it, with the reject's
// private data in *rej. pump() runs while it waits: the listener's
// events advance only when its EQ is read.
template <class Pump>
enum rdma_cm_event_type raw_request(const struct sockaddr* dst, const std::vector<uint8_t>& pd,
                                    std::vector<uint8_t>* rej, Pump pump) {
    struct rdma_event_channel* ch = rdma_create_event_channel();
    EXPECT_NE(ch, nullptr);
    const int fl = fcntl(ch->fd, F_GETFL);
    fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
    struct rdma_cm_id* id = nullptr;
    EXPECT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    enum rdma_cm_event_type got = RDMA_CM_EVENT_ADDR_ERROR;
    auto next = [&](enum rdma_cm_event_type want) {
        struct rdma_cm_event* ev = nullptr;
        const auto end = clk::now() + std::chrono::seconds(20);
        while (rdma_get_cm_event(ch, &ev)) {
            if (errno != EAGAIN || clk::now() > end) return false;
            pump();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        got = ev->event;
        if (got == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data)
            rej->assign(static_cast<const uint8_t*>(ev->param.conn.private_data),
                        static_cast<const uint8_t*>(ev->param.conn.private_data) +
                            ev->param.conn.private_data_len);
        rdma_ack_cm_event(ev);
        return got == want;
    };
    struct sockaddr_in src = {};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, rxetest::env_or("EVD_VM_ADDR1", "192.0.2.2"), &src.sin_addr);
    if (rdma_resolve_addr(id, reinterpret_cast<struct sockaddr*>(&src),
                          const_cast<struct sockaddr*>(dst), 2000) == 0 &&
        next(RDMA_CM_EVENT_ADDR_RESOLVED) && rdma_resolve_route(id, 2000) == 0 &&
        next(RDMA_CM_EVENT_ROUTE_RESOLVED)) {
        struct rdma_conn_param cp = {};
        cp.private_data = pd.data();
        cp.private_data_len = static_cast<uint8_t>(pd.size());
        cp.qp_num = 0x123;  // no QP: the request is answered before one would matter
        cp.retry_count = 6;
        if (rdma_connect(id, &cp) == 0) next(RDMA_CM_EVENT_REJECTED);
    }
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return got;
}
}  // namespace

// Hostile resume requests (docs/resume.md, "Security"): a token nobody was
// given and bytes that only look like a resume message are refused, each
// with the reason the forger may learn ("unknown token", "malformed"), and
// nothing of the open resumable connection changes: no record on any EQ, and
// it carries data both ways afterwards.
TEST_F(ResumeRxe, ForgedAndMalformedResumeRequestsAreRefusedAndChangeNothing) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "no resumption on iWARP";
    share_listener_eq = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    const auto* dst = static_cast<const struct sockaddr*>(c.info->dest_addr);
    uint8_t guess[16];
    for (int i = 0; i < 16; ++i) guess[i] = static_cast<uint8_t>(0x11 * (i + 1));
    struct attempt {
        const char* what;
        std::vector<uint8_t> pd;
        uint32_t reason;
    } attempts[] = {
        {"a token nobody was given", resume_bytes(2, guess, 1, 0), 1},
        {"a request without a token", resume_bytes(2, nullptr, 1, 0), 6},
        {"an offer sent as a request", resume_bytes(1, guess, 0, 0), 6},
        {"a request for generation 0", resume_bytes(2, guess, 0, 0), 1},
    };
    for (const attempt& a : attempts) {
        std::vector<uint8_t> rej;
        auto pump = [&] {
            rxetest::pump_eqs(fab, {peq, c.eq}, nullptr);
        };
        EXPECT_EQ(raw_request(dst, a.pd, &rej, pump), RDMA_CM_EVENT_REJECTED) << a.what;
        ASSERT_GE(rej.size(), 36u) << a.what << ": the refusal carries a resume message";
        EXPECT_EQ(rej[2], 0x52) << a.what;
        EXPECT_EQ(rej[3], 4) << a.what << ": kind refuse";
        uint32_t reason = 0;
        std::memcpy(&reason, &rej[32], 4);
        EXPECT_EQ(ntohl(reason), a.reason) << a.what;
    }
    for (struct fid_eq* q : {peq, c.eq}) {
        rxetest::cm_rec r = next_event(q, 200);
        EXPECT_EQ(r.rc, -FI_EAGAIN) << "a record after the forged requests: "
                                    << rxetest::describe(r);
    }
    std::vector<uint8_t> sb(64, 7), rb(64, 0);
    auto sm = reg(c, sb.data(), sb.size(), FI_SEND);
    auto rm = reg(s, rb.data(), rb.size(), FI_RECV);
    int rc = 0, sc = 0;
    ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, &rc), 0);
    ASSERT_EQ(fi_send(c.ep, sb.data(), sb.size(), fi_mr_desc(sm), 0, &sc), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(rxetest::cq_wait_one(s.rx, e, 20000), 1);
    EXPECT_EQ(e.op_context, &rc);
    EXPECT_EQ(rb, sb);
    ASSERT_EQ(rxetest::cq_wait_one(c.tx, e, 20000), 1);
    EXPECT_EQ(e.op_context, &sc);
}

}  // namespace resume_rxe_test
