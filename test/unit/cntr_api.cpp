// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Counters (fi_cntr(3)) without an RDMA device: a counter needs a domain and a
// domain needs a device, so the counter is opened on a domain object built
// here (no device, no PD) and then used only through the public fi_cntr_*
// calls (its ops tables). Endpoint binding is checked on a bare ep object.
// Completions counted from real traffic: test/integration/cntr_rxe.cpp.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <chrono>
#include <thread>

#include "../common/common.h"
#include "../common/held.h"
#include "cq/cntr.h"
#include "cq/cq.h"
#include "domain.h"
#include "eq/wait.h"
#include "fabric.h"
#include "msg/ep.h"

// Wait and poll sets are deprecated in libfabric 2.x, not removed: evd keeps
// them for the applications that open them, and these tests open them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using namespace std::chrono;

// Threads blocked in fi_cntr_wait on the counter behind f.
int waiting(struct fid_cntr* f) { return evd::cntr_waiters(evd::cntr_from_fid(&f->fid)); }

// Another provider's ops tables: an older, shorter fi_ops that ends before
// tostr (evd must not read past its size), and a full one whose tostr is
// its own.
int foreign_tostr(const struct fid*, char*, size_t) { return 0; }
struct fi_ops short_foreign_ops = {.size = offsetof(struct fi_ops, tostr)};
struct fi_ops full_foreign_ops = {.size = sizeof(struct fi_ops), .tostr = foreign_tostr};

// A foreign object: exactly a libfabric fid on the heap, nothing behind it.
// evd must refuse it without reading past it (where an evd object keeps
// its tag); under ASan any such read fails the test.
template <class Fid>
struct foreign {
    std::unique_ptr<Fid> p = std::make_unique<Fid>();
    Fid& f = *p;
    explicit foreign(bool short_table = false) {
        reinterpret_cast<struct fid&>(f).ops = short_table ? &short_foreign_ops : &full_foreign_ops;
    }
};

class Cntr : public ::testing::Test {
protected:
    void SetUp() override {
        dom_.fid.fid.fclass = FI_CLASS_DOMAIN;
    }
    void TearDown() override {
        for (auto* c : open_) EXPECT_EQ(fi_close(&c->fid), 0);
        EXPECT_EQ(dom_.refs.n.load(), 0) << "a counter leaked its domain reference";
    }
    // Opens a counter on the device-less domain; rc returned, *out set on success.
    int open(enum fi_wait_obj w, struct fid_cntr** out, void* ctx = nullptr) {
        struct fi_cntr_attr a {};
        a.events = FI_CNTR_EVENTS_COMP;
        a.wait_obj = w;
        int rc = evd::cntr_open(&dom_.fid, &a, out, ctx);
        if (!rc) open_.push_back(*out);
        return rc;
    }
    struct fid_cntr* open_ok(enum fi_wait_obj w = FI_WAIT_UNSPEC) {
        struct fid_cntr* c = nullptr;
        EXPECT_EQ(open(w, &c), 0);
        return c;
    }
    void forget(struct fid_cntr* c) { std::erase(open_, c); }

    evd::domain dom_;
    std::vector<struct fid_cntr*> open_;
};

TEST_F(Cntr, OpenSetsFidAndTakesDomainRef) {
    int ctx;
    struct fid_cntr* c = nullptr;
    ASSERT_EQ(open(FI_WAIT_NONE, &c, &ctx), 0);
    EXPECT_EQ(c->fid.fclass, static_cast<size_t>(FI_CLASS_CNTR));
    EXPECT_EQ(c->fid.context, &ctx);
    EXPECT_EQ(dom_.refs.n.load(), 1);
    EXPECT_EQ(fi_cntr_read(c), 0u);
    EXPECT_EQ(fi_cntr_readerr(c), 0u);
}

TEST_F(Cntr, NullAttrMeansDefaults) {
    struct fid_cntr* c = nullptr;
    ASSERT_EQ(evd::cntr_open(&dom_.fid, nullptr, &c, nullptr), 0);
    open_.push_back(c);
    enum fi_wait_obj w = FI_WAIT_FD;
    ASSERT_EQ(fi_control(&c->fid, FI_GETWAITOBJ, &w), 0);
    EXPECT_EQ(w, FI_WAIT_NONE);
}

TEST_F(Cntr, AttrValidation) {
    evdtest::held<struct fid_cntr> c;  // none of these opens may succeed
    struct fi_cntr_attr a {};
    a.events = static_cast<enum fi_cntr_events>(1);  // not FI_CNTR_EVENTS_COMP
    EXPECT_EQ(evd::cntr_open(&dom_.fid, &a, c.out(), nullptr), -FI_ENOSYS);
    a = {};
    a.flags = 1;
    EXPECT_EQ(evd::cntr_open(&dom_.fid, &a, c.out(), nullptr), -FI_EINVAL);
    for (auto w : {FI_WAIT_MUTEX_COND, FI_WAIT_YIELD, FI_WAIT_POLLFD}) {
        a = {};
        a.wait_obj = w;
        EXPECT_EQ(evd::cntr_open(&dom_.fid, &a, c.out(), nullptr), -FI_ENOSYS) << "wait_obj " << w;
    }
    a = {};
    a.wait_obj = FI_WAIT_SET;  // and no set
    EXPECT_EQ(evd::cntr_open(&dom_.fid, &a, c.out(), nullptr), -FI_EINVAL);
    a = {};
    EXPECT_EQ(evd::cntr_open(nullptr, &a, c.out(), nullptr), -FI_EINVAL);
    EXPECT_EQ(evd::cntr_open(&dom_.fid, &a, nullptr, nullptr), -FI_EINVAL);
    for (bool short_table : {false, true}) {
        foreign<struct fid_domain> not_evd(short_table);
        not_evd.f.fid.fclass = FI_CLASS_DOMAIN;
        EXPECT_EQ(evd::cntr_open(&not_evd.f, &a, c.out(), nullptr), -FI_EINVAL);
    }
    EXPECT_EQ(dom_.refs.n.load(), 0);
}

// FI_WAIT_SET: the counter's wait fd joins an FD wait set; fi_wait returns
// once the counter changed since the application last read it, and times
// out while it has not. Only FD sets can hold a counter.
TEST_F(Cntr, JoinsAnFdWaitSetThatWakesOnAChange) {
    evd::fabric fab;
    fab.fid.fid.fclass = FI_CLASS_FABRIC;
    struct fi_wait_attr wa {};
    wa.wait_obj = FI_WAIT_MUTEX_COND;
    evdtest::held<struct fid_wait> mc;
    ASSERT_EQ(evd::wait_open(&fab.fid, &wa, mc.out()), 0);
    struct fi_cntr_attr a {};
    a.events = FI_CNTR_EVENTS_COMP;
    a.wait_obj = FI_WAIT_SET;
    a.wait_set = mc;
    evdtest::held<struct fid_wait> ws;  // before c: c joins it and closes first
    evdtest::held<struct fid_cntr> c;
    EXPECT_EQ(evd::cntr_open(&dom_.fid, &a, c.out(), nullptr), -FI_ENOSYS);
    EXPECT_EQ(mc.close(), 0);

    wa.wait_obj = FI_WAIT_FD;
    ASSERT_EQ(evd::wait_open(&fab.fid, &wa, ws.out()), 0);
    a.wait_set = ws;
    ASSERT_EQ(evd::cntr_open(&dom_.fid, &a, c.out(), nullptr), 0);
    enum fi_wait_obj w = FI_WAIT_NONE;
    EXPECT_EQ(fi_control(&c->fid, FI_GETWAITOBJ, &w), 0);
    EXPECT_EQ(w, FI_WAIT_SET);
    EXPECT_EQ(ws.close(), -FI_EBUSY);  // a member is still in it

    EXPECT_EQ(fi_wait(ws, 50), -FI_ETIMEDOUT);  // nothing new
    auto t0 = std::chrono::steady_clock::now();
    std::thread adder([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        fi_cntr_add(c, 3);
    });
    EXPECT_EQ(fi_wait(ws, 5000), 0);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - t0).count();
    adder.join();
    EXPECT_GE(ms, 90);
    EXPECT_LT(ms, 4000);
    EXPECT_EQ(fi_cntr_read(c), 3u);      // seen: the set sleeps again
    EXPECT_EQ(fi_wait(ws, 50), -FI_ETIMEDOUT);
    EXPECT_EQ(fi_cntr_adderr(c, 1), 0);  // an error change wakes it too
    EXPECT_EQ(fi_wait(ws, 5000), 0);
    EXPECT_EQ(fi_cntr_readerr(c), 1u);
    EXPECT_EQ(fi_cntr_wait(c, 3, 100), 0);  // and the counter still waits on its own

    EXPECT_EQ(c.close(), 0);
    EXPECT_EQ(ws.close(), 0);
    EXPECT_EQ(fab.refs.n.load(), 0);
}

TEST_F(Cntr, AddSetAndErrorValuesAreIndependent) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    EXPECT_EQ(fi_cntr_add(c, 5), 0);
    EXPECT_EQ(fi_cntr_add(c, 7), 0);
    EXPECT_EQ(fi_cntr_read(c), 12u);
    EXPECT_EQ(fi_cntr_readerr(c), 0u);
    EXPECT_EQ(fi_cntr_adderr(c, 3), 0);
    EXPECT_EQ(fi_cntr_readerr(c), 3u);
    EXPECT_EQ(fi_cntr_read(c), 12u);
    EXPECT_EQ(fi_cntr_set(c, 100), 0);
    EXPECT_EQ(fi_cntr_read(c), 100u);
    EXPECT_EQ(fi_cntr_seterr(c, 1), 0);
    EXPECT_EQ(fi_cntr_readerr(c), 1u);
    EXPECT_EQ(fi_cntr_set(c, 0), 0);
    EXPECT_EQ(fi_cntr_read(c), 0u);
    EXPECT_EQ(fi_cntr_add(c, UINT64_MAX), 0);
    EXPECT_EQ(fi_cntr_read(c), UINT64_MAX);
}

TEST_F(Cntr, InternalIncrementsCountOne) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    evd::cntr* k = evd::cntr_from_fid(&c->fid);
    ASSERT_NE(k, nullptr);
    evd::cntr_inc(k);
    evd::cntr_inc(k);
    evd::cntr_inc_err(k);
    EXPECT_EQ(fi_cntr_read(c), 2u);
    EXPECT_EQ(fi_cntr_readerr(c), 1u);
    foreign<struct fid> not_cntr;
    not_cntr.f.fclass = FI_CLASS_CNTR;
    EXPECT_EQ(evd::cntr_from_fid(&not_cntr.f), nullptr) << "the tag must be checked, not only fclass";
}

TEST_F(Cntr, WaitOnWaitNoneIsInvalid) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    EXPECT_EQ(fi_cntr_wait(c, 1, 0), -FI_EINVAL);
    int fd = -1;
    EXPECT_EQ(fi_control(&c->fid, FI_GETWAIT, &fd), -FI_ENODATA);
}

TEST_F(Cntr, WaitReturnsAtOnceWhenThresholdReached) {
    struct fid_cntr* c = open_ok();
    ASSERT_EQ(fi_cntr_add(c, 3), 0);
    EXPECT_EQ(fi_cntr_wait(c, 3, 0), 0);
    EXPECT_EQ(fi_cntr_wait(c, 2, -1), 0);
}

TEST_F(Cntr, WaitTimesOut) {
    struct fid_cntr* c = open_ok();
    ASSERT_EQ(fi_cntr_add(c, 1), 0);
    auto t0 = steady_clock::now();
    EXPECT_EQ(fi_cntr_wait(c, 2, 100), -FI_ETIMEDOUT);
    auto ms = duration_cast<milliseconds>(steady_clock::now() - t0).count();
    EXPECT_GE(ms, 95);
    EXPECT_LT(ms, 2000);
    EXPECT_EQ(fi_cntr_read(c), 1u);
    EXPECT_EQ(fi_cntr_readerr(c), 0u) << "a timeout leaves the error value unchanged";
    EXPECT_EQ(fi_cntr_wait(c, 2, 0), -FI_ETIMEDOUT);
}

TEST_F(Cntr, ThreadAddWakesWaiter) {
    struct fid_cntr* c = open_ok(FI_WAIT_FD);
    std::atomic<int> rc{1};
    std::atomic<bool> started{false};
    steady_clock::time_point woke;
    std::thread waiter([&] {
        started = true;
        rc = fi_cntr_wait(c, 10, 10000);
        woke = steady_clock::now();
    });
    ASSERT_TRUE(evdtest::wait_until([&] { return waiting(c) == 1; }, milliseconds(10000)))
        << "the waiter never blocked";
    EXPECT_EQ(rc.load(), 1) << "the waiter returned before the threshold";
    ASSERT_EQ(fi_cntr_add(c, 9), 0);
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(rc.load(), 1) << "9 < threshold 10";
    auto t0 = steady_clock::now();
    ASSERT_EQ(fi_cntr_add(c, 1), 0);
    waiter.join();
    EXPECT_EQ(rc.load(), 0);
    EXPECT_LT(duration_cast<milliseconds>(woke - t0).count(), 1000) << "woken, not timed out";
}

TEST_F(Cntr, ThreadErrorChangeUnblocksWaiterWithEavail) {
    struct fid_cntr* c = open_ok(FI_WAIT_UNSPEC);
    std::atomic<int> rc{1};
    std::thread waiter([&] { rc = fi_cntr_wait(c, 1, 10000); });
    EXPECT_TRUE(evdtest::wait_until([&] { return waiting(c) == 1; }, milliseconds(10000)))
        << "the waiter never blocked";
    auto t0 = steady_clock::now();
    ASSERT_EQ(fi_cntr_adderr(c, 1), 0);
    waiter.join();
    EXPECT_EQ(rc.load(), -FI_EAVAIL);
    EXPECT_LT(duration_cast<milliseconds>(steady_clock::now() - t0).count(), 1000);
    EXPECT_EQ(fi_cntr_read(c), 0u);
}

TEST_F(Cntr, ThreadManyWaitersAllWake) {
    struct fid_cntr* c = open_ok(FI_WAIT_FD);
    constexpr int kWaiters = 4;
    std::atomic<int> done{0}, ok{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < kWaiters; ++i)
        ts.emplace_back([&, i] {
            if (fi_cntr_wait(c, static_cast<uint64_t>(i + 1), 10000) == 0) ++ok;
            ++done;
        });
    EXPECT_TRUE(evdtest::wait_until([&] { return waiting(c) == kWaiters; }, milliseconds(10000)))
        << waiting(c) << " of " << kWaiters << " waiters blocked";
    auto t0 = steady_clock::now();
    for (int i = 0; i < kWaiters; ++i) ASSERT_EQ(fi_cntr_add(c, 1), 0);
    for (auto& t : ts) t.join();
    EXPECT_EQ(ok.load(), kWaiters);
    EXPECT_LT(duration_cast<milliseconds>(steady_clock::now() - t0).count(), 2000);
}

TEST_F(Cntr, GetWaitFdBecomesReadableOnAdd) {
    struct fid_cntr* c = open_ok(FI_WAIT_FD);
    int fd = -1;
    ASSERT_EQ(fi_control(&c->fid, FI_GETWAIT, &fd), 0);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(fi_control(&c->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
    struct fid* f = &c->fid;
    EXPECT_EQ(f->ops->control(f, evd::kCtrlTrywait, nullptr), 0) << "nothing happened yet";
    struct pollfd p = {fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0);
    ASSERT_EQ(fi_cntr_add(c, 1), 0);
    EXPECT_EQ(::poll(&p, 1, 1000), 1);
    EXPECT_EQ(f->ops->control(f, evd::kCtrlTrywait, nullptr), -FI_EAGAIN)
        << "the counter changed since the application last read it";
    EXPECT_EQ(f->ops->control(f, evd::kCtrlTrywait, nullptr), -FI_EAGAIN) << "still unread";
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "trywait consumed the signal";
    EXPECT_EQ(fi_cntr_read(c), 1u);
    EXPECT_EQ(f->ops->control(f, evd::kCtrlTrywait, nullptr), 0) << "seen: safe to sleep";
    ASSERT_EQ(fi_cntr_adderr(c, 1), 0);
    EXPECT_EQ(::poll(&p, 1, 1000), 1) << "an error change signals too";
    EXPECT_EQ(f->ops->control(f, evd::kCtrlTrywait, nullptr), -FI_EAGAIN);
    EXPECT_EQ(fi_cntr_readerr(c), 1u);
    EXPECT_EQ(f->ops->control(f, evd::kCtrlTrywait, nullptr), 0);
    ASSERT_EQ(fi_cntr_add(c, 1), 0);
    EXPECT_EQ(fi_cntr_wait(c, 2, 1000), 0);
    EXPECT_EQ(f->ops->control(f, evd::kCtrlTrywait, nullptr), 0) << "fi_cntr_wait saw it";
}

TEST_F(Cntr, UnknownControlIsEnosys) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    uint64_t flags = 0;
    EXPECT_EQ(fi_control(&c->fid, FI_GETOPSFLAG, &flags), -FI_ENOSYS);
}

TEST_F(Cntr, CloseIsBusyWhileBound) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    evd::cntr* k = evd::cntr_from_fid(&c->fid);
    evd::cntr_bind_ref(k);
    EXPECT_EQ(fi_close(&c->fid), -FI_EBUSY);
    EXPECT_EQ(fi_cntr_add(c, 1), 0) << "still usable after -FI_EBUSY";
    evd::cntr_bind_unref(k);
    EXPECT_EQ(fi_close(&c->fid), 0);
    forget(c);
    EXPECT_EQ(dom_.refs.n.load(), 0);
}

// ---------------------------------------------------------------- ep binding
class CntrBind : public Cntr {
protected:
    void SetUp() override {
        Cntr::SetUp();
        ep_.dom = &dom_;
    }
    void TearDown() override {
        evd::ep_data_close(&ep_);
        Cntr::TearDown();
    }
    evd::msg_ep ep_;
};

TEST_F(CntrBind, BindsEachDirectionAndHoldsRefs) {
    struct fid_cntr* tx = open_ok(FI_WAIT_NONE);
    struct fid_cntr* rx = open_ok(FI_WAIT_NONE);
    ASSERT_EQ(evd::ep_data_bind(&ep_, &tx->fid, FI_SEND | FI_READ | FI_WRITE), 0);
    ASSERT_EQ(evd::ep_data_bind(&ep_, &rx->fid, FI_RECV), 0);
    EXPECT_EQ(ep_.send_cntr, evd::cntr_from_fid(&tx->fid));
    EXPECT_EQ(ep_.read_cntr, evd::cntr_from_fid(&tx->fid));
    EXPECT_EQ(ep_.write_cntr, evd::cntr_from_fid(&tx->fid));
    EXPECT_EQ(ep_.recv_cntr, evd::cntr_from_fid(&rx->fid));
    EXPECT_EQ(fi_close(&tx->fid), -FI_EBUSY);
    EXPECT_EQ(fi_close(&rx->fid), -FI_EBUSY);
    evd::ep_data_close(&ep_);
    EXPECT_EQ(ep_.send_cntr, nullptr);
    EXPECT_EQ(ep_.recv_cntr, nullptr);
    EXPECT_EQ(fi_close(&tx->fid), 0);
    EXPECT_EQ(fi_close(&rx->fid), 0);
    forget(tx);
    forget(rx);
}

TEST_F(CntrBind, TransmitIsSend) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    ASSERT_EQ(evd::ep_data_bind(&ep_, &c->fid, FI_TRANSMIT), 0);
    EXPECT_NE(ep_.send_cntr, nullptr);
    EXPECT_EQ(ep_.read_cntr, nullptr);
}

TEST_F(CntrBind, RejectsBadFlagsAndSecondBinding) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    struct fid_cntr* d = open_ok(FI_WAIT_NONE);
    EXPECT_EQ(evd::ep_data_bind(&ep_, &c->fid, 0), -FI_EINVAL);
    EXPECT_EQ(evd::ep_data_bind(&ep_, &c->fid, FI_REMOTE_WRITE), -FI_EINVAL)
        << "remote counters need FI_RMA_EVENT, which evd does not offer";
    EXPECT_EQ(evd::ep_data_bind(&ep_, &c->fid, FI_RECV | FI_REMOTE_READ), -FI_EINVAL);
    EXPECT_EQ(evd::ep_data_bind(&ep_, &c->fid, FI_SEND | FI_SELECTIVE_COMPLETION), -FI_EINVAL);
    EXPECT_EQ(ep_.recv_cntr, nullptr) << "a rejected bind binds nothing";
    ASSERT_EQ(evd::ep_data_bind(&ep_, &c->fid, FI_SEND), 0);
    EXPECT_EQ(evd::ep_data_bind(&ep_, &d->fid, FI_SEND | FI_RECV), -FI_EINVAL);
    EXPECT_EQ(ep_.recv_cntr, nullptr) << "all or nothing";
    EXPECT_EQ(fi_close(&d->fid), 0);
    forget(d);
}

TEST_F(CntrBind, RejectsForeignObjectsAndLateBinding) {
    struct fid_cntr* c = open_ok(FI_WAIT_NONE);
    evd::domain other;
    other.fid.fid.fclass = FI_CLASS_DOMAIN;
    evdtest::held<struct fid_cntr> other_cntr;
    ASSERT_EQ(evd::cntr_open(&other.fid, nullptr, other_cntr.out(), nullptr), 0);
    EXPECT_EQ(evd::ep_data_bind(&ep_, &other_cntr->fid, FI_SEND), -FI_EINVAL) << "other domain";
    EXPECT_EQ(other_cntr.close(), 0);
    foreign<struct fid> bogus;
    bogus.f.fclass = FI_CLASS_CNTR;
    EXPECT_EQ(evd::ep_data_bind(&ep_, &bogus.f, FI_SEND), -FI_EINVAL);
    ep_.enabled = true;
    EXPECT_EQ(evd::ep_data_bind(&ep_, &c->fid, FI_SEND), -FI_EOPBADSTATE);
    ep_.enabled = false;
}

TEST_F(CntrBind, EnableWithoutCountersChangesNothing) {
    EXPECT_EQ(evd::ep_data_enable(&ep_), 0);
    EXPECT_EQ(evd::ep_data_route(&ep_), nullptr);
    EXPECT_EQ(ep_.tx_cq, nullptr);
}

// Send-queue slot ids are a private address range: never a user pointer.
TEST(CntrSlots, SlotIdsRoundTripAndStayPrivate) {
    for (uint32_t i : {0u, 1u, 4095u, evd::kMaxTxSlots - 1}) {
        uint64_t id = evd::tx_slot_wr_id(i);
        EXPECT_TRUE(evd::is_tx_slot_wr_id(id));
        EXPECT_EQ(evd::tx_slot_index(id), i);
    }
    int user;
    EXPECT_FALSE(evd::is_tx_slot_wr_id(reinterpret_cast<uintptr_t>(&user)));
    EXPECT_FALSE(evd::is_tx_slot_wr_id(0));
    EXPECT_FALSE(evd::is_tx_slot_wr_id(evd::wr_id_suppressed()));
    EXPECT_FALSE(evd::is_tx_slot_wr_id(evd::tx_slot_wr_id(0) - 1));
    EXPECT_FALSE(evd::is_tx_slot_wr_id(evd::tx_slot_wr_id(evd::kMaxTxSlots - 1) + 1));
}

}  // namespace
