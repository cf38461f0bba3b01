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
        close_side(c);
        close_side(s);
        close_listener();
    }
    struct fi_info* pair_hints() { return rxetest::rma_hints(kDepth); }
    void open_side(rxetest::pair_side& x, struct fi_info* info) {
        ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
        int ms = kDeadlineMs;
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

}  // namespace resume_rxe_test
