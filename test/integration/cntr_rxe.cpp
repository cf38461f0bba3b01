// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Completion counters on Soft-RoCE, through the real libfabric API: a server
// endpoint on rxe0 and a client endpoint on rxe1, connected in one process,
// each with a send, recv, read and write counter (and CQs only where a test
// asks for them). Counter-only endpoints, selective completion (the counter
// counts every operation, the CQ shows only the requested ones and loses
// none when the counter is read first), RMA counters, a bad key counted as an
// error, and fi_cntr_wait woken by a real completion.
// Runs inside the VM: test/vm/run-in-vm -- ./evd_integration --gtest_filter='Cntr*'
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rxe_util.h"

// Wait and poll sets are deprecated in libfabric 2.x, not removed: evd keeps
// them for the applications that open them, and these tests open them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using clk = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One side of a connection (CQs only when the test wants them) with its
// counters and the memory the test registered.
struct side : rxetest::pair_side {
    struct fid_cntr* send = nullptr;
    struct fid_cntr* recv = nullptr;
    struct fid_cntr* read = nullptr;
    struct fid_cntr* write = nullptr;
    std::vector<struct fid_mr*> mrs;
};

class CntrRxe : public rxetest::PairFixture<CntrRxe, side> {
    friend class rxetest::PairFixture<CntrRxe, side>;

protected:
    bool client_cqs = true, server_cqs = true;
    uint64_t client_tx_flags = 0;  // e.g. FI_SELECTIVE_COMPLETION
    bool server_recv_in_set = false;  // the server's receive counter joins recv_set
    enum fi_wait_obj cq_wait_obj = FI_WAIT_FD;  // both sides' CQs
    struct fid_wait* recv_set = nullptr;  // an FD wait set

    void TearDown() override {
        for (side* x : {&c, &s}) {
            for (auto* mr : x->mrs) EXPECT_EQ(fi_close(&mr->fid), 0);
            close_side(*x, [](side& y) {
                for (auto* k : {y.send, y.recv, y.read, y.write})
                    if (k) { EXPECT_EQ(fi_close(&k->fid), 0); }
            });
        }
        if (recv_set) { EXPECT_EQ(fi_close(&recv_set->fid), 0); }
        close_listener();
    }

    void trywait_then_wait_fd_wakes();

    struct fi_info* pair_hints() { return rxetest::rma_hints(64); }

    void open_side(side& x, struct fi_info* info) {
        const bool cqs = &x == &c ? client_cqs : server_cqs;
        ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
        if (cqs) { ASSERT_NO_FATAL_FAILURE(open_cqs(x, cq_wait_obj, 256)); }
        ASSERT_NO_FATAL_FAILURE(open_endpoint(x, &x == &c ? client_tx_flags : 0));
        struct fi_cntr_attr ka {};
        ka.events = FI_CNTR_EVENTS_COMP;
        ka.wait_obj = FI_WAIT_UNSPEC;
        ASSERT_EQ(fi_cntr_open(x.dom, &ka, &x.send, nullptr), 0);
        if (&x == &s && server_recv_in_set) {
            struct fi_wait_attr wa {};
            wa.wait_obj = FI_WAIT_FD;
            ASSERT_EQ(fi_wait_open(fab, &wa, &recv_set), 0);
            struct fi_cntr_attr ks = ka;
            ks.wait_obj = FI_WAIT_SET;
            ks.wait_set = recv_set;
            ASSERT_EQ(fi_cntr_open(x.dom, &ks, &x.recv, nullptr), 0);
        } else {
            ASSERT_EQ(fi_cntr_open(x.dom, &ka, &x.recv, nullptr), 0);
        }
        ASSERT_EQ(fi_cntr_open(x.dom, &ka, &x.read, nullptr), 0);
        ASSERT_EQ(fi_cntr_open(x.dom, &ka, &x.write, nullptr), 0);
        EXPECT_EQ(fi_ep_bind(x.ep, &x.write->fid, FI_REMOTE_WRITE), -FI_EINVAL)
            << "evd has no FI_RMA_EVENT";
        ASSERT_EQ(fi_ep_bind(x.ep, &x.send->fid, FI_SEND), 0);
        ASSERT_EQ(fi_ep_bind(x.ep, &x.recv->fid, FI_RECV), 0);
        ASSERT_EQ(fi_ep_bind(x.ep, &x.read->fid, FI_READ), 0);
        ASSERT_EQ(fi_ep_bind(x.ep, &x.write->fid, FI_WRITE), 0);
        ASSERT_EQ(fi_enable(x.ep), 0);
        EXPECT_EQ(fi_ep_bind(x.ep, &x.send->fid, FI_SEND), -FI_EOPBADSTATE)
            << "counters are bound before fi_enable";
        EXPECT_EQ(fi_close(&x.send->fid), -FI_EBUSY) << "bound to an open endpoint";
    }

    // Connects with one receive of all of rb posted on the server.
    void connect_with_server_recv(std::vector<uint8_t>& rb) {
        connect([&](side& x) {
            if (&x != &s) return;
            struct fid_mr* rm = reg(s, rb.data(), rb.size(), FI_RECV);
            ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, nullptr), 0);
        });
    }

    struct fid_mr* reg(side& x, void* buf, size_t len, uint64_t access) {
        struct fid_mr* mr = nullptr;
        EXPECT_EQ(fi_mr_reg(x.dom, buf, len, access, 0, 0, 0, &mr, nullptr), 0);
        if (mr) x.mrs.push_back(mr);
        return mr;
    }

    // Posts with `post` until it is not -FI_EAGAIN; the counter read is the
    // only progress (the send queue drains only while completions are polled).
    template <class P>
    static ssize_t retry(P post, struct fid_cntr* progress) {
        auto end = clk::now() + std::chrono::seconds(20);
        ssize_t r;
        while ((r = post()) == -FI_EAGAIN && clk::now() < end) (void)fi_cntr_read(progress);
        return r;
    }

    // All CQ entries readable within ms (stops at the first empty read after
    // something was seen, or at an error).
    static std::vector<struct fi_cq_data_entry> drain(struct fid_cq* cq, size_t want, int ms = 10000) {
        std::vector<struct fi_cq_data_entry> out;
        auto end = clk::now() + milliseconds(ms);
        while (out.size() < want && clk::now() < end) {
            struct fi_cq_data_entry e[16];
            ssize_t n = fi_cq_read(cq, e, 16);
            if (n > 0)
                out.insert(out.end(), e, e + n);
            else if (n != -FI_EAGAIN)
                break;
        }
        return out;
    }
};

TEST_F(CntrRxe, CounterOnlyEndpointsCountSendsAndReceives) {
    client_cqs = server_cqs = false;
    constexpr size_t kMsgs = 40;  // below the receive depth (64)
    std::vector<uint8_t> rb(kMsgs * 64), sb(64);
    ASSERT_NO_FATAL_FAILURE(connect([&](side& x) {
        if (&x != &s) return;
        struct fid_mr* rm = reg(s, rb.data(), rb.size(), FI_RECV);
        for (size_t i = 0; i < kMsgs; ++i)
            ASSERT_EQ(fi_recv(s.ep, &rb[i * 64], 64, fi_mr_desc(rm), 0, nullptr), 0) << i;
    }));
    struct fid_mr* sm = reg(c, sb.data(), sb.size(), FI_SEND);
    for (size_t i = 0; i < kMsgs; ++i) {
        memset(sb.data(), static_cast<int>(i + 1), 64);
        if (i % 2) {  // fi_inject: no completion of any kind, still counted
            ASSERT_EQ(retry([&] { return fi_inject(c.ep, sb.data(), 16, 0); }, c.send), 0) << i;
        } else {
            ASSERT_EQ(retry([&] { return fi_send(c.ep, sb.data(), 64, fi_mr_desc(sm), 0, nullptr); },
                            c.send), 0) << i;
            // a buffer the NIC reads later must not change before completion
            ASSERT_EQ(fi_cntr_wait(c.send, i + 1, 10000), 0) << i;
        }
    }
    EXPECT_EQ(fi_cntr_wait(c.send, kMsgs, 10000), 0);
    EXPECT_EQ(fi_cntr_wait(s.recv, kMsgs, 10000), 0);
    EXPECT_EQ(fi_cntr_read(c.send), kMsgs);
    EXPECT_EQ(fi_cntr_read(s.recv), kMsgs);
    EXPECT_EQ(fi_cntr_readerr(c.send), 0u);
    EXPECT_EQ(fi_cntr_readerr(s.recv), 0u);
    EXPECT_EQ(fi_cntr_read(c.recv), 0u);
    EXPECT_EQ(fi_cntr_read(s.send), 0u);
    EXPECT_EQ(fi_cntr_read(c.write), 0u);
    for (size_t i = 0; i < kMsgs; ++i)
        EXPECT_EQ(rb[i * 64], static_cast<uint8_t>(i + 1)) << "message " << i << " in order";
}

TEST_F(CntrRxe, SelectiveCompletionCountsEveryOpAndLosesNoCqEntry) {
    client_tx_flags = FI_SELECTIVE_COMPLETION;
    constexpr size_t kMsgs = 48;
    std::vector<int> rctx(kMsgs), sctx(kMsgs);
    std::vector<uint8_t> rb(kMsgs * 32), sb(32);
    ASSERT_NO_FATAL_FAILURE(connect([&](side& x) {
        if (&x != &s) return;
        struct fid_mr* rm = reg(s, rb.data(), rb.size(), FI_RECV);
        for (size_t i = 0; i < kMsgs; ++i)
            ASSERT_EQ(fi_recv(s.ep, &rb[i * 32], 32, fi_mr_desc(rm), 0, &rctx[i]), 0) << i;
    }));
    struct fid_mr* sm = reg(c, sb.data(), sb.size(), FI_SEND);
    size_t want_tx = 0;
    for (size_t i = 0; i < kMsgs; ++i) {
        struct iovec iov = {sb.data(), 8};
        void* d = fi_mr_desc(sm);
        struct fi_msg m = rxetest::one_buffer_msg(iov, d, &sctx[i]);
        bool comp = i % 5 == 0;
        if (i % 3 == 2) {  // fi_inject never completes in the CQ
            ASSERT_EQ(retry([&] { return fi_inject(c.ep, sb.data(), 8, 0); }, c.send), 0) << i;
        } else {
            ASSERT_EQ(retry([&] { return fi_sendmsg(c.ep, &m, comp ? FI_COMPLETION : 0); }, c.send),
                      0) << i;
            want_tx += comp;
        }
    }
    // the application reads the counters first ...
    ASSERT_EQ(fi_cntr_wait(c.send, kMsgs, 20000), 0);
    ASSERT_EQ(fi_cntr_wait(s.recv, kMsgs, 20000), 0);
    EXPECT_EQ(fi_cntr_read(c.send), kMsgs) << "every send counted, with or without completion";
    EXPECT_EQ(fi_cntr_readerr(c.send), 0u);
    // ... and the CQs later: everything they must show is still there, in order
    auto tx = drain(c.tx, want_tx);
    ASSERT_EQ(tx.size(), want_tx);
    size_t k = 0;
    for (size_t i = 0; i < kMsgs; ++i) {
        if (i % 5 != 0 || i % 3 == 2) continue;
        ASSERT_LT(k, tx.size());
        EXPECT_EQ(tx[k].op_context, &sctx[i]) << "tx completion " << k;
        EXPECT_EQ(tx[k].flags & (FI_SEND | FI_MSG), FI_SEND | FI_MSG);
        ++k;
    }
    struct fi_cq_data_entry e {};
    EXPECT_EQ(fi_cq_read(c.tx, &e, 1), -FI_EAGAIN) << "no completion for unrequested sends";
    auto rx = drain(s.rx, kMsgs);
    ASSERT_EQ(rx.size(), kMsgs);
    for (size_t i = 0; i < kMsgs; ++i) {
        EXPECT_EQ(rx[i].op_context, &rctx[i]) << "rx completion " << i;
        EXPECT_EQ(rx[i].len, 8u);
    }
    EXPECT_EQ(fi_cq_read(s.rx, &e, 1), -FI_EAGAIN);
}

TEST_F(CntrRxe, RmaReadAndWriteCounters) {
    constexpr size_t kOps = 12, kLen = 4096;
    std::vector<uint8_t> local(kLen), remote(kLen * kOps), back(kLen * kOps);
    ASSERT_NO_FATAL_FAILURE(connect());
    struct fid_mr* lm = reg(c, local.data(), local.size(), FI_WRITE);
    struct fid_mr* bm = reg(c, back.data(), back.size(), FI_READ);
    struct fid_mr* rm = reg(s, remote.data(), remote.size(), FI_REMOTE_WRITE | FI_REMOTE_READ);
    uint64_t key = fi_mr_key(rm);
    uintptr_t raddr = reinterpret_cast<uintptr_t>(remote.data());
    std::vector<int> ctx(2 * kOps);
    for (size_t i = 0; i < kOps; ++i) {
        memset(local.data(), static_cast<int>(0x30 + i), kLen);
        ASSERT_EQ(retry([&] { return fi_write(c.ep, local.data(), kLen, fi_mr_desc(lm), 0,
                                              raddr + i * kLen, key, &ctx[i]); }, c.write), 0);
        ASSERT_EQ(fi_cntr_wait(c.write, i + 1, 10000), 0) << i;  // local buffer reused
    }
    for (size_t i = 0; i < kOps; ++i)
        ASSERT_EQ(retry([&] { return fi_read(c.ep, &back[i * kLen], kLen, fi_mr_desc(bm), 0,
                                             raddr + i * kLen, key, &ctx[kOps + i]); }, c.read), 0);
    ASSERT_EQ(fi_cntr_wait(c.read, kOps, 10000), 0);
    EXPECT_EQ(fi_cntr_read(c.write), kOps);
    EXPECT_EQ(fi_cntr_read(c.read), kOps);
    EXPECT_EQ(fi_cntr_read(c.send), 0u) << "RMA is not counted as a send";
    EXPECT_EQ(fi_cntr_readerr(c.read) + fi_cntr_readerr(c.write), 0u);
    for (size_t i = 0; i < kOps; ++i) {
        EXPECT_EQ(remote[i * kLen], static_cast<uint8_t>(0x30 + i)) << i;
        EXPECT_EQ(back[i * kLen + kLen - 1], static_cast<uint8_t>(0x30 + i)) << i;
    }
    EXPECT_EQ(fi_cntr_read(s.recv) + fi_cntr_read(s.write) + fi_cntr_read(s.read), 0u)
        << "the target of RMA counts nothing (no FI_RMA_EVENT)";
    // the CQ still reports every operation, in order (the counters pulled them first)
    auto cq = drain(c.tx, 2 * kOps);
    ASSERT_EQ(cq.size(), 2 * kOps);
    for (size_t i = 0; i < 2 * kOps; ++i) {
        EXPECT_EQ(cq[i].op_context, &ctx[i]) << i;
        EXPECT_EQ(cq[i].flags, (i < kOps ? FI_WRITE : FI_READ) | FI_RMA) << i;
    }
}

TEST_F(CntrRxe, BadKeyIncrementsTheErrorCount) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP completes an RDMA WRITE locally: a bad key ends the connection later (fi_evd(7), IWARP)";
    client_cqs = false;  // counter-only: the error is found by counter progress
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> lb(1024), target(1024);
    struct fid_mr* lm = reg(c, lb.data(), lb.size(), FI_WRITE);
    struct fid_mr* tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE);
    ASSERT_EQ(fi_write(c.ep, lb.data(), lb.size(), fi_mr_desc(lm), 0,
                       reinterpret_cast<uintptr_t>(target.data()), fi_mr_key(tm) ^ 0x5a5a00, nullptr),
              0);
    EXPECT_EQ(fi_cntr_wait(c.write, 1, 10000), -FI_EAVAIL) << "an error unblocks the waiter";
    EXPECT_EQ(fi_cntr_readerr(c.write), 1u);
    EXPECT_EQ(fi_cntr_read(c.write), 0u);
    EXPECT_EQ(fi_cntr_readerr(c.send), 0u) << "only the write counter";
    EXPECT_EQ(fi_cntr_wait(c.write, 1, 100), -FI_ETIMEDOUT) << "no error change since the call";
    // the endpoint is in error: its terminal event arrives on its EQ
    bool terminal = false;
    auto end = clk::now() + std::chrono::seconds(5);
    while (!terminal && clk::now() < end) {
        uint32_t ev;
        uint8_t buf[512];
        ssize_t r = fi_eq_read(c.eq, &ev, buf, sizeof buf, 0);
        if (r == -FI_EAVAIL) {
            struct fi_eq_err_entry ee {};
            ASSERT_GT(fi_eq_readerr(c.eq, &ee, 0), 0);
            EXPECT_EQ(ee.fid, &c.ep->fid);
            terminal = true;
        } else if (r > 0 && ev == FI_SHUTDOWN) {
            terminal = true;
        } else {
            (void)fi_cntr_read(c.write);
            std::this_thread::sleep_for(milliseconds(20));
        }
    }
    EXPECT_TRUE(terminal);
}

TEST_F(CntrRxe, WaitWakesOnARealCompletion) {
    std::vector<uint8_t> rb(64), sb(64, 7);
    ASSERT_NO_FATAL_FAILURE(connect_with_server_recv(rb));
    struct fid_mr* sm = reg(c, sb.data(), sb.size(), FI_SEND);
    std::atomic<int> rc{1};
    clk::time_point woke;
    std::thread waiter([&] {
        rc = fi_cntr_wait(s.recv, 1, 20000);
        woke = clk::now();
    });
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(rc.load(), 1) << "returned before anything arrived";
    auto sent = clk::now();
    ASSERT_EQ(fi_send(c.ep, sb.data(), sb.size(), fi_mr_desc(sm), 0, nullptr), 0);
    waiter.join();
    EXPECT_EQ(rc.load(), 0);
    auto ms = std::chrono::duration_cast<milliseconds>(woke - sent).count();
    EXPECT_LT(ms, 5000) << "woken by the completion, not by the timeout";
    EXPECT_EQ(rb[0], 7);
    RecordProperty("wake_ms", static_cast<int>(ms));
    printf("fi_cntr_wait woke %lld ms after fi_send\n", static_cast<long long>(ms));
    struct fi_cq_data_entry e[2];
    auto rx = drain(s.rx, 1);
    EXPECT_EQ(rx.size(), 1u) << "the completion the counter pulled is still in the CQ";
    EXPECT_EQ(fi_cq_read(s.rx, e, 2), -FI_EAGAIN);
    EXPECT_EQ(fi_cntr_wait(c.send, 1, 10000), 0);
}

}  // namespace

namespace {

// The FI_GETWAIT fd with fi_trywait (as fabtests -c fd use it): trywait arms
// the sources and says 0 while nothing is pending; the fd then becomes
// readable when a real completion arrives, and trywait answers -FI_EAGAIN.
void CntrRxe::trywait_then_wait_fd_wakes() {
    std::vector<uint8_t> rb(64), sb(64, 9);
    ASSERT_NO_FATAL_FAILURE(connect_with_server_recv(rb));
    struct fid_mr* sm = reg(c, sb.data(), sb.size(), FI_SEND);
    int fd = -1;
    ASSERT_EQ(fi_control(&s.recv->fid, FI_GETWAIT, &fd), 0);
    ASSERT_GE(fd, 0);
    struct fid* f = &s.recv->fid;
    int tw = fi_trywait(fab, &f, 1);
    if (tw == -FI_EAGAIN) tw = fi_trywait(fab, &f, 1);  // connection setup may have signalled
    ASSERT_EQ(tw, 0) << fi_strerror(-tw);
    struct pollfd p = {fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 200), 0) << "readable with nothing pending";
    ASSERT_EQ(fi_send(c.ep, sb.data(), sb.size(), fi_mr_desc(sm), 0, nullptr), 0);
    auto t0 = clk::now();
    ASSERT_EQ(::poll(&p, 1, 10000), 1) << "the completion did not make the fd readable";
    auto ms = std::chrono::duration_cast<milliseconds>(clk::now() - t0).count();
    EXPECT_LT(ms, 5000);
    EXPECT_EQ(fi_trywait(fab, &f, 1), -FI_EAGAIN) << "something to read";
    EXPECT_EQ(fi_cntr_read(s.recv), 1u);
    EXPECT_EQ(rb[0], 9);
    EXPECT_EQ(fi_trywait(fab, &f, 1), 0) << "all seen: safe to sleep again";
}

TEST_F(CntrRxe, TrywaitThenWaitFdWakesOnACompletion) { trywait_then_wait_fd_wakes(); }

// The same when the endpoint's CQs have no wait object: the counter still
// sleeps on their (unexported) completion channels instead of polling them.
TEST_F(CntrRxe, TrywaitThenWaitFdWakesWithWaitNoneCqs) {
    cq_wait_obj = FI_WAIT_NONE;
    trywait_then_wait_fd_wakes();
}

// A counter in an FD wait set: fi_wait sleeps while the counter has nothing
// new and returns when a real receive completes on rxe.
TEST_F(CntrRxe, WaitSetWakesOnACountedCompletion) {
    server_recv_in_set = true;
    std::vector<uint8_t> rb(64), sb(64, 7);
    ASSERT_NO_FATAL_FAILURE(connect_with_server_recv(rb));
    ASSERT_NE(recv_set, nullptr);
    struct fid_mr* sm = reg(c, sb.data(), sb.size(), FI_SEND);
    int r = fi_wait(recv_set, 200);
    if (r == 0) r = fi_wait(recv_set, 200);  // connection setup may have moved something
    EXPECT_EQ(r, -FI_ETIMEDOUT) << "nothing was sent yet";
    EXPECT_EQ(fi_cntr_read(s.recv), 0u);
    std::thread sender([&] {
        std::this_thread::sleep_for(milliseconds(100));
        fi_send(c.ep, sb.data(), sb.size(), fi_mr_desc(sm), 0, nullptr);
    });
    auto t0 = clk::now();
    EXPECT_EQ(fi_wait(recv_set, 10000), 0);
    auto ms = std::chrono::duration_cast<milliseconds>(clk::now() - t0).count();
    sender.join();
    EXPECT_LT(ms, 5000);
    EXPECT_EQ(fi_cntr_read(s.recv), 1u);
    EXPECT_EQ(rb[0], 7);
    EXPECT_EQ(fi_wait(recv_set, 100), -FI_ETIMEDOUT) << "all seen";
}

}  // namespace
