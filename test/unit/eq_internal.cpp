// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The EQ's internal contract (prov/src/eq/eq.h): provider posts and their
// overrun, event sources (fd + progress), bind references. These cannot be
// reached through the public API without an RDMA device.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <thread>

#include <rdma/fi_ext_evd.h>

#include "../common/common.h"
#include "../common/held.h"
#include "eq/eq.h"
#include "eq/wait.h"
#include "fabric.h"
#include "internal_fabric.h"

namespace {

using namespace std::chrono_literals;

struct EqInternal : evdtest::InternalFabric {
    struct fid_eq* open(size_t size, enum fi_wait_obj w = FI_WAIT_FD) { return open_eq(size, w); }
};

struct fi_eq_cm_entry cm(void* fid) {
    struct fi_eq_cm_entry e {};
    e.fid = static_cast<fid_t>(fid);
    return e;
}

bool readable(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

TEST_F(EqInternal, ProviderOverrunIsFatalAndReportedAfterEveryValidEvent) {
    evdtest::held<struct fid_eq> q{open(4)};
    evd::eq* e = evd::eq_from_fid(q);
    ASSERT_NE(e, nullptr);
    int ep;
    auto c = cm(&ep);
    // provider posts get the reserve beyond attr.size, then overrun
    int ok = 0;
    while (evd::eq_post(e, FI_CONNECTED, &c, sizeof c) == 0) ok++;
    EXPECT_GE(ok, 4 + 4);
    EXPECT_EQ(evd::eq_post(e, FI_SHUTDOWN, &c, sizeof c), -FI_EOVERRUN);
    struct fi_eq_err_entry in {};
    in.fid = &q->fid;
    in.err = FI_EIO;
    EXPECT_EQ(evd::eq_post_err(e, in, nullptr, 0), -FI_EOVERRUN);
    // writes fail
    EXPECT_EQ(fi_eq_write(q, FI_NOTIFY, &c, sizeof c, 0), -FI_EOVERRUN);
    int fd;
    ASSERT_EQ(fi_control(&q->fid, FI_GETWAIT, &fd), 0);
    EXPECT_TRUE(readable(fd));
    // every valid event, then the overrun error (sticky)
    uint32_t ev;
    struct fi_eq_cm_entry out {};
    for (int i = 0; i < ok; i++) ASSERT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), (ssize_t)sizeof out);
    for (int round = 0; round < 2; round++) {
        EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAVAIL);
        struct fi_eq_err_entry err {};
        ASSERT_EQ(fi_eq_readerr(q, &err, 0), (ssize_t)sizeof err);
        EXPECT_EQ(err.err, FI_EOVERRUN);
        EXPECT_EQ(err.data, 3u);  // three lost: SHUTDOWN, the error and the first failing post
        EXPECT_EQ(err.prov_errno, FI_EVD_PERR(FI_EVD_PERR_EQ, FI_EVD_EQ_PERR_OVERRUN));
        EXPECT_EQ(err.fid, &q->fid);
    }
    EXPECT_EQ(fi_eq_sread(q, &ev, &out, sizeof out, 1000, 0), -FI_EAVAIL);
    EXPECT_EQ(q.close(), 0);
}

TEST_F(EqInternal, PostErrCopiesErrDataAndIgnoresTheEntrysPointer) {
    evdtest::held<struct fid_eq> q{open(8)};
    evd::eq* e = evd::eq_from_fid(q);
    struct fi_eq_err_entry in {};
    in.fid = &q->fid;
    in.err = FI_ECONNREFUSED;
    in.prov_errno = 28;
    in.err_data = reinterpret_cast<void*>(0x1);  // ignored
    in.err_data_size = 999;
    const char data[] = "reject-data";
    ASSERT_EQ(evd::eq_post_err(e, in, data, sizeof data), 0);
    char buf[64];
    struct fi_eq_err_entry out {};
    out.err_data = buf;
    out.err_data_size = sizeof buf;
    ASSERT_EQ(fi_eq_readerr(q, &out, 0), (ssize_t)sizeof out);
    EXPECT_EQ(out.err, FI_ECONNREFUSED);
    EXPECT_EQ(out.prov_errno, 28);
    EXPECT_EQ(out.err_data_size, sizeof data);
    EXPECT_STREQ(buf, data);
    EXPECT_EQ(q.close(), 0);
}

TEST_F(EqInternal, CloseIsBusyWhileBound) {
    evdtest::held<struct fid_eq> q{open(8)};
    evd::eq* e = evd::eq_from_fid(q);
    evd::eq_bind_ref(e);
    EXPECT_EQ(q.close(), -FI_EBUSY);
    evd::eq_bind_unref(e);
    EXPECT_EQ(q.close(), 0);
}

// A source: an eventfd standing for an rdma_cm channel; progress turns each
// count into one CONNREQ.
struct fake_source {
    evd::eq_source src;
    evd::eq* q = nullptr;
    std::atomic<int> calls{0};
    std::atomic<int> running{0};
    fake_source() {
        src.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        src.arg = this;
        src.progress = [](evd::eq_source* s) {
            auto* self = static_cast<fake_source*>(s->arg);
            EXPECT_EQ(self->running.fetch_add(1), 0) << "progress ran concurrently";
            self->calls++;
            uint64_t n;
            if (::read(s->fd, &n, sizeof n) == sizeof n) {
                for (uint64_t i = 0; i < n; i++) {
                    auto c = cm(self);
                    evd::eq_post(self->q, FI_CONNREQ, &c, sizeof c);
                }
            }
            std::this_thread::sleep_for(1ms);
            self->running.fetch_sub(1);
        };
    }
    ~fake_source() { ::close(src.fd); }
    void fire(uint64_t n = 1) { ASSERT_EQ(::write(src.fd, &n, sizeof n), 8); }
};

TEST_F(EqInternal, SourceProgressRunsFromReadAndItsFdJoinsTheWaitFd) {
    for (auto w : {FI_WAIT_FD, FI_WAIT_NONE, FI_WAIT_YIELD, FI_WAIT_MUTEX_COND}) {
        fake_source s;  // before q: closing q detaches s if an ASSERT left it added
        evdtest::held<struct fid_eq> q{open(8, w)};
        s.q = evd::eq_from_fid(q);
        ASSERT_EQ(evd::eq_add_source(s.q, &s.src), 0);
        EXPECT_EQ(evd::eq_add_source(s.q, &s.src), -FI_EALREADY);
        uint32_t ev;
        struct fi_eq_cm_entry out {};
        EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
        int fd = -1;
        if (w == FI_WAIT_FD) {
            ASSERT_EQ(fi_control(&q->fid, FI_GETWAIT, &fd), 0);
            ASSERT_EQ(evd::eq_trywait(s.q), 0);  // the fi_trywait protocol
            EXPECT_FALSE(readable(fd));
        }
        s.fire(2);
        if (fd >= 0) {
            EXPECT_TRUE(readable(fd));  // a source fd wakes the EQ fd
        }
        ASSERT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), (ssize_t)sizeof out) << w;
        EXPECT_EQ(ev, (uint32_t)FI_CONNREQ);
        EXPECT_EQ(out.fid, reinterpret_cast<fid_t>(&s));
        ASSERT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), (ssize_t)sizeof out);
        EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
        evd::eq_remove_source(s.q, &s.src);
        s.fire(1);
        EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);  // no longer polled
        EXPECT_EQ(q.close(), 0);
    }
}

// A polled source (a deadline timer that could not be armed) runs at every
// read whether its fd is readable or not, and wakes a timed sleeper within
// kEqPolledMs; turned off, or removed, it runs only when its fd says so.
TEST_F(EqInternal, APolledSourceRunsAtEveryReadAndWakesASleeper) {
    fake_source s;  // its fd never fired: only the poll runs it
    evdtest::held<struct fid_eq> q{open(8, FI_WAIT_FD)};
    s.q = evd::eq_from_fid(q);
    ASSERT_EQ(evd::eq_add_source(s.q, &s.src), 0);
    uint32_t ev;
    struct fi_eq_cm_entry out {};
    EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
    EXPECT_EQ(s.calls.load(), 0);
    evd::eq_source_poll(s.q, &s.src, true);
    evd::eq_source_poll(s.q, &s.src, true);  // twice on is once on
    EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
    EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
    EXPECT_EQ(s.calls.load(), 2);
    // a sleeper runs it while it sleeps: 200 ms is many polls
    s.calls = 0;
    EXPECT_EQ(fi_eq_sread(q, &ev, &out, sizeof out, 200, 0), -FI_EAGAIN);
    EXPECT_GE(s.calls.load(), 3);
    evd::eq_source_poll(s.q, &s.src, false);
    s.calls = 0;
    EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
    EXPECT_EQ(s.calls.load(), 0);
    // removed while polled: its count goes with it
    evd::eq_source_poll(s.q, &s.src, true);
    evd::eq_remove_source(s.q, &s.src);
    EXPECT_FALSE(s.src.polled.load());
    EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), -FI_EAGAIN);
    EXPECT_EQ(s.calls.load(), 0);
    EXPECT_EQ(q.close(), 0);
}

TEST_F(EqInternal, SreadWakesForASourceAddedWhileBlocked) {
    evdtest::held<struct fid_eq> q{open(8, FI_WAIT_FD)};
    fake_source s;
    s.q = evd::eq_from_fid(q);
    std::thread t([&] {
        // the source is added once the reader sleeps without it
        ASSERT_TRUE(evdtest::wait_until(
            [&] {
                struct fi_evd_eq_depth d {};
                return fi_control(&q->fid, FI_EVD_EQ_GETDEPTH, &d) == 0 && d.waiters == 1;
            },
            std::chrono::milliseconds(10000)));
        ASSERT_EQ(evd::eq_add_source(s.q, &s.src), 0);
        // and fires once the woken reader is back asleep (on the epoll fd now);
        // firing at once would pass even if the reader never saw the source
        std::this_thread::sleep_for(50ms);
        s.fire();
    });
    uint32_t ev;
    struct fi_eq_cm_entry out {};
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(fi_eq_sread(q, &ev, &out, sizeof out, 5000, 0), (ssize_t)sizeof out);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    t.join();
    evd::eq_remove_source(s.q, &s.src);
    EXPECT_EQ(q.close(), 0);
}

TEST_F(EqInternal, PollfdListsSourcesAndChangeIndexMoves) {
    fake_source s;  // before q: closing q detaches s if an ASSERT left it added
    evdtest::held<struct fid_eq> q{open(8, FI_WAIT_POLLFD)};
    struct fi_wait_pollfd p {};
    EXPECT_EQ(fi_control(&q->fid, FI_GETWAIT, &p), -FI_ETOOSMALL);
    uint64_t idx0 = p.change_index;
    EXPECT_EQ(p.nfds, 1u);
    s.q = evd::eq_from_fid(q);
    ASSERT_EQ(evd::eq_add_source(s.q, &s.src), 0);
    struct pollfd fds[2];
    p.fd = fds;
    p.nfds = 2;
    ASSERT_EQ(fi_control(&q->fid, FI_GETWAIT, &p), 0);
    EXPECT_EQ(p.nfds, 2u);
    EXPECT_NE(p.change_index, idx0);
    bool found = false;
    for (auto& f : fds) found |= f.fd == s.src.fd;
    EXPECT_TRUE(found);
    evd::eq_remove_source(s.q, &s.src);
    EXPECT_EQ(q.close(), 0);
}

// eq_remove_source returns only when the callback is not running and never
// runs again, even with readers hammering the EQ from other threads.
TEST_F(EqInternal, RemoveSourceWaitsForARunningCallback) {
    evdtest::held<struct fid_eq> q{open(1024, FI_WAIT_FD)};
    evd::eq* e = evd::eq_from_fid(q);
    for (int round = 0; round < 20; round++) {
        auto* s = new fake_source;
        s->q = e;
        ASSERT_EQ(evd::eq_add_source(e, &s->src), 0);
        std::atomic<bool> stop{false};
        std::thread readers[2];
        for (auto& r : readers)
            r = std::thread([&] {
                uint32_t ev;
                struct fi_eq_cm_entry out {};
                while (!stop) (void)fi_eq_read(q, &ev, &out, sizeof out, 0);
            });
        for (int i = 0; i < 5; i++) {
            s->fire();
            std::this_thread::sleep_for(200us);
        }
        evd::eq_remove_source(e, &s->src);
        EXPECT_EQ(s->running.load(), 0);
        int calls = s->calls.load();
        s->fire();
        std::this_thread::sleep_for(5ms);
        EXPECT_EQ(s->calls.load(), calls) << "progress ran after removal";
        stop = true;
        for (auto& r : readers) r.join();
        delete s;
    }
    EXPECT_EQ(q.close(), 0);
}

TEST_F(EqInternal, TrywaitRunsSourceProgress) {
    evdtest::held<struct fid_eq> q{open(8, FI_WAIT_FD)};
    fake_source s;
    s.q = evd::eq_from_fid(q);
    ASSERT_EQ(evd::eq_add_source(s.q, &s.src), 0);
    EXPECT_EQ(evd::eq_trywait(s.q), 0);
    s.fire();
    EXPECT_EQ(evd::eq_trywait(s.q), -FI_EAGAIN);
    EXPECT_EQ(s.calls.load(), 1);
    evd::eq_remove_source(s.q, &s.src);
    EXPECT_EQ(q.close(), 0);
}

// fi_trywait(f) on another thread while it holds mu (fi_poll(3)'s pattern);
// its answer. A deadlock ends the whole binary within 10 s with `what`
// (nothing could clean up after a thread stuck inside evd).
int trywait_holding(pthread_mutex_t* mu, struct fid_fabric* fab, struct fid* f, const char* what) {
    std::atomic<int> rc{1};
    std::thread t([&] {
        pthread_mutex_lock(mu);
        int r = evd::trywait(fab, &f, 1);
        pthread_mutex_unlock(mu);
        rc = r;
    });
    if (!evdtest::wait_until([&] { return rc.load() != 1; }, std::chrono::milliseconds(10000))) {
        ADD_FAILURE() << what;
        std::fflush(nullptr);
        std::_Exit(1);
    }
    t.join();
    return rc.load();
}

// fi_poll(3)'s pattern for a MUTEX_COND wait set: lock the set's mutex,
// fi_trywait, and wait on the condition when it answers 0. The trywait runs
// the EQ's source progress, whose post signals the set: that signal must
// not take the mutex this thread holds. Asked through the EQ and through
// the set.
TEST_F(EqInternal, TrywaitWithTheWaitSetMutexHeldDoesNotDeadlock) {
    struct fi_wait_attr wa {};
    wa.wait_obj = FI_WAIT_MUTEX_COND;
    evdtest::held<struct fid_wait> ws;
    ASSERT_EQ(evd::wait_open(fab, &wa, ws.out()), 0);
    struct fi_mutex_cond mc {};
    ASSERT_EQ(fi_control(&ws->fid, FI_GETWAIT, &mc), 0);
    for (bool through_set : {false, true}) {
        SCOPED_TRACE(through_set ? "fi_trywait(wait set)" : "fi_trywait(EQ)");
        struct fi_eq_attr a {};
        a.size = 8;
        a.wait_obj = FI_WAIT_SET;
        a.wait_set = ws;
        evdtest::held<struct fid_eq> q;
        ASSERT_EQ(evd::eq_open(fab, &a, q.out(), nullptr), 0);
        fake_source s;
        s.q = evd::eq_from_fid(q);
        ASSERT_EQ(evd::eq_add_source(s.q, &s.src), 0);
        struct fid* f = through_set ? &ws->fid : &q->fid;
        EXPECT_EQ(evd::trywait(fab, &f, 1), 0);  // armed: the next post signals the set
        s.fire();
        int rc = trywait_holding(mc.mutex, fab, f, "fi_trywait deadlocked on the wait set's mutex");
        EXPECT_EQ(rc, -FI_EAGAIN);  // the event the source posted is there
        uint32_t ev;
        struct fi_eq_cm_entry out {};
        EXPECT_EQ(fi_eq_read(q, &ev, &out, sizeof out, 0), (ssize_t)sizeof out);
        evd::eq_remove_source(s.q, &s.src);
        EXPECT_EQ(q.close(), 0);
    }
    EXPECT_EQ(ws.close(), 0);
}

// The same across objects: the application holds EQ A's mutex (FI_WAIT_MUTEX_COND)
// and calls fi_trywait on EQ B, whose source posts to A (a domain's EQ
// reading a device's async fd posts to the EQ of the endpoint an event is
// about). Signalling A must not take the mutex this thread holds.
TEST_F(EqInternal, TrywaitOnAnEqPostingToAnotherWhoseMutexIsHeldDoesNotDeadlock) {
    evdtest::held<struct fid_eq> a{open(8, FI_WAIT_MUTEX_COND)};
    evdtest::held<struct fid_eq> b{open(8, FI_WAIT_FD)};
    struct fi_mutex_cond mc {};
    ASSERT_EQ(fi_control(&a->fid, FI_GETWAIT, &mc), 0);
    fake_source s;
    s.q = evd::eq_from_fid(a);  // B's source posts to A
    ASSERT_EQ(evd::eq_add_source(evd::eq_from_fid(b), &s.src), 0);
    struct fid* fa = &a->fid;
    struct fid* fb = &b->fid;
    EXPECT_EQ(evd::trywait(fab, &fa, 1), 0);  // A armed: the next post signals it
    s.fire();
    EXPECT_EQ(trywait_holding(mc.mutex, fab, fb, "fi_trywait(B) deadlocked on A's mutex"), 0);
    // B itself has nothing
    uint32_t ev;
    struct fi_eq_cm_entry out {};
    EXPECT_EQ(fi_eq_read(a, &ev, &out, sizeof out, 0), (ssize_t)sizeof out);
    evd::eq_remove_source(evd::eq_from_fid(b), &s.src);
    EXPECT_EQ(b.close(), 0);
    EXPECT_EQ(a.close(), 0);
}

// eq_remove_source waits for a callback that is running; it must sleep,
// not spin: while a callback takes 300 ms, the remover uses far less CPU.
TEST_F(EqInternal, RemovingASourceWaitsForItsCallbackWithoutSpinning) {
    evdtest::held<struct fid_eq> q{open(8, FI_WAIT_FD)};
    evd::eq* e = evd::eq_from_fid(q);
    struct slow {
        evd::eq_source src;
        std::atomic<bool> entered{false};
    } sl;
    sl.src.fd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);  // readable at once
    sl.src.arg = &sl;
    sl.src.progress = [](evd::eq_source* s) {
        auto* self = static_cast<slow*>(s->arg);
        uint64_t n;
        (void)!::read(s->fd, &n, sizeof n);
        self->entered = true;
        std::this_thread::sleep_for(300ms);
    };
    ASSERT_EQ(evd::eq_add_source(e, &sl.src), 0);
    std::thread reader([&] {
        uint32_t ev;
        struct fi_eq_cm_entry out {};
        (void)fi_eq_read(q, &ev, &out, sizeof out, 0);  // runs the slow callback
    });
    ASSERT_TRUE(evdtest::wait_until([&] { return sl.entered.load(); }, 10000ms));
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    auto t0 = std::chrono::steady_clock::now();
    evd::eq_remove_source(e, &sl.src);
    auto waited = std::chrono::steady_clock::now() - t0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    reader.join();
    const double cpu_ms = (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) / 1e6;
    EXPECT_GE(waited, 100ms) << "eq_remove_source returned while the callback ran";
    EXPECT_LT(cpu_ms, 50.0) << "eq_remove_source spun for the callback";
    ::close(sl.src.fd);
    EXPECT_EQ(q.close(), 0);
}

TEST_F(EqInternal, ProviderEventsLargerThanInlineUseThePool) {
    evdtest::held<struct fid_eq> q{open(8)};
    evd::eq* e = evd::eq_from_fid(q);
    unsigned char big[2000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)(i ^ 0x5a);
    ASSERT_EQ(evd::eq_post(e, FI_CONNREQ, big, sizeof big), 0);
    EXPECT_EQ(evd::eq_post(e, FI_CONNREQ, big, 100000), -FI_EINVAL);  // beyond any slot
    unsigned char out[2000];
    uint32_t ev;
    ASSERT_EQ(fi_eq_read(q, &ev, out, sizeof out, 0), (ssize_t)sizeof out);
    EXPECT_EQ(memcmp(out, big, sizeof big), 0);
    EXPECT_EQ(q.close(), 0);
}

}  // namespace
