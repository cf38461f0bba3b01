// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Concurrency (FI_THREAD_SAFE): any number of readers, writers and waiters.
// Suites are named EqThreads* so a TSan run selects them with
// --gtest_filter='EqThreads*'. Each test is bounded to about a second.
#include <poll.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "eq_util.h"

using namespace evdtest;
using namespace std::chrono_literals;

namespace {

class EqThreads : public EqTest {};

constexpr int kWriters = 3;
constexpr int kPerWriter = 3000;

// tag = writer << 32 | sequence
struct tally {
    std::mutex mu;
    std::vector<std::vector<int>> seen = std::vector<std::vector<int>>(kWriters,
                                                                       std::vector<int>(kPerWriter));
    void add(uint64_t tag) {
        std::lock_guard lk(mu);
        seen.at(tag >> 32).at(tag & 0xffffffffu)++;
    }
    void expect_each_once() {
        for (int w = 0; w < kWriters; w++)
            for (int i = 0; i < kPerWriter; i++)
                ASSERT_EQ(seen[w][i], 1) << "writer " << w << " event " << i;
    }
};

void produce(struct fid_eq* q, int w, std::vector<int>* srcs) {
    for (int i = 0; i < kPerWriter;) {
        struct fi_eq_entry e = entry(&(*srcs)[w], (uint64_t(w) << 32) | i);
        ssize_t r = fi_eq_write(q, FI_NOTIFY, &e, sizeof e, 0);
        if (r == -FI_EOVERRUN) {  // full: back-pressure, retry
            std::this_thread::yield();
            continue;
        }
        ASSERT_EQ(r, (ssize_t)sizeof e);
        i++;
    }
}

TEST_F(EqThreads, OneReaderSeesEveryWritersEventsInOrder) {
    struct fid_eq* q = open(256, FI_WAIT_FD);
    std::vector<int> srcs(kWriters);
    std::vector<std::thread> ws;
    for (int w = 0; w < kWriters; w++) ws.emplace_back(produce, q, w, &srcs);
    int next[kWriters] = {};
    for (int got = 0; got < kWriters * kPerWriter;) {
        uint32_t ev;
        struct fi_eq_entry e {};
        ssize_t r = fi_eq_sread(q, &ev, &e, sizeof e, 2000, 0);
        ASSERT_EQ(r, (ssize_t)sizeof e) << "after " << got;
        int w = int(e.data >> 32);
        ASSERT_EQ(int(e.data & 0xffffffffu), next[w]) << "writer " << w;
        next[w]++;
        got++;
    }
    for (auto& t : ws) t.join();
}

TEST_F(EqThreads, ManyReadersAndWritersLoseAndDuplicateNothing) {
    for (auto w : {FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD, FI_WAIT_NONE}) {
        struct fid_eq* q = open(64, w);
        std::vector<int> srcs(kWriters);
        tally t;
        std::atomic<int> got{0};
        std::vector<std::thread> th;
        for (int i = 0; i < kWriters; i++) th.emplace_back(produce, q, i, &srcs);
        for (int r = 0; r < 3; r++)
            th.emplace_back([&, r] {
                while (got.load() < kWriters * kPerWriter) {
                    uint32_t ev;
                    struct fi_eq_entry e {};
                    ssize_t n = (w == FI_WAIT_NONE || r == 0)
                                    ? fi_eq_read(q, &ev, &e, sizeof e, 0)
                                    : fi_eq_sread(q, &ev, &e, sizeof e, 20, 0);
                    if (n == -FI_EAGAIN) continue;
                    ASSERT_EQ(n, (ssize_t)sizeof e);
                    t.add(e.data);
                    got++;
                }
            });
        for (auto& x : th) x.join();
        t.expect_each_once();
        EXPECT_EQ(close_eq(q), 0);
    }
}

TEST_F(EqThreads, ConcurrentPeekersReadersAndErrorReaders) {
    struct fid_eq* q = open(128, FI_WAIT_FD);
    auto* ops = ext(q);
    constexpr int kN = 2000;
    std::atomic<int> got{0}, errs{0};
    std::vector<std::thread> th;
    th.emplace_back([&] {
        int src;
        for (int i = 0; i < kN;) {
            ssize_t r = (i % 5 == 0) ? write_error(ops, q, &src, FI_EIO, i)
                                     : write_entry(q, FI_NOTIFY, &src, i);
            if (r == -FI_EOVERRUN) {
                std::this_thread::yield();
                continue;
            }
            ASSERT_GT(r, 0);
            i++;
        }
    });
    for (int r = 0; r < 3; r++)
        th.emplace_back([&] {
            char ed[16];
            while (got.load() < kN) {
                uint32_t ev;
                struct fi_eq_entry e {};
                (void)fi_eq_read(q, &ev, &e, sizeof e, FI_PEEK);
                ssize_t n = fi_eq_read(q, &ev, &e, sizeof e, 0);
                if (n == -FI_EAVAIL) {
                    struct fi_eq_err_entry err {};
                    err.err_data = ed;  // user buffer: no shared provider buffer
                    err.err_data_size = sizeof ed;
                    n = fi_eq_readerr(q, &err, 0);
                    if (n > 0) {
                        errs++;
                        got++;
                    }
                    continue;
                }
                if (n > 0) got++;
            }
        });
    for (auto& x : th) x.join();
    EXPECT_EQ(got.load(), kN);
    EXPECT_EQ(errs.load(), kN / 5);
}

TEST_F(EqThreads, WaitersAreWokenByWritersAndWake) {
    struct fid_eq* q = open(64, FI_WAIT_UNSPEC);
    auto* ops = ext(q);
    constexpr int kN = 500;
    std::atomic<int> got{0};
    std::atomic<bool> done{false};
    std::vector<std::thread> th;
    for (int r = 0; r < 3; r++)
        th.emplace_back([&] {
            while (!done) {
                uint32_t ev;
                struct fi_eq_entry e {};
                ssize_t n = fi_eq_sread(q, &ev, &e, sizeof e, -1, 0);
                if (n > 0) got++;
                else ASSERT_EQ(n, -FI_EAGAIN);  // only wake() ends an infinite wait empty
            }
        });
    for (int i = 0; i < kN; i++) {
        while (write_entry(q, FI_NOTIFY, q, i) == -FI_EOVERRUN) std::this_thread::yield();
        if (i % 50 == 0) std::this_thread::sleep_for(1ms);
    }
    const bool all = evdtest::wait_until([&] { return got.load() >= kN; }, 60s);
    done = true;
    // wake every waiter until none is left (bounded: a waiter that never
    // leaves fails the test instead of hanging it)
    struct fi_evd_eq_depth d {};
    const bool left = evdtest::wait_until(
        [&] {
            ops->wake(q);
            return ops->depth(q, &d) == 0 && d.waiters == 0;
        },
        30s);
    if (!left) {  // threads still blocked in fi_eq_sread cannot be joined
        std::fprintf(stderr, "[  FAILED  ] a waiter never left fi_eq_sread after 30 s of wakes\n");
        std::_Exit(1);
    }
    for (auto& x : th) x.join();
    ASSERT_TRUE(all) << got.load() << " of " << kN << " events read in 60 s";
    EXPECT_EQ(got.load(), kN);
}

TEST_F(EqThreads, CloseWhileManyThreadsWaitCancelsThemAll) {
    for (auto w : {FI_WAIT_FD, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD}) {
        struct fid_eq* q = open(8, w);
        auto* ops = ext(q);
        std::atomic<int> canceled{0};
        std::vector<std::thread> th;
        for (int i = 0; i < 4; i++)
            th.emplace_back([&, i] {
                uint32_t ev;
                struct fi_eq_entry e {};
                ssize_t r = (i % 2) ? fi_eq_sread(q, &ev, &e, sizeof e, -1, 0)
                                    : ops->wait_n(q, 3, -1, &ev, &e, sizeof e, nullptr, 0);
                if (r == -FI_ECANCELED) canceled++;
            });
        struct fi_evd_eq_depth d {};
        EXPECT_TRUE(evdtest::wait_until(
            [&] { return ops->depth(q, &d) == 0 && d.waiters >= 4; }, 30s))
            << "only " << d.waiters << " of 4 waiters blocked in 30 s";
        EXPECT_EQ(close_eq(q), 0);  // ends every wait: the threads can be joined
        for (auto& x : th) x.join();
        EXPECT_EQ(canceled.load(), 4) << w;
    }
}

TEST_F(EqThreads, TrywaitAndFdPollersNeverMissAnEvent) {
    // The fi_trywait protocol with several native pollers on the EQ fd.
    struct fid_eq* q = open(64, FI_WAIT_FD);
    int fd = -1;
    ASSERT_EQ(fi_control(&q->fid, FI_GETWAIT, &fd), 0);
    constexpr int kN = 1000;
    std::atomic<int> got{0};
    std::vector<std::thread> th;
    for (int r = 0; r < 2; r++)
        th.emplace_back([&] {
            struct fid* f = &q->fid;
            while (got.load() < kN) {
                if (fi_trywait(fab, &f, 1) == 0) {
                    struct pollfd p = {fd, POLLIN, 0};
                    int pr = ::poll(&p, 1, 2000);
                    ASSERT_GE(pr, 0);
                    if (pr == 0 && got.load() < kN) {
                        // 2 s without a wakeup while events remain = a lost wakeup
                        struct fi_evd_eq_depth d {};
                        ASSERT_EQ(ext(q)->depth(q, &d), 0);
                        ASSERT_EQ(d.events, 0u) << "fd stayed quiet with events queued";
                    }
                }
                uint32_t ev;
                struct fi_eq_entry e {};
                while (fi_eq_read(q, &ev, &e, sizeof e, 0) > 0) got++;
            }
        });
    for (int i = 0; i < kN; i++) {
        while (write_entry(q, FI_NOTIFY, q, i) == -FI_EOVERRUN) std::this_thread::yield();
        if (i % 16 == 0) std::this_thread::sleep_for(100us);
    }
    const bool all = evdtest::wait_until([&] { return got.load() >= kN; }, 60s);
    ASSERT_GT(write_entry(q, FI_NOTIFY, q, kN), 0);  // releases a poller still in poll()
    for (auto& x : th) x.join();
    ASSERT_TRUE(all) << got.load() << " of " << kN << " events read in 60 s";
    uint32_t ev;
    struct fi_eq_entry e {};
    while (fi_eq_read(q, &ev, &e, sizeof e, 0) > 0) got++;
    EXPECT_EQ(got.load(), kN + 1);
}

}  // namespace
