// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evd EQ extensions (fi_ext_evd.h section 1, fi_evd(7) EVENT QUEUE).
#include <atomic>
#include <thread>

#include "eq_util.h"

using namespace evdtest;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

class EqExt : public EqTest {};

TEST_F(EqExt, OpsOpenByNameOnly) {
    struct fid_eq* q = open(8);
    struct fi_evd_eq_ops* ops = nullptr;
    ASSERT_EQ(fi_open_ops(&q->fid, FI_EVD_EQ_OPS_V1, 0, reinterpret_cast<void**>(&ops), nullptr),
              0);
    ASSERT_NE(ops, nullptr);
    EXPECT_EQ(ops->size, sizeof(struct fi_evd_eq_ops));
    EXPECT_NE(ops->wait_n, nullptr);
    EXPECT_NE(ops->depth, nullptr);
    EXPECT_NE(ops->wake, nullptr);
    EXPECT_NE(ops->write_err, nullptr);
    void* other = nullptr;
    EXPECT_EQ(fi_open_ops(&q->fid, "evd_eq_ops_v0", 0, &other, nullptr), -FI_ENOSYS);
}

TEST_F(EqExt, WaitNReturnsOnlyOnceTheThresholdIsQueued) {
    struct fid_eq* q = open(16, FI_WAIT_FD);
    auto* ops = ext(q);
    std::thread producer([&] {
        for (int i = 0; i < 4; i++) {
            std::this_thread::sleep_for(30ms);
            ASSERT_GT(write_entry(q, FI_NOTIFY, q, i), 0);
        }
    });
    uint32_t ev;
    struct fi_eq_entry e {};
    size_t nmore = 99;
    auto t0 = Clock::now();
    ASSERT_EQ(ops->wait_n(q, 4, 5000, &ev, &e, sizeof e, &nmore, 0), (ssize_t)sizeof e);
    EXPECT_GE(ms_since(t0), 4 * 30 - 5.0);  // not before the 4th event
    EXPECT_EQ(e.data, 0u);                   // dequeues the oldest
    EXPECT_EQ(nmore, 3u);                    // DAT: nmore >= threshold - 1
    producer.join();
}

TEST_F(EqExt, WaitNTimeoutDequeuesNothingAndReportsNmore) {
    struct fid_eq* q = open(16, FI_WAIT_MUTEX_COND);
    auto* ops = ext(q);
    ASSERT_GT(write_entry(q, FI_NOTIFY, q, 1), 0);
    ASSERT_GT(write_entry(q, FI_NOTIFY, q, 2), 0);
    uint32_t ev;
    struct fi_eq_entry e {};
    size_t nmore = 0;
    auto t0 = Clock::now();
    EXPECT_EQ(ops->wait_n(q, 3, 100, &ev, &e, sizeof e, &nmore, 0), -FI_EAGAIN);
    EXPECT_GE(ms_since(t0), 99.0);
    EXPECT_EQ(nmore, 2u);
    ASSERT_EQ(ops->wait_n(q, 2, 0, &ev, &e, sizeof e, &nmore, 0), (ssize_t)sizeof e);
    EXPECT_EQ(nmore, 1u);
}

TEST_F(EqExt, WaitNReturnsEarlyForAnError) {
    struct fid_eq* q = open(16, FI_WAIT_FD);
    auto* ops = ext(q);
    int src;
    ASSERT_GT(write_error(ops, q, &src, FI_EIO, 1), 0);
    uint32_t ev;
    struct fi_eq_entry e {};
    EXPECT_EQ(ops->wait_n(q, 5, 2000, &ev, &e, sizeof e, nullptr, 0), -FI_EAVAIL);
}

TEST_F(EqExt, WaitNRejectsBadThresholds) {
    struct fid_eq* q = open(16, FI_WAIT_FD);
    auto* ops = ext(q);
    uint32_t ev;
    struct fi_eq_entry e {};
    EXPECT_EQ(ops->wait_n(q, 0, 0, &ev, &e, sizeof e, nullptr, 0), -FI_EINVAL);
    struct fi_evd_eq_depth d {};
    ASSERT_EQ(ops->depth(q, &d), 0);
    EXPECT_EQ(ops->wait_n(q, d.capacity + d.reserve + 1, 0, &ev, &e, sizeof e, nullptr, 0),
              -FI_EINVAL);
    struct fid_eq* none = open(16, FI_WAIT_NONE);
    EXPECT_EQ(ops->wait_n(none, 1, 0, &ev, &e, sizeof e, nullptr, 0), -FI_EINVAL);
}

TEST_F(EqExt, DepthIsASnapshot) {
    struct fid_eq* q = open(32);
    auto* ops = ext(q);
    struct fi_evd_eq_depth d {};
    ASSERT_EQ(ops->depth(q, &d), 0);
    EXPECT_EQ(d.events, 0u);
    EXPECT_EQ(d.capacity, 32u);
    EXPECT_GT(d.reserve, 0u);
    EXPECT_EQ(d.next_len, 0u);
    unsigned char payload[40] = {};
    ASSERT_EQ(fi_eq_write(q, FI_MR_COMPLETE, payload, sizeof payload, 0), 40);
    ASSERT_GT(write_entry(q, FI_NOTIFY, q, 1), 0);
    ASSERT_GT(write_error(ops, q, payload, FI_EIO, 1), 0);  // another source: ready at once
    ASSERT_EQ(ops->depth(q, &d), 0);
    EXPECT_EQ(d.events, 3u);
    EXPECT_EQ(d.errors, 1u);
    EXPECT_EQ(d.next_len, 0u);  // an error is ready: fi_eq_read would say -FI_EAVAIL
    struct fi_eq_err_entry err {};
    ASSERT_GT(fi_eq_readerr(q, &err, 0), 0);
    ASSERT_EQ(fi_control(&q->fid, FI_EVD_EQ_GETDEPTH, &d), 0);
    EXPECT_EQ(d.events, 2u);
    EXPECT_EQ(d.errors, 0u);
    EXPECT_EQ(d.next_event, (uint32_t)FI_MR_COMPLETE);
    EXPECT_EQ(d.next_len, 40u);
    EXPECT_EQ(d.overrun, 0);
    EXPECT_EQ(d.lost, 0u);
}

TEST_F(EqExt, WakeReleasesBlockedWaitersOnly) {
    struct fid_eq* q = open(8, FI_WAIT_FD);
    auto* ops = ext(q);
    EXPECT_EQ(ops->wake(q), 0);  // nobody blocked: not sticky
    uint32_t ev;
    struct fi_eq_entry e {};
    EXPECT_EQ(fi_eq_sread(q, &ev, &e, sizeof e, 50, 0), -FI_EAGAIN);  // a full wait
    std::atomic<ssize_t> r_sread{1}, r_waitn{1};
    std::thread a([&] {
        uint32_t ev2;
        struct fi_eq_entry e2 {};
        r_sread = fi_eq_sread(q, &ev2, &e2, sizeof e2, -1, 0);
    });
    std::thread b([&] {
        uint32_t ev2;
        struct fi_eq_entry e2 {};
        r_waitn = ops->wait_n(q, 2, -1, &ev2, &e2, sizeof e2, nullptr, 0);
    });
    ASSERT_TRUE(evdtest::wait_until(
        [&] {
            struct fi_evd_eq_depth d {};
            return ops->depth(q, &d) == 0 && d.waiters >= 2;
        },
        std::chrono::milliseconds(10000)))
        << "the two waiters never blocked";
    EXPECT_EQ(ops->wake(q), 2);
    a.join();
    b.join();
    EXPECT_EQ(r_sread.load(), -FI_EAGAIN);  // fi_eq(3): signalled, no data
    EXPECT_EQ(r_waitn.load(), -FI_EINTR);   // DAT: interrupted
    EXPECT_EQ(fi_control(&q->fid, FI_EVD_EQ_WAKE, nullptr), 0);
}

TEST_F(EqExt, WriteErrNeedsFiWriteAndAPositiveErr) {
    struct fid_eq* ro = open(8, FI_WAIT_NONE, 0);
    auto* ops = ext(ro);
    EXPECT_EQ(write_error(ops, ro, ro, FI_EIO, 1), -FI_EINVAL);
    struct fid_eq* q = open(8);
    EXPECT_EQ(write_error(ops, q, q, 0, 1), -FI_EINVAL);
    EXPECT_EQ(write_error(ops, q, q, -5, 1), -FI_EINVAL);
    std::vector<char> huge(4097);
    EXPECT_EQ(write_error(ops, q, q, FI_EIO, 1, huge.data(), huge.size()), -FI_EINVAL);
    EXPECT_EQ(write_error(ops, q, q, FI_EIO, 1, huge.data(), 4096), (ssize_t)sizeof(fi_eq_err_entry));
}

// The per-source guarantee (fi_evd(7)): events of one fid come out in the
// order they were produced, whatever else is interleaved.
TEST_F(EqExt, PerSourceOrderHoldsUnderInterleaving) {
    struct fid_eq* q = open(512);
    auto* ops = ext(q);
    int srcs[5];
    uint64_t seq[5] = {};
    std::vector<std::pair<int, uint64_t>> produced;
    uint32_t rng = 12345;
    auto rnd = [&] { return rng = rng * 1103515245u + 12345u, (rng >> 16); };
    for (int i = 0; i < 400; i++) {
        int s = rnd() % 5;
        uint64_t tag = (uint64_t(s) << 32) | seq[s]++;
        if (rnd() % 4 == 0)
            ASSERT_GT(write_error(ops, q, &srcs[s], FI_EIO, tag), 0);
        else
            ASSERT_GT(write_entry(q, FI_NOTIFY, &srcs[s], tag), 0);
    }
    uint64_t next[5] = {};
    int got = 0;
    while (got < 400) {
        uint32_t ev;
        struct fi_eq_entry e {};
        ssize_t r = fi_eq_read(q, &ev, &e, sizeof e, 0);
        uint64_t tag;
        if (r == -FI_EAVAIL) {
            struct fi_eq_err_entry err {};
            ASSERT_GT(fi_eq_readerr(q, &err, 0), 0);
            tag = err.data;
        } else {
            ASSERT_EQ(r, (ssize_t)sizeof e);
            tag = e.data;
        }
        int s = int(tag >> 32);
        ASSERT_EQ(tag & 0xffffffffu, next[s]) << "source " << s << " out of order";
        next[s]++;
        got++;
    }
}

}  // namespace
