// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Atomic operations on MSG endpoints (fi_atomic(3), fi_evd(7) "ATOMIC
// OPERATIONS") on Soft-RoCE: every offered operation and datatype against a
// word in the server's memory, the valid and query calls, completions and
// counters, what is refused at the call, several endpoints adding into one
// word at once with nothing lost or doubled, and an atomic the target refuses
// reported once. On siw (no atomics) the calls are refused.
// Runs inside the VM: test/vm/run-in-vm -- ./evd_integration --gtest_filter='Atomic*'
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext_evd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/common.h"
#include "rxe_util.h"

namespace {

using clk = std::chrono::steady_clock;

struct side : rxetest::pair_side {
    struct fid_cntr* rd = nullptr;  // FI_READ counter (client, when asked)
    struct fid_cntr* wr = nullptr;  // FI_WRITE counter
};

class AtomicRxe : public rxetest::PairFixture<AtomicRxe, side> {
    friend class rxetest::PairFixture<AtomicRxe, side>;

protected:
    bool counters = false;    // the client counts reads and writes
    bool ask_atomic = true;   // the pair's hints ask for FI_ATOMIC
    size_t inject_hint = 0;   // hints->tx_attr->inject_size
    std::vector<side> extra_clients;
    std::vector<struct fid_ep*> extra_servers;  // on s.dom, bound to s's EQ and CQs
    std::vector<struct fid_mr*> mrs;            // what reg() registered, closed first

    void TearDown() override {
        for (struct fid_mr* m : mrs) EXPECT_EQ(fi_close(&m->fid), 0);
        for (struct fid_ep* ep : extra_servers) EXPECT_EQ(fi_close(&ep->fid), 0);
        for (side& x : extra_clients) close_side(x);
        for (side* x : {&c, &s})
            close_side(*x, [](side& y) {
                if (y.rd) { EXPECT_EQ(fi_close(&y.rd->fid), 0); }
                if (y.wr) { EXPECT_EQ(fi_close(&y.wr->fid), 0); }
            });
        close_listener();
    }

    struct fi_info* pair_hints() {
        struct fi_info* h = rxetest::rma_hints(256);
        h->caps = FI_MSG | FI_RMA | (ask_atomic ? FI_ATOMIC : 0);
        h->tx_attr->inject_size = inject_hint;
        return h;
    }

    void open_side(side& x, struct fi_info* info) {
        ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
        ASSERT_NO_FATAL_FAILURE(open_cqs(x, FI_WAIT_NONE, 1024));
        ASSERT_NO_FATAL_FAILURE(open_endpoint(x));
        if (&x == &c && counters) {
            struct fi_cntr_attr ca {};
            ca.events = FI_CNTR_EVENTS_COMP;
            ca.wait_obj = FI_WAIT_UNSPEC;
            ASSERT_EQ(fi_cntr_open(x.dom, &ca, &x.rd, nullptr), 0);
            ASSERT_EQ(fi_cntr_open(x.dom, &ca, &x.wr, nullptr), 0);
            ASSERT_EQ(fi_ep_bind(x.ep, &x.rd->fid, FI_READ), 0);
            ASSERT_EQ(fi_ep_bind(x.ep, &x.wr->fid, FI_WRITE), 0);
        }
        ASSERT_EQ(fi_enable(x.ep), 0);
    }

    static ssize_t cq_one(struct fid_cq* cq, struct fi_cq_data_entry& e, int ms = 20000) {
        return rxetest::cq_wait_one(cq, e, ms);
    }

    struct fid_mr* reg(side& x, void* buf, size_t len, uint64_t access) {
        struct fid_mr* mr = nullptr;
        EXPECT_EQ(fi_mr_reg(x.dom, buf, len, access, 0, 0, 0, &mr, nullptr), 0);
        if (mr) mrs.push_back(mr);
        return mr;
    }

    // Expects one successful transmit completion with context ctx and flags.
    void expect_done(side& x, void* ctx, uint64_t flags) {
        struct fi_cq_data_entry e {};
        ssize_t r = cq_one(x.tx, e);
        if (r == -FI_EAVAIL) {
            struct fi_cq_err_entry err {};
            fi_cq_readerr(x.tx, &err, 0);
            FAIL() << "completion error " << err.err << " prov_errno " << err.prov_errno;
        }
        ASSERT_EQ(r, 1);
        EXPECT_EQ(e.op_context, ctx);
        EXPECT_EQ(e.flags, flags);
        EXPECT_EQ(e.len, 0u);
    }

    // One more connection to the listener: a client with its own domain,
    // and a server endpoint on the server's domain (so the server's
    // registrations are valid on it), bound to s's EQ and CQs.
    void connect_extra() {
        extra_clients.emplace_back();
        side& x = extra_clients.back();
        struct fi_info* h = pair_hints();
        struct fi_info* ci = rxetest::client_info_for(h, pep);
        fi_freeinfo(h);
        ASSERT_NE(ci, nullptr);
        ASSERT_NO_FATAL_FAILURE(open_side(x, ci));
        auto wait = [this, &x](struct fid_eq* q) {
            return rxetest::next_event(q, 20000, [this, &x](struct fid_eq* except) {
                rxetest::pump_eqs(fab, {peq, s.eq, c.eq, x.eq}, except);
            });
        };
        struct fid_ep* sep = nullptr;
        rxetest::handshake(wait, pep, peq, x.ep, x.eq, x.info->dest_addr, {},
                           [this](struct fi_info* info) {
                               struct fid_ep* ep = nullptr;
                               EXPECT_EQ(fi_endpoint(s.dom, info, &ep, nullptr), 0);
                               fi_freeinfo(info);
                               if (ep) {
                                   extra_servers.push_back(ep);
                                   EXPECT_EQ(fi_ep_bind(ep, &s.eq->fid, 0), 0);
                                   EXPECT_EQ(fi_ep_bind(ep, &s.tx->fid, FI_TRANSMIT), 0);
                                   EXPECT_EQ(fi_ep_bind(ep, &s.rx->fid, FI_RECV), 0);
                                   EXPECT_EQ(fi_enable(ep), 0);
                               }
                               return std::pair{ep, s.eq};
                           },
                           {}, &sep);
    }
};

// An fi_msg_atomic for FI_SUM on FI_UINT64 with one operand and one target.
struct fi_msg_atomic uint64_sum(const struct fi_ioc* op, const struct fi_rma_ioc* rma, void* ctx) {
    struct fi_msg_atomic m {};
    m.msg_iov = op;
    m.iov_count = 1;
    m.rma_iov = rma;
    m.rma_iov_count = 1;
    m.datatype = FI_UINT64;
    m.op = FI_SUM;
    m.context = ctx;
    return m;
}

#define NEED_ATOMICS()                                                                     \
    do {                                                                                   \
        if (rxetest::on_iwarp()) GTEST_SKIP() << "siw has no atomics (AtomicRxe.Iwarp*)"; \
    } while (0)

TEST_F(AtomicRxe, ValidAndQueryAnswerWhatTheDeviceDoes) {
    NEED_ATOMICS();
    ASSERT_NO_FATAL_FAILURE(connect());
    EXPECT_TRUE(c.info->caps & FI_ATOMIC);
    size_t count = 99;
    EXPECT_EQ(fi_atomicvalid(c.ep, FI_UINT64, FI_SUM, &count), 0);
    EXPECT_EQ(count, 1u);
    count = 99;
    EXPECT_EQ(fi_atomicvalid(c.ep, FI_DOUBLE, FI_ATOMIC_WRITE, &count), 0);
    EXPECT_EQ(count, 1u);
    count = 99;
    EXPECT_EQ(fi_fetch_atomicvalid(c.ep, FI_INT64, FI_ATOMIC_READ, &count), 0);
    EXPECT_EQ(count, 1u);
    count = 99;
    EXPECT_EQ(fi_compare_atomicvalid(c.ep, FI_UINT64, FI_CSWAP, &count), 0);
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(fi_atomicvalid(c.ep, FI_UINT64, FI_SUM, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_atomicvalid(c.ep, FI_UINT64, FI_MIN, &count), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_atomicvalid(c.ep, FI_DOUBLE, FI_SUM, &count), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_fetch_atomicvalid(c.ep, FI_UINT32, FI_SUM, &count), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_compare_atomicvalid(c.ep, FI_UINT64, FI_CSWAP_NE, &count), -FI_EOPNOTSUPP);
    struct fi_atomic_attr attr {};
    EXPECT_EQ(fi_query_atomic(c.dom, FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);
    EXPECT_EQ(attr.count, 1u);
    EXPECT_EQ(attr.size, 8u);
    EXPECT_EQ(fi_query_atomic(c.dom, FI_UINT64, FI_SUM, &attr, FI_TAGGED), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_query_atomic(c.dom, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC),
              -FI_EBADFLAGS);
}

// Every offered operation and datatype, with the value left in the target
// and the value fetched checked, and the completion each one gives.
TEST_F(AtomicRxe, EveryOperationChangesTheTargetAsDocumented) {
    NEED_ATOMICS();
    ASSERT_NO_FATAL_FAILURE(connect());
    alignas(64) uint64_t target[8] = {};
    alignas(64) uint64_t res[8] = {};
    struct fid_mr* tm = reg(s, target, sizeof target, FI_REMOTE_WRITE | FI_REMOTE_READ);
    struct fid_mr* rm = reg(c, res, sizeof res, FI_READ | FI_WRITE);
    ASSERT_TRUE(tm && rm);
    const uint64_t key = fi_mr_key(tm), raddr = reinterpret_cast<uintptr_t>(&target[0]);
    void* rd = fi_mr_desc(rm);
    int ctx;

    // fetch-and-add, signed: 10 + (-5)
    target[0] = 10;
    int64_t minus5 = -5;
    ASSERT_EQ(fi_fetch_atomic(c.ep, &minus5, 1, nullptr, &res[0], rd, 0, raddr, key, FI_INT64,
                              FI_SUM, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[0], 10u);
    EXPECT_EQ(target[0], 5u);
    // unsigned wrap-around
    target[0] = UINT64_MAX;
    uint64_t two = 2;
    ASSERT_EQ(fi_fetch_atomic(c.ep, &two, 1, nullptr, &res[1], rd, 0, raddr, key, FI_UINT64,
                              FI_SUM, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[1], UINT64_MAX);
    EXPECT_EQ(target[0], 1u);
    // base sum: nothing fetched, the operand may be reused at once
    uint64_t seven = 7;
    ASSERT_EQ(fi_atomic(c.ep, &seven, 1, nullptr, 0, raddr, key, FI_UINT64, FI_SUM, &ctx), 0);
    seven = 1000;  // read at the call
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(target[0], 8u);
    // inject: no completion; the fetch after it sees its effect (RC order)
    uint64_t hundred = 100;
    ASSERT_EQ(fi_inject_atomic(c.ep, &hundred, 1, 0, raddr, key, FI_INT64, FI_SUM), 0);
    uint64_t zero = 0;
    ASSERT_EQ(fi_fetch_atomic(c.ep, &zero, 1, nullptr, &res[2], rd, 0, raddr, key, FI_UINT64,
                              FI_SUM, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[2], 108u);
    // atomic write and read (8-byte RDMA write and read), integer and double
    const uint64_t pat = 0x1122334455667788ull;
    ASSERT_EQ(fi_atomic(c.ep, &pat, 1, nullptr, 0, raddr + 8, key, FI_UINT64, FI_ATOMIC_WRITE,
                        &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_RMA | FI_WRITE));
    EXPECT_EQ(target[1], pat);
    ASSERT_EQ(fi_fetch_atomic(c.ep, nullptr, 1, nullptr, &res[3], rd, 0, raddr + 8, key,
                              FI_INT64, FI_ATOMIC_READ, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_RMA | FI_READ));
    EXPECT_EQ(res[3], pat);
    const double d = -3.25;
    ASSERT_EQ(fi_atomic(c.ep, &d, 1, nullptr, 0, raddr + 16, key, FI_DOUBLE, FI_ATOMIC_WRITE,
                        &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_RMA | FI_WRITE));
    ASSERT_EQ(fi_fetch_atomic(c.ep, nullptr, 1, nullptr, &res[4], rd, 0, raddr + 16, key,
                              FI_DOUBLE, FI_ATOMIC_READ, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_RMA | FI_READ));
    double got;
    std::memcpy(&got, &res[4], sizeof got);
    EXPECT_EQ(got, d);
    // the msg forms, with FI_FENCE
    struct fi_ioc op = {&two, 1};
    struct fi_rma_ioc rma = {raddr, 1, key};
    struct fi_msg_atomic m = uint64_sum(&op, &rma, &ctx);
    struct fi_ioc result = {&res[5], 1};
    ASSERT_EQ(fi_fetch_atomicmsg(c.ep, &m, &result, &rd, 1, FI_FENCE | FI_COMPLETION), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[5], 108u);
    EXPECT_EQ(target[0], 110u);
    ASSERT_EQ(fi_atomicmsg(c.ep, &m, FI_COMPLETION), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(target[0], 112u);
    // the v forms; entries of count 0 are skipped
    uint64_t three = 3, cmp112 = 112, swap9 = 9;
    struct fi_ioc ov[2] = {{&seven, 0}, {&three, 1}};
    ASSERT_EQ(fi_atomicv(c.ep, ov, nullptr, 2, 0, raddr, key, FI_UINT64, FI_SUM, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(target[0], 115u);
    struct fi_ioc rv[2] = {{&res[6], 1}, {&res[7], 0}};
    void* rdv[2] = {rd, rd};
    ASSERT_EQ(fi_fetch_atomicv(c.ep, ov, nullptr, 2, rv, rdv, 2, 0, raddr, key, FI_UINT64, FI_SUM,
                               &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[6], 115u);
    EXPECT_EQ(target[0], 118u);
    cmp112 = 118;
    struct fi_ioc sv[1] = {{&swap9, 1}}, cv[1] = {{&cmp112, 1}};
    struct fi_ioc rv2[1] = {{&res[7], 1}};
    ASSERT_EQ(fi_compare_atomicv(c.ep, sv, nullptr, 1, cv, nullptr, 1, rv2, &rd, 1, 0, raddr, key,
                                 FI_UINT64, FI_CSWAP, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[7], 118u);
    EXPECT_EQ(target[0], 9u);
}

TEST_F(AtomicRxe, CompareSwapHitsAndMisses) {
    NEED_ATOMICS();
    ASSERT_NO_FATAL_FAILURE(connect());
    alignas(8) uint64_t target = 42;
    alignas(8) uint64_t res[2] = {};
    struct fid_mr* tm = reg(s, &target, sizeof target, FI_REMOTE_WRITE);
    struct fid_mr* rm = reg(c, res, sizeof res, FI_READ);
    ASSERT_TRUE(tm && rm);
    const uint64_t raddr = reinterpret_cast<uintptr_t>(&target);
    uint64_t cmp = 42, swap = 7;
    int ctx;
    ASSERT_EQ(fi_compare_atomic(c.ep, &swap, 1, nullptr, &cmp, nullptr, &res[0], fi_mr_desc(rm), 0,
                                raddr, fi_mr_key(tm), FI_UINT64, FI_CSWAP, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[0], 42u);
    EXPECT_EQ(target, 7u);
    swap = 9;  // compare still 42: a miss leaves the target alone
    ASSERT_EQ(fi_compare_atomic(c.ep, &swap, 1, nullptr, &cmp, nullptr, &res[1], fi_mr_desc(rm), 0,
                                raddr, fi_mr_key(tm), FI_INT64, FI_CSWAP, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[1], 7u);
    EXPECT_EQ(target, 7u);
}

// What evd refuses at the call, with the documented error, before anything
// reaches the wire; the connection stays usable.
TEST_F(AtomicRxe, RefusedAtTheCallNotOnTheWire) {
    NEED_ATOMICS();
    ASSERT_NO_FATAL_FAILURE(connect());
    alignas(16) uint64_t target[2] = {5, 0};
    alignas(8) uint64_t res[2] = {};
    struct fid_mr* tm = reg(s, target, sizeof target, FI_REMOTE_WRITE | FI_REMOTE_READ);
    struct fid_mr* rm = reg(c, res, sizeof res, FI_READ);
    ASSERT_TRUE(tm && rm);
    const uint64_t key = fi_mr_key(tm), raddr = reinterpret_cast<uintptr_t>(&target[0]);
    void* rd = fi_mr_desc(rm);
    uint64_t one[2] = {1, 1};
    EXPECT_EQ(fi_fetch_atomic(c.ep, one, 2, nullptr, res, rd, 0, raddr, key, FI_UINT64, FI_SUM,
                              nullptr), -FI_EMSGSIZE);
    EXPECT_EQ(fi_fetch_atomic(c.ep, one, 1, nullptr, res, rd, 0, raddr + 4, key, FI_UINT64,
                              FI_SUM, nullptr), -FI_EINVAL) << "misaligned";
    EXPECT_EQ(fi_fetch_atomic(c.ep, one, 1, nullptr, res, nullptr, 0, raddr, key, FI_UINT64,
                              FI_SUM, nullptr), -FI_EINVAL) << "no result descriptor";
    EXPECT_EQ(fi_fetch_atomic(c.ep, one, 1, nullptr, res, rd, 0, raddr, key, FI_UINT64, FI_MAX,
                              nullptr), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_atomic(c.ep, one, 1, nullptr, 0, raddr, key, FI_FLOAT, FI_SUM, nullptr),
              -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_atomic(c.ep, one, 1, nullptr, 0, raddr, key | (1ull << 40), FI_UINT64, FI_SUM,
                        nullptr), -FI_EINVAL) << "not a 32-bit key";
    struct fi_ioc op = {one, 1};
    struct fi_rma_ioc rma = {raddr, 1, key};
    struct fi_msg_atomic m = uint64_sum(&op, &rma, nullptr);
    struct fi_ioc result = {res, 1};
    EXPECT_EQ(fi_fetch_atomicmsg(c.ep, &m, &result, &rd, 1, FI_INJECT), -FI_EINVAL);
    EXPECT_EQ(fi_atomicmsg(c.ep, &m, FI_REMOTE_CQ_DATA), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_atomicmsg(c.ep, &m, FI_TAGGED), -FI_EOPNOTSUPP);
    EXPECT_EQ(fi_fetch_atomicmsg(c.ep, &m, &result, &rd, 1, FI_TAGGED), -FI_EOPNOTSUPP);
    // two elements in two entries, or a count that would wrap a sum
    struct fi_ioc two_entries[2] = {{&one[0], 1}, {&one[1], 1}};
    EXPECT_EQ(fi_atomicv(c.ep, two_entries, nullptr, 2, 0, raddr, key, FI_UINT64, FI_SUM, nullptr),
              -FI_EMSGSIZE);
    struct fi_ioc wrap[2] = {{&one[0], SIZE_MAX}, {&one[1], 2}};
    EXPECT_EQ(fi_atomicv(c.ep, wrap, nullptr, 2, 0, raddr, key, FI_UINT64, FI_SUM, nullptr),
              -FI_EMSGSIZE);
    struct fi_ioc none[1] = {{&one[0], 0}};
    EXPECT_EQ(fi_atomicv(c.ep, none, nullptr, 1, 0, raddr, key, FI_UINT64, FI_SUM, nullptr),
              -FI_EINVAL);
    rma.count = 2;
    EXPECT_EQ(fi_atomicmsg(c.ep, &m, 0), -FI_EMSGSIZE);
    EXPECT_EQ(fi_inject_atomic(c.ep, one, 1, 0, raddr, key, FI_UINT64, FI_CSWAP), -FI_EOPNOTSUPP);
    // nothing reached the wire, and the connection still works
    struct fi_cq_data_entry e {};
    EXPECT_EQ(fi_cq_read(c.tx, &e, 1), -FI_EAGAIN);
    int ctx;
    ASSERT_EQ(fi_fetch_atomic(c.ep, one, 1, nullptr, res, rd, 0, raddr, key, FI_UINT64, FI_SUM,
                              &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(res[0], 5u);
    EXPECT_EQ(target[0], 6u);
}

// Counters: fetching and compare atomics count as FI_READ, base atomics as
// FI_WRITE (fi_endpoint(3)).
TEST_F(AtomicRxe, CountersCountAtomicsByKind) {
    NEED_ATOMICS();
    counters = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    alignas(8) uint64_t target = 0;
    alignas(8) uint64_t res = 0;
    struct fid_mr* tm = reg(s, &target, sizeof target, FI_REMOTE_WRITE | FI_REMOTE_READ);
    struct fid_mr* rm = reg(c, &res, sizeof res, FI_READ);
    ASSERT_TRUE(tm && rm);
    const uint64_t key = fi_mr_key(tm), raddr = reinterpret_cast<uintptr_t>(&target);
    uint64_t one = 1, cmp = 3, swap = 30;
    for (int i = 0; i < 3; ++i)
        ASSERT_EQ(fi_atomic(c.ep, &one, 1, nullptr, 0, raddr, key, FI_UINT64, FI_SUM, nullptr), 0);
    ASSERT_EQ(fi_fetch_atomic(c.ep, &one, 1, nullptr, &res, fi_mr_desc(rm), 0, raddr, key,
                              FI_UINT64, FI_SUM, nullptr), 0);
    ASSERT_EQ(fi_compare_atomic(c.ep, &swap, 1, nullptr, &cmp, nullptr, &res, fi_mr_desc(rm), 0,
                                raddr, key, FI_UINT64, FI_CSWAP, nullptr), 0);
    EXPECT_EQ(fi_cntr_wait(c.wr, 3, 20000), 0);
    EXPECT_EQ(fi_cntr_wait(c.rd, 2, 20000), 0);
    EXPECT_EQ(fi_cntr_read(c.wr), 3u);
    EXPECT_EQ(fi_cntr_read(c.rd), 2u);
    EXPECT_EQ(fi_cntr_readerr(c.rd), 0u);
    EXPECT_EQ(res, 4u);  // the compare saw 3 + 1 = 4: no swap
    EXPECT_EQ(target, 4u);
}

// Four endpoints (four connections, four client domains) add 1 into one
// word of the server's memory at once, from two threads each. At the end
// the word is the number of adds, and the values fetched are exactly 0..N-1:
// no add was lost, none applied twice.
TEST_F(AtomicRxe, ConcurrentFetchAddFromFourEndpointsLosesNothing) {
    NEED_ATOMICS();
    ASSERT_NO_FATAL_FAILURE(connect());
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(connect_extra());
    alignas(8) uint64_t target = 0;
    struct fid_mr* tm = reg(s, &target, sizeof target, FI_REMOTE_WRITE);
    ASSERT_TRUE(tm);
    const uint64_t key = fi_mr_key(tm), raddr = reinterpret_cast<uintptr_t>(&target);
    std::vector<side*> clients = {&c};
    for (side& x : extra_clients) clients.push_back(&x);
    constexpr int kThreads = 2, kPerThread = 1500, kWindow = 16;
    const int total = static_cast<int>(clients.size()) * kThreads * kPerThread;
    std::vector<uint64_t> fetched(static_cast<size_t>(total), UINT64_MAX);
    std::vector<struct fid_mr*> rms;
    for (side* x : clients) rms.push_back(reg(*x, fetched.data(), fetched.size() * 8, FI_READ));
    std::atomic<int> failures{0};
    // both threads of a client post on its endpoint and read its CQ: the
    // window and the completions are counted per client
    std::vector<std::atomic<int>> posted(clients.size()), done(clients.size());
    std::vector<std::thread> th;
    for (size_t ci = 0; ci < clients.size(); ++ci)
        for (int t = 0; t < kThreads; ++t)
            th.emplace_back([&, ci, t] {
                side& x = *clients[ci];
                void* desc = fi_mr_desc(rms[ci]);
                const size_t base = (ci * kThreads + static_cast<size_t>(t)) * kPerThread;
                int mine = 0;
                const uint64_t one = 1;
                auto end = clk::now() + std::chrono::seconds(120);
                while (clk::now() < end) {
                    if (mine < kPerThread && posted[ci] - done[ci] < kWindow) {
                        uint64_t* slot = &fetched[base + static_cast<size_t>(mine)];
                        ssize_t r = fi_fetch_atomic(x.ep, &one, 1, nullptr, slot, desc, 0, raddr,
                                                    key, FI_UINT64, FI_SUM, slot);
                        if (r == 0) {
                            ++mine;
                            ++posted[ci];
                            continue;
                        }
                        if (r != -FI_EAGAIN) {
                            ++failures;
                            return;
                        }
                    }
                    if (done[ci] == kThreads * kPerThread) return;
                    struct fi_cq_data_entry e[8];
                    ssize_t n = fi_cq_read(x.tx, e, 8);
                    if (n > 0) {
                        for (ssize_t k = 0; k < n; ++k)
                            if (e[k].flags != FI_ATOMIC || !e[k].op_context) ++failures;
                        done[ci] += static_cast<int>(n);
                    } else if (n != -FI_EAGAIN) {
                        ++failures;
                        return;
                    }
                }
                ++failures;  // out of time
            });
    for (auto& t : th) t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(target, static_cast<uint64_t>(total));
    std::vector<uint64_t> sorted = fetched;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < total; ++i)
        if (sorted[static_cast<size_t>(i)] != static_cast<uint64_t>(i)) {
            ADD_FAILURE() << "fetched values are not 0.." << total - 1 << ": position " << i
                          << " holds " << sorted[static_cast<size_t>(i)];
            break;
        }
}

// An endpoint that cannot send 8 bytes inline: FI_ATOMIC_WRITE then needs
// the operand's descriptor, and cannot be injected; FI_SUM, whose operand
// travels in the work request, still can.
TEST_F(AtomicRxe, AtomicWriteBelowEightInlineBytesNeedsTheDescriptor) {
    NEED_ATOMICS();
    inject_hint = 4;
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_EQ(c.info->tx_attr->inject_size, 4u);
    alignas(8) uint64_t target = 0;
    alignas(8) uint64_t opnd = 0xabcdef0123456789ull;
    struct fid_mr* tm = reg(s, &target, sizeof target, FI_REMOTE_WRITE);
    struct fid_mr* om = reg(c, &opnd, sizeof opnd, FI_WRITE);
    ASSERT_TRUE(tm && om);
    const uint64_t key = fi_mr_key(tm), raddr = reinterpret_cast<uintptr_t>(&target);
    int ctx;
    EXPECT_EQ(fi_atomic(c.ep, &opnd, 1, nullptr, 0, raddr, key, FI_UINT64, FI_ATOMIC_WRITE, &ctx),
              -FI_EINVAL);
    EXPECT_EQ(fi_inject_atomic(c.ep, &opnd, 1, 0, raddr, key, FI_UINT64, FI_ATOMIC_WRITE),
              -FI_EINVAL);
    ASSERT_EQ(fi_atomic(c.ep, &opnd, 1, fi_mr_desc(om), 0, raddr, key, FI_UINT64, FI_ATOMIC_WRITE,
                        &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_RMA | FI_WRITE));
    EXPECT_EQ(target, opnd);
    uint64_t one = 1;
    ASSERT_EQ(fi_inject_atomic(c.ep, &one, 1, 0, raddr, key, FI_UINT64, FI_SUM), 0);
    ASSERT_EQ(fi_atomic(c.ep, &one, 1, nullptr, 0, raddr, key, FI_UINT64, FI_SUM, &ctx), 0);
    ASSERT_NO_FATAL_FAILURE(expect_done(c, &ctx, FI_ATOMIC));
    EXPECT_EQ(target, opnd + 2);
}

// Base FI_SUM from four endpoints of one domain at once: their fetched
// values all land in the domain's one sink page, and every add counts.
TEST_F(AtomicRxe, BaseSumsOfOneDomainShareItsSink) {
    NEED_ATOMICS();
    ASSERT_NO_FATAL_FAILURE(connect());
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(connect_extra());
    // the server's four endpoints (one domain) each add into a word of
    // their client's memory
    std::vector<struct fid_ep*> seps = {s.ep};
    seps.insert(seps.end(), extra_servers.begin(), extra_servers.end());
    std::vector<side*> clients = {&c};
    for (side& x : extra_clients) clients.push_back(&x);
    alignas(64) uint64_t words[4] = {};
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < clients.size(); ++i) {
        struct fid_mr* m = reg(*clients[i], &words[i], 8, FI_REMOTE_WRITE | FI_REMOTE_READ);
        ASSERT_TRUE(m);
        keys.push_back(fi_mr_key(m));
    }
    constexpr int kAdds = 2000;
    std::atomic<int> failures{0};
    std::vector<std::thread> th;
    for (size_t i = 0; i < seps.size(); ++i)
        th.emplace_back([&, i] {
            const uint64_t one = 1;
            for (int k = 0; k < kAdds && !failures;) {
                ssize_t r = fi_inject_atomic(seps[i], &one, 1, 0,
                                             reinterpret_cast<uintptr_t>(&words[i]), keys[i],
                                             FI_UINT64, FI_SUM);
                if (r == 0) {
                    ++k;
                } else if (r == -FI_EAGAIN) {
                    struct fi_cq_data_entry e;
                    (void)fi_cq_read(s.tx, &e, 1);  // reclaims the send queue (hidden)
                } else {
                    ++failures;
                }
            }
        });
    for (auto& t : th) t.join();
    EXPECT_EQ(failures.load(), 0);
    // a fetch behind the injects on each connection sees all of them
    alignas(8) uint64_t got[4] = {};
    struct fid_mr* gm = reg(s, got, sizeof got, FI_READ);
    ASSERT_TRUE(gm);
    const uint64_t zero = 0;
    for (size_t i = 0; i < seps.size(); ++i)
        ASSERT_EQ(fi_fetch_atomic(seps[i], &zero, 1, nullptr, &got[i], fi_mr_desc(gm), 0,
                                  reinterpret_cast<uintptr_t>(&words[i]), keys[i], FI_UINT64,
                                  FI_SUM, &got[i]), 0);
    for (size_t n = 0; n < seps.size(); ++n) {
        struct fi_cq_data_entry e {};
        ASSERT_EQ(cq_one(s.tx, e), 1);
        EXPECT_EQ(e.flags, FI_ATOMIC);
    }
    for (size_t i = 0; i < seps.size(); ++i) {
        EXPECT_EQ(got[i], static_cast<uint64_t>(kAdds)) << "endpoint " << i;
        EXPECT_EQ(words[i], static_cast<uint64_t>(kAdds)) << "endpoint " << i;
    }
}

// An atomic with a key the target never gave out: the target device
// refuses it; the completion error and the endpoint's one terminal event
// say so, the target word is untouched, and later atomics are flushed.
// (A registration without FI_REMOTE_WRITE would not do here: with the
// registration cache on, the default, cached entries carry every remote
// right; fi_evd(7) MEMORY REGISTRATION.)
TEST_F(AtomicRxe, RefusedByTheTargetEndsTheEndpointOnce) {
    NEED_ATOMICS();
    ASSERT_NO_FATAL_FAILURE(connect());
    alignas(8) uint64_t target = 0;
    alignas(8) uint64_t res = 0;
    struct fid_mr* tm = reg(s, &target, sizeof target, FI_REMOTE_WRITE);
    struct fid_mr* rm = reg(c, &res, sizeof res, FI_READ);
    ASSERT_TRUE(tm && rm);
    const uint64_t key = fi_mr_key(tm) ^ 0x5a5a00, raddr = reinterpret_cast<uintptr_t>(&target);
    uint64_t one = 1;
    int ctx;
    ASSERT_EQ(fi_fetch_atomic(c.ep, &one, 1, nullptr, &res, fi_mr_desc(rm), 0, raddr, key,
                              FI_UINT64, FI_SUM, &ctx), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(cq_one(c.tx, e), -FI_EAVAIL);
    struct fi_cq_err_entry err {};
    ASSERT_EQ(fi_cq_readerr(c.tx, &err, 0), 1);
    EXPECT_EQ(err.op_context, &ctx);
    EXPECT_EQ(err.err, FI_EACCES);
    EXPECT_EQ(err.prov_errno, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(target, 0u);
    const int terminal = rxetest::terminal_events(c.eq, 3, [&](const struct fi_eq_err_entry& ee) {
        EXPECT_EQ(ee.fid, &c.ep->fid);
        EXPECT_EQ(ee.err, FI_EACCES);
        EXPECT_EQ(ee.prov_errno, FI_EVD_PERR(FI_EVD_PERR_WC, IBV_WC_REM_ACCESS_ERR));
    });
    EXPECT_EQ(terminal, 1);
    int ctx2;
    ssize_t r = fi_fetch_atomic(c.ep, &one, 1, nullptr, &res, fi_mr_desc(rm), 0, raddr, key,
                                FI_UINT64, FI_SUM, &ctx2);
    // a QP in error takes the request and flushes it (an iWARP endpoint
    // would have no QP left: -FI_EOPBADSTATE)
    ASSERT_TRUE(r == 0 || r == -FI_EOPBADSTATE) << r;
    if (r == 0) {
        ASSERT_EQ(cq_one(c.tx, e), -FI_EAVAIL);
        ASSERT_EQ(fi_cq_readerr(c.tx, &err, 0), 1);
        EXPECT_EQ(err.err, FI_ECANCELED);
        EXPECT_EQ(err.op_context, &ctx2);
    }
    EXPECT_EQ(target, 0u);
}

// siw has no atomics: no FI_ATOMIC in fi_getinfo, hints asking for it find
// nothing, and every atomic call is refused without touching the wire.
TEST_F(AtomicRxe, IwarpOffersNoAtomics) {
    if (!rxetest::on_iwarp()) GTEST_SKIP() << "siw only";
    struct fi_info* h = rxetest::rma_hints(64);
    struct fi_info* info = nullptr;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
    for (struct fi_info* i = info; i; i = i->next) EXPECT_EQ(i->caps & FI_ATOMIC, 0u);
    fi_freeinfo(info);
    info = nullptr;
    h->caps |= FI_ATOMIC;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), -FI_ENODATA);
    fi_freeinfo(info);
    fi_freeinfo(h);
    ask_atomic = false;
    ASSERT_NO_FATAL_FAILURE(connect());
    size_t count = 0;
    EXPECT_EQ(fi_atomicvalid(c.ep, FI_UINT64, FI_SUM, &count), -FI_EOPNOTSUPP);
    struct fi_atomic_attr attr {};
    EXPECT_EQ(fi_query_atomic(c.dom, FI_UINT64, FI_SUM, &attr, 0), -FI_EOPNOTSUPP);
    uint64_t one = 1;
    EXPECT_EQ(fi_atomic(c.ep, &one, 1, nullptr, 0, 0, 0, FI_UINT64, FI_SUM, nullptr),
              -FI_EOPNOTSUPP);
}

}  // namespace
