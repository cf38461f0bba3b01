// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Data path on Soft-RoCE, through the real libfabric API: a server endpoint
// on rxe0 (EVD_VM_ADDR0) and a client endpoint on rxe1 (EVD_VM_ADDR1),
// connected in one process. send/recv and RMA with data checks from 0 bytes
// to several MiB, remote CQ data, inject, selective completion, shared
// receive contexts, CQ wait/signal, and the error path (a bad RMA key is
// reported as a completion error and ends the endpoint exactly once).
// Runs inside the VM: test/vm/run-in-vm -- ./evd_integration --gtest_filter='Data*'
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext_evd.h>
#include <rdma/fi_rma.h>

#include <atomic>
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

// Wait and poll sets are deprecated in libfabric 2.x, not removed: evd keeps
// them for the applications that open them, and these tests open them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using clk = std::chrono::steady_clock;

const char* addr0() {
    const char* a = getenv("EVD_VM_ADDR0");
    return a ? a : "192.0.2.1";
}

// queue depths as an application would pick them
struct fi_info* base_hints() { return rxetest::rma_hints(256); }

uint8_t pattern(size_t i, unsigned seed) { return static_cast<uint8_t>((i * 131u + seed * 7u + (i >> 8)) & 0xff); }
void fill(std::vector<uint8_t>& b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i) b[i] = pattern(i, seed);
}
// index of the first wrong byte, or n
size_t check(const std::vector<uint8_t>& b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i)
        if (b[i] != pattern(i, seed)) return i;
    return n;
}

// One side of a connection, with the server's shared receive context.
struct side : rxetest::pair_side {
    struct fid_ep* srx = nullptr;
};

struct cq_comp {
    struct fi_cq_data_entry e;
};

class DataRxe : public rxetest::PairFixture<DataRxe, side> {
    friend class rxetest::PairFixture<DataRxe, side>;

protected:
    uint64_t tx_bind = 0;      // extra bind flags for the client's tx CQ
    bool server_srx = false;   // server endpoint on a shared receive context
    bool srx_attr_from_info = false;  // fi_srx_context gets the fi_info's rx_attr
    struct fi_rx_attr srx_granted {};  // what fi_srx_context wrote back
    enum fi_wait_obj cq_wait = FI_WAIT_FD;
    void sread_times_out_signals_and_completes();

    void TearDown() override {
        for (side* x : {&c, &s})
            close_side(*x, [](side& y) {
                if (y.srx) { EXPECT_EQ(fi_close(&y.srx->fid), 0); }
            });
        close_listener();
    }

    struct fi_info* pair_hints() { return base_hints(); }

    void open_side(side& x, struct fi_info* info) {
        ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
        ASSERT_NO_FATAL_FAILURE(open_cqs(x, cq_wait, 1024));
        ASSERT_NO_FATAL_FAILURE(open_endpoint(x, &x == &c ? tx_bind : 0));
        if (&x == &s && server_srx) {
            struct fi_rx_attr ra {};
            ra.size = 256;
            ra.iov_limit = 1;
            if (srx_attr_from_info) ra = *info->rx_attr;  // as fabtests do
            ASSERT_EQ(fi_srx_context(x.dom, &ra, &x.srx, nullptr), 0);
            srx_granted = ra;
            ASSERT_EQ(fi_ep_bind(x.ep, &x.srx->fid, 0), 0);
        }
        ASSERT_EQ(fi_enable(x.ep), 0);
    }

    // Reads exactly one completion (busy poll with a deadline).
    static ssize_t cq_one(struct fid_cq* cq, struct fi_cq_data_entry& e, int ms = 20000) {
        auto end = clk::now() + std::chrono::milliseconds(ms);
        for (;;) {
            ssize_t r = fi_cq_read(cq, &e, 1);
            if (r != -FI_EAGAIN) return r;
            if (clk::now() > end) return -FI_ETIMEDOUT;
            std::this_thread::yield();
        }
    }
    // Asserts nothing is (or becomes, within ms) readable.
    static void cq_none(struct fid_cq* cq, int ms = 200) {
        struct fi_cq_data_entry e {};
        auto end = clk::now() + std::chrono::milliseconds(ms);
        while (clk::now() < end) {
            ssize_t r = fi_cq_read(cq, &e, 1);
            ASSERT_EQ(r, -FI_EAGAIN) << "unexpected completion, context " << e.op_context;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }

    held<struct fid_mr> reg(side& x, void* buf, size_t len, uint64_t access) {
        held<struct fid_mr> mr;
        EXPECT_EQ(fi_mr_reg(x.dom, buf, len, access, 0, 0, 0, mr.out(), nullptr), 0);
        return mr;
    }

    size_t inject_size() const { return c.info->tx_attr->inject_size; }

    // Registers lb on the client and target on the server and posts an
    // fi_write of len bytes (context ctx) to target with a wrong key.
    void write_with_bad_key(std::vector<uint8_t>& lb, std::vector<uint8_t>& target, size_t len,
                            int* ctx, held<struct fid_mr>* lm, held<struct fid_mr>* tm) {
        *lm = reg(c, lb.data(), lb.size(), FI_WRITE);
        *tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE);
        ASSERT_TRUE(*lm && *tm);
        ASSERT_EQ(fi_write(c.ep, lb.data(), len, fi_mr_desc(*lm), 0,
                           reinterpret_cast<uintptr_t>(target.data()), fi_mr_key(*tm) ^ 0x5a5a00,
                           ctx),
                  0);
    }
};

constexpr size_t kSizes[] = {0, 1, 7, 64, 255, 4096, 4097, 65536, 1 << 20, 3 << 20, 8 << 20};

TEST_F(DataRxe, SendRecvAcrossSizesBothWays) {
    ASSERT_NO_FATAL_FAILURE(connect());
    const size_t max = 8 << 20;
    std::vector<uint8_t> sbuf(max), rbuf(max);
    held<struct fid_mr> cmr = reg(c, sbuf.data(), max, FI_SEND | FI_RECV);
    held<struct fid_mr> smr = reg(s, rbuf.data(), max, FI_SEND | FI_RECV);
    ASSERT_TRUE(cmr && smr);
    unsigned seed = 1;
    for (int dir = 0; dir < 2; ++dir) {
        side& tx = dir ? s : c;
        side& rx = dir ? c : s;
        std::vector<uint8_t>& out = dir ? rbuf : sbuf;
        std::vector<uint8_t>& in = dir ? sbuf : rbuf;
        struct fid_mr* omr = dir ? smr.get() : cmr.get();
        struct fid_mr* imr = dir ? cmr.get() : smr.get();
        for (size_t n : kSizes) {
            SCOPED_TRACE("size " + std::to_string(n) + " dir " + std::to_string(dir));
            ++seed;
            fill(out, n, seed);
            memset(in.data(), 0xee, std::min(max, n + 16));
            int rctx, sctx;
            ASSERT_EQ(fi_recv(rx.ep, in.data(), max, fi_mr_desc(imr), 0, &rctx), 0);
            ASSERT_EQ(fi_send(tx.ep, out.data(), n, fi_mr_desc(omr), 0, &sctx), 0);
            struct fi_cq_data_entry e {};
            ASSERT_EQ(cq_one(tx.tx, e), 1);
            EXPECT_EQ(e.op_context, &sctx);
            EXPECT_EQ(e.flags, FI_SEND | FI_MSG);
            ASSERT_EQ(cq_one(rx.rx, e), 1);
            EXPECT_EQ(e.op_context, &rctx);
            EXPECT_EQ(e.flags, FI_RECV | FI_MSG);
            EXPECT_EQ(e.len, n);
            EXPECT_EQ(check(in, n, seed), n) << "first wrong byte";
            if (n + 1 < max) {
                EXPECT_EQ(in[n], 0xee) << "wrote past the message";
            }
        }
    }
    EXPECT_EQ(cmr.close(), 0);
    EXPECT_EQ(smr.close(), 0);
}

TEST_F(DataRxe, SendvRecvvScatterGather) {
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> a(100000), b(100000);
    fill(a, a.size(), 9);
    held<struct fid_mr> am = reg(c, a.data(), a.size(), FI_SEND);
    held<struct fid_mr> bm = reg(s, b.data(), b.size(), FI_RECV);
    struct iovec siov[3] = {{a.data(), 10}, {a.data() + 10, 0}, {a.data() + 10, 60000}};
    void* sd[3] = {fi_mr_desc(am), nullptr, fi_mr_desc(am)};  // zero-length entry needs no desc
    struct iovec riov[2] = {{b.data(), 30000}, {b.data() + 30000, 70000}};
    void* rd[2] = {fi_mr_desc(bm), fi_mr_desc(bm)};
    ASSERT_EQ(fi_recvv(s.ep, riov, rd, 2, 0, nullptr), 0);
    ASSERT_EQ(fi_sendv(c.ep, siov, sd, 3, 0, nullptr), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(s.rx, e), 1);
    EXPECT_EQ(e.len, 60010u);
    EXPECT_EQ(check(b, 60010, 9), 60010u);
    ASSERT_EQ(cq_one(c.tx, e), 1);
    am.close();
    bm.close();
}

TEST_F(DataRxe, RmaWriteThenReadBackAcrossSizes) {
    ASSERT_NO_FATAL_FAILURE(connect());
    const size_t max = 8 << 20;
    std::vector<uint8_t> local(max), back(max), remote(max);
    held<struct fid_mr> lm = reg(c, local.data(), max, FI_WRITE);
    held<struct fid_mr> bm = reg(c, back.data(), max, FI_READ);
    held<struct fid_mr> rm = reg(s, remote.data(), max, FI_REMOTE_READ | FI_REMOTE_WRITE);
    ASSERT_TRUE(lm && bm && rm);
    uint64_t raddr = reinterpret_cast<uintptr_t>(remote.data());  // FI_MR_VIRT_ADDR
    uint64_t key = fi_mr_key(rm);
    unsigned seed = 40;
    for (size_t n : kSizes) {
        SCOPED_TRACE("size " + std::to_string(n));
        ++seed;
        fill(local, n, seed);
        memset(back.data(), 0, std::min(max, n + 8));
        int wctx, rctx;
        ASSERT_EQ(fi_write(c.ep, local.data(), n, fi_mr_desc(lm), 0, raddr, key, &wctx), 0);
        struct fi_cq_data_entry e {};
        ASSERT_EQ(cq_one(c.tx, e), 1);
        EXPECT_EQ(e.op_context, &wctx);
        EXPECT_EQ(e.flags, FI_RMA | FI_WRITE);
        EXPECT_EQ(check(remote, n, seed), n) << "remote buffer after fi_write";
        ASSERT_EQ(fi_read(c.ep, back.data(), n, fi_mr_desc(bm), 0, raddr, key, &rctx), 0);
        ASSERT_EQ(cq_one(c.tx, e), 1);
        EXPECT_EQ(e.op_context, &rctx);
        EXPECT_EQ(e.flags, FI_RMA | FI_READ);
        EXPECT_EQ(check(back, n, seed), n) << "read back";
    }
    // the target reports nothing for plain RMA
    ASSERT_NO_FATAL_FAILURE(cq_none(s.rx, 50));
    // fi_writemsg / fi_readmsg at an offset
    struct fi_rma_iov riov = {raddr + 4096, 1000, key};
    struct iovec liov = {local.data() + 3, 1000};
    void* ld = fi_mr_desc(lm);
    fill(local, 2000, 77);
    struct fi_msg_rma m {};
    m.msg_iov = &liov;
    m.desc = &ld;
    m.iov_count = 1;
    m.rma_iov = &riov;
    m.rma_iov_count = 1;
    m.context = &riov;
    ASSERT_EQ(fi_writemsg(c.ep, &m, FI_COMPLETION), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(c.tx, e), 1);
    EXPECT_EQ(e.op_context, &riov);
    EXPECT_EQ(0, memcmp(remote.data() + 4096, local.data() + 3, 1000));
    m.rma_iov_count = 2;
    EXPECT_EQ(fi_writemsg(c.ep, &m, 0), -FI_EINVAL);
    lm.close();
    bm.close();
    rm.close();
}

TEST_F(DataRxe, RemoteCqDataOnSendAndWrite) {
    std::vector<uint8_t> rb(4096), sb(4096), target(4096);
    held<struct fid_mr> rm, sm, tm;
    ASSERT_NO_FATAL_FAILURE(connect());
    rm = reg(s, rb.data(), rb.size(), FI_RECV);
    sm = reg(c, sb.data(), sb.size(), FI_SEND | FI_WRITE);
    tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE);
    int r1, r2;
    if (rxetest::on_iwarp()) {
        // iWARP carries no immediate data: none offered, none sent
        EXPECT_EQ(c.info->domain_attr->cq_data_size, 0u);
        EXPECT_EQ(c.info->mode & FI_RX_CQ_DATA, 0u);
        EXPECT_EQ(fi_senddata(c.ep, sb.data(), 100, fi_mr_desc(sm), 1, 0, nullptr), -FI_EOPNOTSUPP);
        EXPECT_EQ(fi_writedata(c.ep, sb.data(), 8, fi_mr_desc(sm), 1, 0,
                               reinterpret_cast<uintptr_t>(target.data()), fi_mr_key(tm), nullptr),
                  -FI_EOPNOTSUPP);
        rm.close();
        sm.close();
        tm.close();
        return;
    }
    ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, &r1), 0);
    ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, &r2), 0);
    fill(sb, 3000, 5);
    ASSERT_EQ(fi_senddata(c.ep, sb.data(), 100, fi_mr_desc(sm), 0xdeadbeef, 0, nullptr), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(s.rx, e), 1);
    EXPECT_EQ(e.op_context, &r1);
    EXPECT_EQ(e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
    EXPECT_EQ(e.data, 0xdeadbeefu);
    EXPECT_EQ(e.len, 100u);
    ASSERT_EQ(fi_writedata(c.ep, sb.data(), 3000, fi_mr_desc(sm), 0x12345678, 0,
                           reinterpret_cast<uintptr_t>(target.data()), fi_mr_key(tm), nullptr),
              0);
    ASSERT_EQ(cq_one(s.rx, e), 1);  // consumes the second posted receive
    EXPECT_EQ(e.op_context, &r2);
    EXPECT_EQ(e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
    EXPECT_EQ(e.data, 0x12345678u);
    EXPECT_EQ(e.len, 3000u);
    EXPECT_EQ(check(target, 3000, 5), 3000u);
    // only 4 bytes of immediate data exist
    EXPECT_EQ(fi_senddata(c.ep, sb.data(), 1, fi_mr_desc(sm), 1ull << 32, 0, nullptr), -FI_EINVAL);
    ASSERT_EQ(cq_one(c.tx, e), 1);
    ASSERT_EQ(cq_one(c.tx, e), 1);
    rm.close();
    sm.close();
    tm.close();
}

TEST_F(DataRxe, InjectUpToInlineSizeWithoutCompletion) {
    ASSERT_NO_FATAL_FAILURE(connect());
    size_t inj = inject_size();
    ASSERT_GT(inj, 0u) << "the device offers no inline data";
    std::vector<uint8_t> rb(inj + 64), sb(inj + 64), target(inj + 64);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE);
    fill(sb, sb.size(), 3);
    int r1;
    ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, &r1), 0);
    // no descriptor: the data is copied at post time
    ASSERT_EQ(fi_inject(c.ep, sb.data(), inj, 0), 0);
    memset(sb.data(), 0, inj);  // the buffer is reusable at once
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(s.rx, e), 1);
    EXPECT_EQ(e.op_context, &r1);
    EXPECT_EQ(e.len, inj);
    EXPECT_EQ(check(rb, inj, 3), inj);
    fill(sb, sb.size(), 4);
    ASSERT_EQ(fi_inject_write(c.ep, sb.data(), inj, 0, reinterpret_cast<uintptr_t>(target.data()),
                              fi_mr_key(tm)),
              0);
    EXPECT_EQ(fi_inject(c.ep, sb.data(), inj + 1, 0), -FI_EINVAL);
    // give the write time to land; the sender sees no completion for either
    ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 300));
    EXPECT_EQ(check(target, inj, 4), inj);
    // FI_INJECT on sendmsg: completion requested, data copied
    int r2, sctx;
    ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, &r2), 0);
    struct iovec iov = {sb.data(), 16};
    struct fi_msg m {};
    m.msg_iov = &iov;
    m.iov_count = 1;
    m.context = &sctx;
    ASSERT_EQ(fi_sendmsg(c.ep, &m, FI_INJECT | FI_COMPLETION), 0);
    ASSERT_EQ(cq_one(c.tx, e), 1);
    EXPECT_EQ(e.op_context, &sctx);
    ASSERT_EQ(cq_one(s.rx, e), 1);
    EXPECT_EQ(e.op_context, &r2);
    rm.close();
    tm.close();
}

// FI_MORE (post_batch.h): sends, writes and receives posted with the flag
// are held, nothing reaches the peer or the CQ, until a call without it;
// then every one arrives, in order, with the data it had when it was posted
// (an inject's buffer is reused at once); receives held with FI_MORE take
// the messages once a receive without it is posted.
TEST_F(DataRxe, MoreHoldsRequestsUntilACallWithoutIt) {
    ASSERT_NO_FATAL_FAILURE(connect());
    // A resumable endpoint (FI_EVD_RESUME_TIMEOUT, run-in-guest.sh runs this
    // suite again with it) posts every request at once (fi_evd(7)): there
    // only the order and the data are checked, not that requests wait.
    int resume_ms = 0;
    ASSERT_EQ(fi_control(&c.ep->fid, FI_EVD_RESUME_TIMEOUT_GET, &resume_ms), 0);
    const bool holds = resume_ms == 0;
    constexpr int kN = 8;
    std::vector<uint8_t> rb(kN * 64), sb(kN * 64), target(256);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND | FI_WRITE);
    held<struct fid_mr> tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE);
    ASSERT_TRUE(rm && sm && tm);
    int rctx[kN], sctx[kN];
    // receives: all but the last with FI_MORE
    for (int i = 0; i < kN; ++i) {
        struct iovec iov = {rb.data() + 64 * i, 64};
        void* d = fi_mr_desc(rm);
        struct fi_msg m {};
        m.msg_iov = &iov;
        m.desc = &d;
        m.iov_count = 1;
        m.context = &rctx[i];
        ASSERT_EQ(fi_recvmsg(s.ep, &m, i + 1 < kN ? FI_MORE : 0), 0);
    }
    // sends: inline ones (their buffer overwritten at once) and ones with a
    // descriptor, all but the last held
    for (int i = 0; i < kN; ++i) {
        memset(sb.data() + 64 * i, 0x10 + i, 64);
        struct iovec iov = {sb.data() + 64 * i, i % 2 ? size_t{64} : size_t{8}};
        void* d = fi_mr_desc(sm);
        struct fi_msg m {};
        m.msg_iov = &iov;
        m.desc = &d;
        m.iov_count = 1;
        m.context = &sctx[i];
        const uint64_t inj = i % 2 ? 0 : FI_INJECT;
        ASSERT_EQ(fi_sendmsg(c.ep, &m, FI_COMPLETION | inj | (i + 1 < kN ? FI_MORE : 0)), 0);
        if (inj) memset(sb.data() + 64 * i, 0xee, 8);  // FI_INJECT: reusable at once
        if (holds && i == kN / 2) {
            // half the batch posted: nothing has gone
            ASSERT_NO_FATAL_FAILURE(cq_none(s.rx, 300));
            ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 0));
        }
    }
    struct fi_cq_data_entry e {};
    for (int i = 0; i < kN; ++i) {
        ASSERT_EQ(cq_one(s.rx, e), 1) << "receive " << i;
        EXPECT_EQ(e.op_context, &rctx[i]);
        EXPECT_EQ(e.len, i % 2 ? 64u : 8u);
        EXPECT_EQ(rb[64 * i], 0x10 + i) << "receive " << i;
        ASSERT_EQ(cq_one(c.tx, e), 1) << "send " << i;
        EXPECT_EQ(e.op_context, &sctx[i]);
    }
    // writes: held until the one without the flag
    for (int i = 0; i < 4; ++i) {
        memset(sb.data() + 64 * i, 0x40 + i, 64);
        struct iovec iov = {sb.data() + 64 * i, 64};
        void* d = fi_mr_desc(sm);
        struct fi_rma_iov ri = {reinterpret_cast<uintptr_t>(target.data()) + 64 * i, 64,
                                fi_mr_key(tm)};
        struct fi_msg_rma m {};
        m.msg_iov = &iov;
        m.desc = &d;
        m.iov_count = 1;
        m.rma_iov = &ri;
        m.rma_iov_count = 1;
        m.context = &sctx[i];
        ASSERT_EQ(fi_writemsg(c.ep, &m, FI_COMPLETION | (i < 3 ? FI_MORE : 0)), 0);
        if (holds && i == 2) {
            ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 300));
            EXPECT_EQ(target[0], 0) << "a write held with FI_MORE has landed";
        }
    }
    for (int i = 0; i < 4; ++i) {
        ASSERT_EQ(cq_one(c.tx, e), 1) << "write " << i;
        EXPECT_EQ(e.op_context, &sctx[i]);
        EXPECT_EQ(target[64 * i], 0x40 + i);
    }
    rm.close();
    sm.close();
    tm.close();
}

// fi_inject reports nothing, so its send-queue slots are only reclaimed by
// the hidden signaled send evd slips in; a burst of 10x the queue depth must
// go through with -FI_EAGAIN (never another error) while the queue is full,
// progress made by reading the CQ, no visible completion, and every message
// delivered intact and in order.
TEST_F(DataRxe, InjectBurstBeyondQueueDepthRetriesOnEagain) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP has no receiver-not-ready retry: a burst that outruns the posted receives ends the connection";
    ASSERT_NO_FATAL_FAILURE(connect());
    const size_t inj = std::min<size_t>(inject_size(), 128);
    ASSERT_GT(inj, 0u);
    const size_t depth = c.info->tx_attr->size;
    ASSERT_GT(depth, 0u);
    const size_t total = 10 * depth;
    const size_t slots = std::min<size_t>(s.info->rx_attr->size, 128);
    std::vector<uint8_t> rb(slots * inj);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    std::vector<size_t> ctx(slots);
    for (size_t k = 0; k < slots; ++k) {
        ctx[k] = k;
        ASSERT_EQ(fi_recv(s.ep, &rb[k * inj], inj, fi_mr_desc(rm), 0, &ctx[k]), 0);
    }
    auto len_of = [&](size_t i) { return i % inj + 1; };
    size_t received = 0, bad = 0, eagain = 0;
    // drains the receiver, verifies, reposts; returns false on a CQ error
    auto drain_rx = [&]() {
        struct fi_cq_data_entry e {};
        for (;;) {
            ssize_t r = fi_cq_read(s.rx, &e, 1);
            if (r == -FI_EAGAIN) return true;
            if (r != 1) {
                ADD_FAILURE() << "receiver CQ: " << fi_strerror(static_cast<int>(-r));
                return false;
            }
            size_t k = *static_cast<size_t*>(e.op_context);
            size_t i = received++;
            bool ok = e.len == len_of(i);
            for (size_t b = 0; ok && b < e.len; ++b) ok = rb[k * inj + b] == pattern(b, static_cast<unsigned>(i));
            if (!ok && bad++ < 5) ADD_FAILURE() << "message " << i << " (len " << e.len << ") corrupt or out of order";
            if (fi_recv(s.ep, &rb[k * inj], inj, fi_mr_desc(rm), 0, &ctx[k]) != 0) {
                ADD_FAILURE() << "repost failed";
                return false;
            }
        }
    };
    std::vector<uint8_t> sb(inj);
    auto end = clk::now() + std::chrono::seconds(120);
    for (size_t i = 0; i < total; ++i) {
        for (size_t b = 0; b < len_of(i); ++b) sb[b] = pattern(b, static_cast<unsigned>(i));
        for (;;) {
            ssize_t r = fi_inject(c.ep, sb.data(), len_of(i), 0);
            if (r == 0) break;
            ASSERT_EQ(r, -FI_EAGAIN) << "fi_inject #" << i << ": " << fi_strerror(static_cast<int>(-r));
            ++eagain;
            // progress: reading the sender's CQ retires the hidden signaled
            // send; it must surface nothing
            struct fi_cq_data_entry e {};
            ASSERT_EQ(fi_cq_read(c.tx, &e, 1), -FI_EAGAIN) << "inject produced a completion";
            ASSERT_TRUE(drain_rx());
            ASSERT_LT(clk::now(), end) << "stuck at inject #" << i << " of " << total;
        }
        memset(sb.data(), 0xee, inj);  // reusable as soon as fi_inject returns
    }
    while (received < total && clk::now() < end) {
        ASSERT_TRUE(drain_rx());
        std::this_thread::yield();
    }
    EXPECT_EQ(received, total) << eagain << " -FI_EAGAIN retries";
    EXPECT_EQ(bad, 0u);
    ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 100));
    RecordProperty("eagain_retries", static_cast<int>(eagain));
    rm.close();
}

TEST_F(DataRxe, SelectiveCompletionReportsOnlyRequested) {
    tx_bind = FI_SELECTIVE_COMPLETION;
    ASSERT_NO_FATAL_FAILURE(connect());
    size_t depth = c.info->tx_attr->size;
    ASSERT_GT(depth, 1u);
    const size_t total = depth * 3 + 5;  // well past the send queue depth
    std::vector<uint8_t> rb(64), sb(64);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND);
    std::vector<int> ctx(total);
    size_t want = 0, got_tx = 0, got_rx = 0, posted_rx = 0;
    for (size_t i = 0; i < total; ++i) {
        // keep receives posted ahead of the sends
        while (posted_rx < total && posted_rx < i + 32) {
            ssize_t r = fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, nullptr);
            if (r == -FI_EAGAIN) break;
            ASSERT_EQ(r, 0);
            ++posted_rx;
        }
        struct iovec iov = {sb.data(), 8};
        void* d = fi_mr_desc(sm);
        struct fi_msg m = rxetest::one_buffer_msg(iov, d, &ctx[i]);
        bool comp = i % 7 == 0;
        ssize_t r;
        auto end = clk::now() + std::chrono::seconds(20);
        while ((r = fi_sendmsg(c.ep, &m, comp ? FI_COMPLETION : 0)) == -FI_EAGAIN) {
            // the send queue drains only while the CQ is read
            struct fi_cq_data_entry e[8];
            ssize_t n = fi_cq_read(c.tx, e, 8);
            for (ssize_t k = 0; k < n; ++k) {
                size_t idx = static_cast<int*>(e[k].op_context) - ctx.data();
                EXPECT_EQ(idx % 7, 0u) << "completion for an unrequested send " << idx;
                ++got_tx;
            }
            n = fi_cq_read(s.rx, e, 8);
            if (n > 0) got_rx += n;
            ASSERT_LT(clk::now(), end) << "send queue never drained at " << i;
        }
        ASSERT_EQ(r, 0) << "send " << i;
        want += comp;
        struct fi_cq_data_entry e[8];
        ssize_t n = fi_cq_read(s.rx, e, 8);
        if (n > 0) got_rx += n;
        n = fi_cq_read(c.tx, e, 8);
        for (ssize_t k = 0; k < n; ++k) {
            size_t idx = static_cast<int*>(e[k].op_context) - ctx.data();
            EXPECT_EQ(idx % 7, 0u) << "completion for an unrequested send " << idx;
            ++got_tx;
        }
    }
    auto end = clk::now() + std::chrono::seconds(20);
    while ((got_tx < want || got_rx < total) && clk::now() < end) {
        while (posted_rx < total &&
               fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, nullptr) == 0)
            ++posted_rx;
        struct fi_cq_data_entry e[8];
        ssize_t n = fi_cq_read(c.tx, e, 8);
        for (ssize_t k = 0; k < n; ++k) {
            size_t idx = static_cast<int*>(e[k].op_context) - ctx.data();
            EXPECT_EQ(idx % 7, 0u) << "completion for an unrequested send " << idx;
            ++got_tx;
        }
        n = fi_cq_read(s.rx, e, 8);
        if (n > 0) got_rx += n;
    }
    EXPECT_EQ(got_tx, want);
    EXPECT_EQ(got_rx, total);
    ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 100));
    rm.close();
    sm.close();
}

TEST_F(DataRxe, BadKeyIsReportedAndEndsTheEndpointOnce) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP completes an RDMA WRITE locally: a bad key comes back later as the peer's TERMINATE, which ends the connection (FailedInjectIsTheTerminalEvent... checks that on iWARP)";
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> lb(4096), target(4096);
    held<struct fid_mr> lm, tm;
    int wctx;
    ASSERT_NO_FATAL_FAILURE(write_with_bad_key(lb, target, 4096, &wctx, &lm, &tm));
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(c.tx, e), -FI_EAVAIL);
    EXPECT_EQ(fi_cq_read(c.tx, &e, 1), -FI_EAVAIL) << "stays available until readerr";
    struct fi_cq_err_entry err {};
    ASSERT_EQ(fi_cq_readerr(c.tx, &err, 0), 1);
    EXPECT_EQ(err.op_context, &wctx);
    EXPECT_EQ(err.err, FI_EACCES);
    EXPECT_EQ(err.prov_errno, IBV_WC_REM_ACCESS_ERR);
    char sbuf[256];
    const char* msg = fi_cq_strerror(c.tx, err.prov_errno, err.err_data, sbuf, sizeof sbuf);
    ASSERT_NE(msg, nullptr);
    EXPECT_NE(std::string(msg).find("IBV_WC_REM_ACCESS_ERR"), std::string::npos) << msg;
    EXPECT_EQ(fi_cq_readerr(c.tx, &err, 0), -FI_EAGAIN);

    // the client endpoint delivers exactly one terminal event
    const int terminal = rxetest::terminal_events(c.eq, 3, [&](const struct fi_eq_err_entry& ee) {
        EXPECT_EQ(ee.fid, &c.ep->fid);
        EXPECT_EQ(ee.err, FI_EACCES);
        EXPECT_EQ(ee.prov_errno, FI_EVD_PERR(FI_EVD_PERR_WC, IBV_WC_REM_ACCESS_ERR));
        const char* why = fi_eq_strerror(c.eq, ee.prov_errno, ee.err_data, nullptr, 0);
        EXPECT_NE(std::string(why ? why : "").find("IBV_WC_REM_ACCESS_ERR"), std::string::npos)
            << (why ? why : "(null)");
    });
    EXPECT_EQ(terminal, 1);
    // nothing more can be done with it; posts fail or flush, never crash
    int w2;
    ssize_t r = fi_write(c.ep, lb.data(), 8, fi_mr_desc(lm), 0,
                         reinterpret_cast<uintptr_t>(target.data()), fi_mr_key(tm), &w2);
    if (r == 0) {
        ASSERT_EQ(cq_one(c.tx, e), -FI_EAVAIL);
        ASSERT_EQ(fi_cq_readerr(c.tx, &err, 0), 1);
        EXPECT_EQ(err.err, FI_ECANCELED);
        EXPECT_EQ(err.op_context, &w2);
    }
    lm.close();
    tm.close();
}

// A request that has no context (fi_inject_write here) and fails must never
// come out of the CQ as an error entry whose op_context nobody gave: ofi_rxm
// and MPI dereference it. Its failure ends the endpoint (one terminal error on
// the EQ), and the next request that has a context is flushed with it.
TEST_F(DataRxe, FailedInjectIsTheTerminalEventNeverAContextlessCqError) {
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> lb(4096), target(4096);
    held<struct fid_mr> lm = reg(c, lb.data(), lb.size(), FI_SEND | FI_WRITE);
    held<struct fid_mr> tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE);
    const uint64_t addr = reinterpret_cast<uintptr_t>(target.data());
    ASSERT_EQ(fi_inject_write(c.ep, lb.data(), 8, 0, addr, fi_mr_key(tm) ^ 0x5a5a00), 0);
    const bool iwarp = rxetest::on_iwarp();

    // reading the CQ finds the failure; it never shows up there
    int terminal = 0;
    struct fi_eq_err_entry ee {};
    auto end = clk::now() + std::chrono::seconds(10);
    while (clk::now() < end && terminal == 0) {
        struct fi_cq_data_entry e {};
        ssize_t r = fi_cq_read(c.tx, &e, 1);
        ASSERT_EQ(r, -FI_EAGAIN) << "the failed inject surfaced on the CQ";
        uint32_t ev;
        uint8_t buf[512];
        r = fi_eq_read(c.eq, &ev, buf, sizeof buf, 0);
        if (r == -FI_EAVAIL) {
            ASSERT_EQ(fi_eq_readerr(c.eq, &ee, 0), static_cast<ssize_t>(sizeof ee));
            ++terminal;
        } else if (r > 0 && ev == FI_SHUTDOWN && iwarp) {
            // iWARP: the write completed locally and the peer's TERMINATE
            // ended the connection
            ee.fid = reinterpret_cast<const struct fi_eq_entry*>(buf)->fid;
            ++terminal;
        } else {
            ASSERT_EQ(r, -FI_EAGAIN) << "unexpected event " << ev;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }
    ASSERT_EQ(terminal, 1) << "no terminal event within 10 s";
    EXPECT_EQ(ee.fid, &c.ep->fid);
    if (!iwarp) {
        EXPECT_EQ(ee.err, FI_EACCES);
        EXPECT_EQ(ee.prov_errno, FI_EVD_PERR(FI_EVD_PERR_WC, IBV_WC_REM_ACCESS_ERR));
    }
    struct fi_cq_err_entry ce {};
    EXPECT_EQ(fi_cq_readerr(c.tx, &ce, 0), -FI_EAGAIN);

    // the next request with a context is refused or flushed with that context
    int ctx;
    ssize_t r = fi_send(c.ep, lb.data(), 8, fi_mr_desc(lm), 0, &ctx);
    // siw would never complete it: refused on iWARP (fi_evd(7), IWARP)
    if (iwarp) {
        EXPECT_EQ(r, -FI_EOPBADSTATE);
    }
    if (r == 0) {
        struct fi_cq_data_entry e {};
        ASSERT_EQ(cq_one(c.tx, e), -FI_EAVAIL);
        ASSERT_EQ(fi_cq_readerr(c.tx, &ce, 0), 1);
        EXPECT_EQ(ce.op_context, &ctx);
        EXPECT_EQ(ce.err, FI_ECANCELED);
    }
    // and nothing else: no second terminal event, no stray CQ entry
    ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 300));
    uint32_t ev;
    uint8_t buf[512];
    EXPECT_EQ(fi_eq_read(c.eq, &ev, buf, sizeof buf, 0), -FI_EAGAIN);
    lm.close();
    tm.close();
}

// Closing an endpoint drops what its EQ still holds for it: ofi_rxm frees the
// connection behind an endpoint right after fi_close, so a record read later
// would hand it a dangling fid.
TEST_F(DataRxe, CloseDropsTheEndpointsQueuedEvents) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP completes an RDMA WRITE locally: a bad key comes back later as the peer's TERMINATE, which ends the connection (FailedInjectIsTheTerminalEvent... checks that on iWARP)";
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> lb(64), target(64);
    held<struct fid_mr> lm, tm;
    int wctx;
    ASSERT_NO_FATAL_FAILURE(write_with_bad_key(lb, target, 8, &wctx, &lm, &tm));
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(c.tx, e), -FI_EAVAIL);  // the terminal error is now queued on c.eq
    struct fi_cq_err_entry ce {};
    ASSERT_EQ(fi_cq_readerr(c.tx, &ce, 0), 1);
    struct fi_eq_err_entry ee {};
    ASSERT_EQ(fi_eq_readerr(c.eq, &ee, FI_PEEK), static_cast<ssize_t>(sizeof ee));
    EXPECT_EQ(ee.fid, &c.ep->fid);
    lm.close();
    ASSERT_EQ(fi_close(&c.ep->fid), 0);
    c.ep = nullptr;
    uint32_t ev;
    uint8_t buf[512];
    EXPECT_EQ(fi_eq_read(c.eq, &ev, buf, sizeof buf, 0), -FI_EAGAIN);
    EXPECT_EQ(fi_eq_readerr(c.eq, &ee, 0), -FI_EAGAIN) << "a record of the closed endpoint";
    tm.close();
}

// Closing an endpoint completes the work still queued on it in its CQ, each
// with its context and FI_ECANCELED. Here the peer never posts a receive, so
// the sends wait on receiver-not-ready retries (evd asks for infinite ones)
// when the endpoint is closed. ofi_rxm closes the endpoint of a connection
// that died and then reads its CQ once: a send that vanished with the QP
// would leave the MPI request behind it waiting forever.
TEST_F(DataRxe, CloseCompletesQueuedWorkInTheCq) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP has no receiver-not-ready wait: a send that finds no posted receive completes and ends the connection";
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> sb(4096);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND);
    int sctx[4];
    for (int i = 0; i < 4; ++i)
        ASSERT_EQ(fi_send(c.ep, sb.data(), 64, fi_mr_desc(sm), 0, &sctx[i]), 0) << i;
    ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 300));  // stuck: nothing to receive them
    ASSERT_EQ(fi_close(&c.ep->fid), 0);
    c.ep = nullptr;
    for (int i = 0; i < 4; ++i) {
        struct fi_cq_data_entry e {};
        ASSERT_EQ(fi_cq_read(c.tx, &e, 1), -FI_EAVAIL) << "send " << i << " vanished with the QP";
        struct fi_cq_err_entry ce {};
        ASSERT_EQ(fi_cq_readerr(c.tx, &ce, 0), 1);
        EXPECT_EQ(ce.op_context, &sctx[i]);
        EXPECT_EQ(ce.err, FI_ECANCELED);
    }
    ASSERT_NO_FATAL_FAILURE(cq_none(c.tx, 200));
    sm.close();
}

// The same for receives: rxe flushes a QP's receive queue apart from its
// send queue, so the closing flush must wait for the receives' own marker
// (qp_flush.cpp). Every receive is in the CQ, in order, with FI_ECANCELED,
// when fi_close returns: read at once, without waiting. (Found by evd_soak:
// about one connection in thousands lost its last posted receive.)
TEST_F(DataRxe, CloseCompletesQueuedReceivesInTheCq) {
    for (int round = 0; round < 5; ++round) {
        SCOPED_TRACE(round);
        ASSERT_NO_FATAL_FAILURE(connect());
        std::vector<uint8_t> rb(8 * 256);
        held<struct fid_mr> rm = reg(c, rb.data(), rb.size(), FI_RECV);
        int rctx[8];
        for (int i = 0; i < 8; ++i)
            ASSERT_EQ(fi_recv(c.ep, rb.data() + i * 256, 256, fi_mr_desc(rm), 0, &rctx[i]), 0) << i;
        ASSERT_EQ(fi_close(&c.ep->fid), 0);
        c.ep = nullptr;
        for (int i = 0; i < 8; ++i) {
            struct fi_cq_data_entry e {};
            ASSERT_EQ(fi_cq_read(c.rx, &e, 1), -FI_EAVAIL) << "receive " << i << " vanished with the QP";
            struct fi_cq_err_entry ce {};
            ASSERT_EQ(fi_cq_readerr(c.rx, &ce, 0), 1);
            EXPECT_EQ(ce.op_context, &rctx[i]);
            EXPECT_EQ(ce.err, FI_ECANCELED);
        }
        ASSERT_NO_FATAL_FAILURE(cq_none(c.rx, 50));
        rm.close();
        TearDown();  // the next round connects a fresh pair
    }
}

// Completions keep their order around an error: the ones before it are read,
// then the error, then the requests flushed behind it, each with its context.
TEST_F(DataRxe, ErrorKeepsCompletionOrder) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP completes an RDMA WRITE locally: a bad key comes back later as the peer's TERMINATE, which ends the connection (FailedInjectIsTheTerminalEvent... checks that on iWARP)";
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> lb(4096), target(4096);
    held<struct fid_mr> lm = reg(c, lb.data(), lb.size(), FI_WRITE);
    held<struct fid_mr> tm = reg(s, target.data(), target.size(), FI_REMOTE_WRITE);
    uint64_t addr = reinterpret_cast<uintptr_t>(target.data());
    int ctx[6];
    for (int i = 0; i < 6; ++i) {
        uint64_t key = fi_mr_key(tm) ^ (i == 3 ? 0x77700 : 0);  // the 4th has a bad key
        ASSERT_EQ(fi_write(c.ep, lb.data(), 512, fi_mr_desc(lm), 0, addr, key, &ctx[i]), 0) << i;
    }
    struct fi_cq_data_entry e[16];
    size_t good = 0;
    auto end = clk::now() + std::chrono::seconds(20);
    ssize_t r = 0;
    while (good < 3 && clk::now() < end) {
        r = fi_cq_read(c.tx, e, 16);
        if (r > 0) {
            for (ssize_t k = 0; k < r; ++k) EXPECT_EQ(e[k].op_context, &ctx[good + k]);
            good += static_cast<size_t>(r);
        } else if (r != -FI_EAGAIN) {
            break;
        }
    }
    ASSERT_EQ(good, 3u) << "last read " << r;
    ASSERT_EQ(cq_one(c.tx, e[0]), -FI_EAVAIL);
    struct fi_cq_err_entry err {};
    ASSERT_EQ(fi_cq_readerr(c.tx, &err, 0), 1);
    EXPECT_EQ(err.op_context, &ctx[3]);
    EXPECT_EQ(err.err, FI_EACCES);
    for (int i = 4; i < 6; ++i) {
        ASSERT_EQ(cq_one(c.tx, e[0]), -FI_EAVAIL) << i;
        ASSERT_EQ(fi_cq_readerr(c.tx, &err, 0), 1);
        EXPECT_EQ(err.op_context, &ctx[i]);
        EXPECT_EQ(err.err, FI_ECANCELED);
        EXPECT_EQ(err.prov_errno, IBV_WC_WR_FLUSH_ERR);
    }
    EXPECT_EQ(fi_cq_read(c.tx, e, 16), -FI_EAGAIN);
    lm.close();
    tm.close();
}

TEST_F(DataRxe, ReceiveTooSmallIsACompletionError) {
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> rb(64), sb(4096);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND);
    int rctx;
    ASSERT_EQ(fi_recv(s.ep, rb.data(), 16, fi_mr_desc(rm), 0, &rctx), 0);
    ASSERT_EQ(fi_send(c.ep, sb.data(), 4096, fi_mr_desc(sm), 0, nullptr), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(s.rx, e), -FI_EAVAIL);
    struct fi_cq_err_entry err {};
    ASSERT_EQ(fi_cq_readerr(s.rx, &err, 0), 1);
    EXPECT_EQ(err.op_context, &rctx);
    // devices differ: IB reports a local length error, rxe a local QP
    // operation error; each is reported as its table row says
    if (err.prov_errno == IBV_WC_LOC_LEN_ERR) {
        EXPECT_EQ(err.err, FI_ETRUNC);
    } else {
        EXPECT_EQ(err.prov_errno, IBV_WC_LOC_QP_OP_ERR);
        EXPECT_EQ(err.err, FI_EIO);
    }
    // the sender learns it as a remote error: on IB and RoCE the NAK comes
    // back before its send completes. siw completes a send once it is on
    // the wire, so there the receiver's TERMINATE may come after a success
    // (seen once in a siw run of this suite, with the host loaded).
    const ssize_t sent = cq_one(c.tx, e);
    if (!(sent == 1 && rxetest::on_iwarp())) {
        ASSERT_EQ(sent, -FI_EAVAIL);
        ASSERT_EQ(fi_cq_readerr(c.tx, &err, 0), 1);
        EXPECT_NE(err.err, 0);
    }
    rm.close();
    sm.close();
}

TEST_F(DataRxe, SharedReceiveContext) {
    server_srx = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    std::vector<uint8_t> rb(4 * 1024), sb(1024);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND);
    int ctx[4];
    for (int i = 0; i < 4; ++i)
        ASSERT_EQ(fi_recv(s.srx, rb.data() + i * 1024, 1024, fi_mr_desc(rm), 0, &ctx[i]), 0);
    EXPECT_EQ(fi_recv(s.ep, rb.data(), 16, fi_mr_desc(rm), 0, nullptr), -FI_EOPBADSTATE);
    for (int i = 0; i < 4; ++i) {
        fill(sb, 1000, 20 + i);
        ASSERT_EQ(fi_send(c.ep, sb.data(), 1000, fi_mr_desc(sm), 0, nullptr), 0);
        struct fi_cq_data_entry e {};
        ASSERT_EQ(cq_one(s.rx, e), 1);
        EXPECT_EQ(e.op_context, &ctx[i]);
        EXPECT_EQ(e.len, 1000u);
        std::vector<uint8_t> got(rb.begin() + i * 1024, rb.begin() + i * 1024 + 1000);
        EXPECT_EQ(check(got, 1000, 20 + i), 1000u);
        ASSERT_EQ(cq_one(c.tx, e), 1);
    }
    // closing the SRX while an endpoint uses it is refused
    EXPECT_EQ(fi_close(&s.srx->fid), -FI_EBUSY);
    rm.close();
    sm.close();
}

// fabtests' fi_shared_ctx passes fi_getinfo's rx_attr to fi_srx_context.
// That describes a QP receive queue (rxe: 32 SGEs) while an SRQ may offer
// less (rxe: 27): the request is trimmed and the grant written back, and the
// granted iov_limit is exactly what a post may use.
TEST_F(DataRxe, SharedReceiveContextFromInfoRxAttr) {
    server_srx = true;
    srx_attr_from_info = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    const size_t n = srx_granted.iov_limit;
    ASSERT_GE(n, 1u);
    EXPECT_LE(n, s.info->rx_attr->iov_limit);
    EXPECT_GE(srx_granted.size, 1u);
    const size_t piece = 8;
    std::vector<uint8_t> rb((n + 1) * piece), sb(n * piece);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND);
    std::vector<struct iovec> iov(n + 1);
    std::vector<void*> desc(n + 1, fi_mr_desc(rm));
    for (size_t i = 0; i <= n; ++i) iov[i] = {rb.data() + i * piece, piece};
    int ctx;
    EXPECT_EQ(fi_recvv(s.srx, iov.data(), desc.data(), n + 1, 0, nullptr), -FI_EINVAL);
    ASSERT_EQ(fi_recvv(s.srx, iov.data(), desc.data(), n, 0, &ctx), 0);
    fill(sb, sb.size(), 31);
    ASSERT_EQ(fi_send(c.ep, sb.data(), sb.size(), fi_mr_desc(sm), 0, nullptr), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(s.rx, e), 1);
    EXPECT_EQ(e.op_context, &ctx);
    EXPECT_EQ(e.len, sb.size());
    EXPECT_EQ(check(rb, sb.size(), 31), sb.size());  // scattered over all n pieces in order
    ASSERT_EQ(cq_one(c.tx, e), 1);
    rm.close();
    sm.close();
}

// fi_cq_sread on the server's receive CQ (whatever its wait object): the
// timeout is honoured, fi_cq_signal wakes a blocked reader with -FI_EAGAIN,
// a completion wakes it with the entry.
void DataRxe::sread_times_out_signals_and_completes() {
    struct fi_cq_data_entry e {};
    // timeout honoured
    auto t0 = clk::now();
    EXPECT_EQ(fi_cq_sread(s.rx, &e, 1, nullptr, 300), -FI_EAGAIN);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0).count();
    EXPECT_GE(ms, 290);
    EXPECT_LT(ms, 5000);
    // fi_cq_signal wakes a blocked reader
    std::atomic<ssize_t> res{1};
    std::thread th([&] {
        struct fi_cq_data_entry x {};
        res = fi_cq_sread(s.rx, &x, 1, nullptr, -1);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(res.load(), 1) << "sread returned before the signal";
    EXPECT_EQ(fi_cq_signal(s.rx), 0);
    th.join();
    EXPECT_EQ(res.load(), -FI_EAGAIN);
    // a completion wakes sread
    std::vector<uint8_t> rb(64), sb(64);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND);
    int rctx;
    ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, &rctx), 0);
    std::thread sender([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        fi_send(c.ep, sb.data(), 8, fi_mr_desc(sm), 0, nullptr);
    });
    ASSERT_EQ(fi_cq_sread(s.rx, &e, 1, nullptr, 20000), 1);
    sender.join();
    EXPECT_EQ(e.op_context, &rctx);
    ASSERT_EQ(cq_one(c.tx, e), 1);
    rm.close();
    sm.close();
}

TEST_F(DataRxe, SreadWaitsSignalWakesAndWaitFdBecomesReadable) {
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_NO_FATAL_FAILURE(sread_times_out_signals_and_completes());
    struct fi_cq_data_entry e {};
    std::vector<uint8_t> rb(64), sb(64);
    held<struct fid_mr> rm = reg(s, rb.data(), rb.size(), FI_RECV);
    held<struct fid_mr> sm = reg(c, sb.data(), sb.size(), FI_SEND);
    int rctx;
    // wait fd: trywait arms it, a completion makes it readable
    int fd = -1;
    ASSERT_EQ(fi_control(&s.rx->fid, FI_GETWAIT, &fd), 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fi_recv(s.ep, rb.data(), rb.size(), fi_mr_desc(rm), 0, &rctx), 0);
    struct fid* fids[1] = {&s.rx->fid};
    int tw = fi_trywait(fab, fids, 1);
    if (tw == -FI_ENOSYS) {
        GTEST_SKIP() << "fi_trywait does not know CQs yet";
    }
    ASSERT_EQ(tw, 0);
    struct pollfd p = {fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 100), 0) << "readable with nothing to read";
    ASSERT_EQ(fi_send(c.ep, sb.data(), 8, fi_mr_desc(sm), 0, nullptr), 0);
    EXPECT_EQ(poll(&p, 1, 20000), 1);
    ASSERT_EQ(cq_one(s.rx, e), 1);
    ASSERT_EQ(cq_one(c.tx, e), 1);
    rm.close();
    sm.close();
}

// FI_WAIT_YIELD CQs: the same sread contract, by polling and sched_yield;
// they have no wait fd.
TEST_F(DataRxe, YieldCqSreadWaitsSignalWakesAndHasNoWaitFd) {
    cq_wait = FI_WAIT_YIELD;
    ASSERT_NO_FATAL_FAILURE(connect());
    enum fi_wait_obj w = FI_WAIT_NONE;
    ASSERT_EQ(fi_control(&s.rx->fid, FI_GETWAITOBJ, &w), 0);
    EXPECT_EQ(w, FI_WAIT_YIELD);
    int fd = -1;
    EXPECT_EQ(fi_control(&s.rx->fid, FI_GETWAIT, &fd), -FI_ENODATA);
    ASSERT_NO_FATAL_FAILURE(sread_times_out_signals_and_completes());
    // a signal given while nobody waits ends the next wait at once
    EXPECT_EQ(fi_cq_signal(s.rx), 0);
    struct fi_cq_data_entry e {};
    auto t0 = clk::now();
    EXPECT_EQ(fi_cq_sread(s.rx, &e, 1, nullptr, 5000), -FI_EAGAIN);
    EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t0).count(), 1000);
}

// CQ / MR objects on a real domain, no connection.
class DataObjects : public DataRxe {
protected:
    void open_domain() {
        struct fi_info* h = base_hints();
        ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), "0", FI_SOURCE, h, &srv_info), 0);
        fi_freeinfo(h);
        ASSERT_EQ(fi_fabric(srv_info->fabric_attr, &fab, nullptr), 0);
        ASSERT_EQ(fi_domain(fab, srv_info, &s.dom, nullptr), 0);
    }
};

TEST_F(DataObjects, CqFormatsAndWaitObjects) {
    ASSERT_NO_FATAL_FAILURE(open_domain());
    for (auto f : {FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA}) {
        for (auto w : {FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_YIELD}) {
            struct fi_cq_attr a {};
            a.format = f;
            a.wait_obj = w;
            held<struct fid_cq> cq;
            ASSERT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), 0) << f << " " << w;
            EXPECT_GT(a.size, 0u);
            char buf[64];
            EXPECT_EQ(fi_cq_read(cq, buf, 1), -FI_EAGAIN);
            struct fi_cq_err_entry err {};
            EXPECT_EQ(fi_cq_readerr(cq, &err, 0), -FI_EAGAIN);
            int fd = -1;
            if (w == FI_WAIT_NONE) {
                EXPECT_EQ(fi_cq_sread(cq, buf, 1, nullptr, 10), -FI_ENOSYS);
                EXPECT_NE(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
            } else if (w == FI_WAIT_YIELD) {
                EXPECT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), -FI_ENODATA);
                EXPECT_EQ(fi_cq_sread(cq, buf, 1, nullptr, 10), -FI_EAGAIN);
            } else {
                EXPECT_EQ(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
                EXPECT_GE(fd, 0);
                EXPECT_EQ(fi_cq_sread(cq, buf, 1, nullptr, 10), -FI_EAGAIN);
            }
            EXPECT_EQ(cq.close(), 0);
        }
    }
    struct fi_cq_attr a {};
    a.format = FI_CQ_FORMAT_TAGGED;
    held<struct fid_cq> cq;
    EXPECT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), -FI_ENOSYS);
    a.format = FI_CQ_FORMAT_CONTEXT;
    a.wait_obj = FI_WAIT_MUTEX_COND;
    EXPECT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), -FI_ENOSYS);
    // FI_WAIT_SET: only an evd FD wait set can hold a CQ
    a.wait_obj = FI_WAIT_SET;
    a.wait_set = nullptr;
    EXPECT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), -FI_EINVAL);
    struct fi_wait_attr wa {};
    wa.wait_obj = FI_WAIT_MUTEX_COND;
    held<struct fid_wait> ws;
    ASSERT_EQ(fi_wait_open(fab, &wa, ws.out()), 0);
    a.wait_set = ws;
    EXPECT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), -FI_ENOSYS);
    EXPECT_EQ(ws.close(), 0);
    wa.wait_obj = FI_WAIT_FD;
    ASSERT_EQ(fi_wait_open(fab, &wa, ws.out()), 0);
    a.wait_set = ws;
    ASSERT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), 0);
    EXPECT_EQ(ws.close(), -FI_EBUSY);  // the CQ is a member
    EXPECT_EQ(fi_wait(ws, 50), -FI_ETIMEDOUT);  // an empty CQ
    EXPECT_EQ(cq.close(), 0);
    EXPECT_EQ(ws.close(), 0);
    a.wait_set = nullptr;
    // the domain cannot close under an open CQ
    a.wait_obj = FI_WAIT_NONE;
    ASSERT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), 0);
    EXPECT_EQ(fi_close(&s.dom->fid), -FI_EBUSY);
    EXPECT_EQ(cq.close(), 0);
}

TEST_F(DataObjects, CqStrerrorDecodesEveryStatus) {
    ASSERT_NO_FATAL_FAILURE(open_domain());
    struct fi_cq_attr a {};
    held<struct fid_cq> cq;
    ASSERT_EQ(fi_cq_open(s.dom, &a, cq.out(), nullptr), 0);
    char buf[256];
    const char* m = fi_cq_strerror(cq, IBV_WC_RETRY_EXC_ERR, nullptr, buf, sizeof buf);
    EXPECT_EQ(m, buf);
    EXPECT_NE(std::string(m).find("IBV_WC_RETRY_EXC_ERR"), std::string::npos) << m;
    EXPECT_NE(std::string(m).find(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)), std::string::npos) << m;
    m = fi_cq_strerror(cq, 9999, nullptr, nullptr, 0);
    ASSERT_NE(m, nullptr);
    EXPECT_NE(std::string(m).find("9999"), std::string::npos) << m;
    EXPECT_EQ(cq.close(), 0);
}

TEST_F(DataObjects, MemoryRegistration) {
    ASSERT_NO_FATAL_FAILURE(open_domain());
    std::vector<uint8_t> b(1 << 20);
    held<struct fid_mr> mr;
    ASSERT_EQ(fi_mr_reg(s.dom, b.data(), b.size(), FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE,
                        0, 0, 0, mr.out(), nullptr),
              0);
    EXPECT_NE(fi_mr_desc(mr), nullptr);
    held<struct fid_mr> mr2;
    struct iovec iov = {b.data() + 4096, 4096};
    ASSERT_EQ(fi_mr_regv(s.dom, &iov, 1, FI_REMOTE_READ, 0, 0, 0, mr2.out(), nullptr), 0);
    // inside the first registration: the domain's registration cache hands
    // out the same registration (fi_evd(7), Registration cache)
    EXPECT_EQ(fi_mr_key(mr), fi_mr_key(mr2));
    EXPECT_NE(mr.get(), mr2.get()) << "each fi_mr_reg gets its own fid_mr";
    struct iovec two[2] = {{b.data(), 10}, {b.data() + 100, 10}};
    held<struct fid_mr> bad;
    EXPECT_EQ(fi_mr_regv(s.dom, two, 2, FI_SEND, 0, 0, 0, bad.out(), nullptr), -FI_EINVAL);
    struct fi_mr_attr attr {};
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = FI_WRITE | FI_READ;
    attr.context = &attr;
    held<struct fid_mr> mr3;
    ASSERT_EQ(fi_mr_regattr(s.dom, &attr, 0, mr3.out()), 0);
    EXPECT_EQ(mr3->fid.context, &attr);
    attr.iface = FI_HMEM_CUDA;
    EXPECT_NE(fi_mr_regattr(s.dom, &attr, 0, bad.out()), 0);
    EXPECT_EQ(fi_mr_reg(s.dom, b.data(), 16, 1ull << 60 /* not an access bit */, 0, 0, 0, bad.out(),
                        nullptr),
              -FI_EINVAL);
    // flag bits 60-63 are hints between libfabric's layers (ofi_rxm passes
    // bit 60 for its buffer pools): accepted; other unknown flags are not
    held<struct fid_mr> mr4;
    ASSERT_EQ(fi_mr_reg(s.dom, b.data(), 4096, FI_SEND | FI_RECV, 0, 0, 1ull << 60, mr4.out(), nullptr), 0);
    EXPECT_EQ(mr4.close(), 0);
    EXPECT_EQ(fi_mr_reg(s.dom, b.data(), 16, FI_SEND, 0, 0, 1ull << 40, bad.out(), nullptr), -FI_EBADFLAGS);
    EXPECT_EQ(fi_close(&s.dom->fid), -FI_EBUSY);
    EXPECT_EQ(mr.close(), 0);
    EXPECT_EQ(mr2.close(), 0);
    EXPECT_EQ(mr3.close(), 0);
}

}  // namespace
