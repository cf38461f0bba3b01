// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Wait sets, poll sets, fi_trywait, and the EQ fd with select/poll/epoll.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "../common/held.h"
#include "eq_util.h"

// Wait and poll sets are deprecated in libfabric 2.x, not removed: evd keeps
// them for the applications that open them, and these tests open them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

using namespace evdtest;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

class WaitPoll : public EqTest {
protected:
    struct fid_wait* wait_set(enum fi_wait_obj w) {
        struct fi_wait_attr a {};
        a.wait_obj = w;
        struct fid_wait* ws = nullptr;
        EXPECT_EQ(fi_wait_open(fab, &a, &ws), 0);
        return ws;
    }
};

int select_readable(int fd, int ms) {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(fd, &r);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return select(fd + 1, &r, nullptr, nullptr, &tv);
}
int poll_readable(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return ::poll(&p, 1, ms);
}
int epoll_readable(int fd, int ms) {
    int ep = epoll_create1(0);
    struct epoll_event ev {};
    ev.events = EPOLLIN;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    struct epoll_event out;
    int n = epoll_wait(ep, &out, 1, ms);
    ::close(ep);
    return n;
}

TEST_F(WaitPoll, EqFdWorksWithSelectPollAndEpoll) {
    struct fid_eq* q = open(8, FI_WAIT_FD);
    int fd;
    ASSERT_EQ(fi_control(&q->fid, FI_GETWAIT, &fd), 0);
    struct fid* f = &q->fid;
    const pid_t me = current_tid();
    for (auto waiter : {select_readable, poll_readable, epoll_readable}) {
        ASSERT_EQ(fi_trywait(fab, &f, 1), 0);
        EXPECT_EQ(waiter(fd, 0), 0);
        std::atomic<bool> waiting{false};
        std::thread t([&] {
            // post once this thread sleeps in the waiter: the fd must wake it
            EXPECT_TRUE(wait_until([&] { return waiting && thread_sleeping(me); }, 5000ms))
                << "the waiter never blocked";
            ASSERT_GT(write_entry(q, FI_NOTIFY, q, 1), 0);
        });
        waiting = true;
        EXPECT_EQ(waiter(fd, 5000), 1);
        t.join();
        EXPECT_EQ(fi_trywait(fab, &f, 1), -FI_EAGAIN);
        uint32_t ev;
        struct fi_eq_entry e {};
        ASSERT_GT(fi_eq_read(q, &ev, &e, sizeof e, 0), 0);
    }
}

// No syscall per event while nobody waits: the fd is signalled once per
// empty -> non-empty transition seen by a reader, and stays readable.
TEST_F(WaitPoll, FdStaysSignalledUntilAReaderSeesTheQueueEmpty) {
    struct fid_eq* q = open(64, FI_WAIT_FD);
    int fd;
    ASSERT_EQ(fi_control(&q->fid, FI_GETWAIT, &fd), 0);
    struct fid* f = &q->fid;
    ASSERT_EQ(fi_trywait(fab, &f, 1), 0);
    for (int i = 0; i < 10; i++) ASSERT_GT(write_entry(q, FI_NOTIFY, q, i), 0);
    EXPECT_EQ(poll_readable(fd, 0), 1);
    uint32_t ev;
    struct fi_eq_entry e {};
    for (int i = 0; i < 10; i++) {
        EXPECT_EQ(poll_readable(fd, 0), 1) << i;
        ASSERT_GT(fi_eq_read(q, &ev, &e, sizeof e, 0), 0);
    }
    EXPECT_EQ(poll_readable(fd, 0), 1);  // not cleared before anyone saw it empty
    EXPECT_EQ(fi_eq_read(q, &ev, &e, sizeof e, 0), -FI_EAGAIN);
    EXPECT_EQ(poll_readable(fd, 0), 0);
    ASSERT_GT(write_entry(q, FI_NOTIFY, q, 1), 0);
    EXPECT_EQ(poll_readable(fd, 0), 1);  // armed again: no wakeup lost
}

TEST_F(WaitPoll, WaitSetOfEveryKindWakesForAnyMember) {
    for (auto w : {FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_MUTEX_COND, FI_WAIT_YIELD, FI_WAIT_POLLFD}) {
        // raw: the fixture's EQs in the set close only in TearDown, after the test
        // body (a held set would try to close first, and fail, on an early return)
        struct fid_wait* ws = wait_set(w);
        ASSERT_NE(ws, nullptr);
        struct fid_eq* a = open(8, FI_WAIT_SET, FI_WRITE, ws);
        struct fid_eq* b = open(8, FI_WAIT_SET, FI_WRITE, ws);
        auto t0 = Clock::now();
        EXPECT_EQ(fi_wait(ws, 50), -FI_ETIMEDOUT) << w;
        EXPECT_GE(ms_since(t0), 49.0);
        std::atomic<bool> waiting{false};
        const pid_t me = current_tid();
        std::thread t([&] {
            if (w == FI_WAIT_YIELD) {
                // a yield set spins and never sleeps: nothing tells that
                // fi_wait is running, so post a while after it was called
                EXPECT_TRUE(wait_until([&] { return waiting.load(); }, 5000ms));
                std::this_thread::sleep_for(30ms);
            } else {
                // post once this thread sleeps in fi_wait: b must wake it
                EXPECT_TRUE(wait_until([&] { return waiting && thread_sleeping(me); }, 5000ms))
                    << "fi_wait never blocked, wait object " << w;
            }
            ASSERT_GT(write_entry(b, FI_NOTIFY, b, 1), 0);
        });
        t0 = Clock::now();
        waiting = true;
        EXPECT_EQ(fi_wait(ws, 5000), 0) << w;
        EXPECT_LT(ms_since(t0), 4000.0);
        t.join();
        EXPECT_EQ(fi_wait(ws, 0), 0);  // still pending: returns at once
        struct fid* f = &ws->fid;
        EXPECT_EQ(fi_trywait(fab, &f, 1), -FI_EAGAIN);
        uint32_t ev;
        struct fi_eq_entry e {};
        ASSERT_GT(fi_eq_read(b, &ev, &e, sizeof e, 0), 0);
        EXPECT_EQ(fi_trywait(fab, &f, 1), 0);
        EXPECT_EQ(fi_eq_sread(a, &ev, &e, sizeof e, 0, 0), -FI_EINVAL);  // sread not on a set EQ
        EXPECT_EQ(close_eq(a), 0);
        EXPECT_EQ(close_eq(b), 0);
        EXPECT_EQ(fi_close(&ws->fid), 0);
    }
}

TEST_F(WaitPoll, WaitSetFdWorksNatively) {
    // raw: the fixture's EQs in the set close only in TearDown, after the test
    // body (a held set would try to close first, and fail, on an early return)
    struct fid_wait* ws = wait_set(FI_WAIT_FD);
    struct fid_eq* q = open(8, FI_WAIT_SET, FI_WRITE, ws);
    int fd = -1;
    ASSERT_EQ(fi_control(&ws->fid, FI_GETWAIT, &fd), 0);
    enum fi_wait_obj obj;
    ASSERT_EQ(fi_control(&ws->fid, FI_GETWAITOBJ, &obj), 0);
    EXPECT_EQ(obj, FI_WAIT_FD);
    struct fid* f = &ws->fid;
    ASSERT_EQ(fi_trywait(fab, &f, 1), 0);
    EXPECT_EQ(poll_readable(fd, 0), 0);
    ASSERT_GT(write_entry(q, FI_NOTIFY, q, 1), 0);
    EXPECT_EQ(epoll_readable(fd, 1000), 1);
    EXPECT_EQ(close_eq(q), 0);
    EXPECT_EQ(fi_close(&ws->fid), 0);
}

TEST_F(WaitPoll, WaitSetMutexCondGivesItsObjects) {
    evdtest::held<struct fid_wait> ws{wait_set(FI_WAIT_MUTEX_COND)};
    struct fi_mutex_cond mc {};
    ASSERT_EQ(fi_control(&ws->fid, FI_GETWAIT, &mc), 0);
    EXPECT_NE(mc.mutex, nullptr);
    EXPECT_NE(mc.cond, nullptr);
    EXPECT_EQ(ws.close(), 0);
}

TEST_F(WaitPoll, WaitSetRejectsBadAttributes) {
    struct fi_wait_attr a {};
    evdtest::held<struct fid_wait> ws;  // neither open may succeed
    a.wait_obj = FI_WAIT_NONE;
    EXPECT_EQ(fi_wait_open(fab, &a, ws.out()), -FI_EINVAL);
    a.wait_obj = FI_WAIT_FD;
    a.flags = 1;
    EXPECT_EQ(fi_wait_open(fab, &a, ws.out()), -FI_EINVAL);
}

TEST_F(WaitPoll, TrywaitTakesSeveralFids) {
    struct fid_eq* a = open(8, FI_WAIT_FD);
    struct fid_eq* b = open(8, FI_WAIT_FD);
    struct fid* fids[2] = {&a->fid, &b->fid};
    EXPECT_EQ(fi_trywait(fab, fids, 2), 0);
    ASSERT_GT(write_entry(b, FI_NOTIFY, b, 1), 0);
    EXPECT_EQ(fi_trywait(fab, fids, 2), -FI_EAGAIN);
    struct fid* bogus = &fab->fid;  // a fabric cannot be waited on
    EXPECT_EQ(fi_trywait(fab, &bogus, 1), -FI_EINVAL);
}

// fi_poll_open needs a domain, which needs an RDMA device: runs in the VM
// (test/vm/run-in-vm ./evd_unit_api --gtest_filter='WaitPoll.PollSet*').
TEST_F(WaitPoll, PollSetReturnsContextsOfEqsWithEvents) {
    struct fi_info* hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup("evd");
    hints->ep_attr->type = FI_EP_MSG;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    struct fi_info* info = nullptr;
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (rc || !info) GTEST_SKIP() << "no RDMA device: poll sets need a domain";
    evdtest::held<struct fid_fabric> dfab;
    ASSERT_EQ(fi_fabric(info->fabric_attr, dfab.out(), nullptr), 0);
    evdtest::held<struct fid_domain> dom;
    rc = fi_domain(dfab, info, dom.out(), nullptr);
    fi_freeinfo(info);
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    struct fi_poll_attr pa {};
    // raw: the fixture's EQs join the set, and close only in TearDown
    struct fid_poll* ps = nullptr;
    ASSERT_EQ(fi_poll_open(dom, &pa, &ps), 0);
    int ctx_a, ctx_b;
    struct fid_eq* a = open(8, FI_WAIT_NONE, FI_WRITE, nullptr, &ctx_a);
    struct fid_eq* b = open(8, FI_WAIT_NONE, FI_WRITE, nullptr, &ctx_b);
    ASSERT_EQ(fi_poll_add(ps, &a->fid, 0), 0);
    ASSERT_EQ(fi_poll_add(ps, &b->fid, 0), 0);
    EXPECT_EQ(fi_poll_add(ps, &b->fid, 0), -FI_EALREADY);
    void* ctx[4];
    EXPECT_EQ(fi_poll(ps, ctx, 4), 0);
    ASSERT_GT(write_entry(b, FI_NOTIFY, b, 1), 0);
    ASSERT_EQ(fi_poll(ps, ctx, 4), 1);
    EXPECT_EQ(ctx[0], &ctx_b);
    EXPECT_EQ(close_eq(a), -FI_EBUSY);  // in the poll set
    EXPECT_EQ(fi_close(&ps->fid), -FI_EBUSY);
    EXPECT_EQ(fi_poll_del(ps, &a->fid, 0), 0);
    EXPECT_EQ(fi_poll_del(ps, &b->fid, 0), 0);
    EXPECT_EQ(fi_poll_del(ps, &b->fid, 0), -FI_ENOENT);
    EXPECT_EQ(fi_close(&ps->fid), 0);
    EXPECT_EQ(close_eq(a), 0);
    EXPECT_EQ(close_eq(b), 0);
    EXPECT_EQ(dom.close(), 0);
    EXPECT_EQ(dfab.close(), 0);
}

}  // namespace
