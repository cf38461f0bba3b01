// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Completion counters (fi_cntr(3)).
//
// A counter is two atomics (successes, errors). Completions are counted by
// whoever polls them from a verbs CQ (cq.cpp); the counter keeps the list of
// CQs that may hold its completions ("sources") so that fi_cntr_read and
// fi_cntr_wait make progress on their own: they pull the sources' pending
// completions into the CQs' backlogs (nothing is lost for fi_cq_read).
//
// Waiting: an epoll fd (FI_GETWAIT) holds the completion channel fd of every
// source that has one, and an eventfd written on every change once FI_GETWAIT
// exported the fd. Each thread in fi_cntr_wait polls that epoll fd (poll(2)
// wakes every poller, epoll_wait only one) and an eventfd of its own, written
// on every change while it waits (fi_cntr_add from another thread, or
// completions counted by another thread), so no waiter's wake-up can be
// consumed by another.
#include "cq/cntr.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "cq/cq.h"
#include "domain.h"
#include "eq/wait.h"
#include "lock.h"
#include "owners.h"

namespace evd {

// One CQ a counter counts the completions of.
struct cntr_source {
    cq* q;
    int n;    // attachments (endpoints x directions)
    int fd;   // completion channel fd in the epoll set, or -1
};

struct cntr : object_head<struct fid_cntr, kind::cntr> {
    refcount refs;        // endpoints bound
    domain* dom = nullptr;
    enum fi_wait_obj wait_obj = FI_WAIT_NONE;

    std::atomic<uint64_t> value{0};
    std::atomic<uint64_t> err{0};
    // what the application last saw (read/readerr/wait): fi_trywait answers
    // -FI_EAGAIN while there is something newer
    std::atomic<uint64_t> seen_value{0};
    std::atomic<uint64_t> seen_err{0};
    std::atomic<int> waiters{0};        // threads in fi_cntr_wait
    std::atomic<bool> fd_exported{false};  // FI_GETWAIT was called: signal signal_fd

    fd_owner signal_fd;  // eventfd: the value changed (after FI_GETWAIT)
    fd_owner wait_fd;    // epoll: signal_fd + source channel fds
    mutex wmu;      // the eventfds of the threads in fi_cntr_wait
    std::vector<int> wfds EVD_GUARDED_BY(wmu);

    mutex mu;  // sources; serializes progress of this counter
    std::vector<cntr_source> sources EVD_GUARDED_BY(mu);
    int unwaitable EVD_GUARDED_BY(mu) = 0;  // sources without a completion channel

    wait_set* wset = nullptr;  // FI_WAIT_SET: the (FD) set this counter joined
    wait_member wmember;       // its wait fd in that set
};

namespace {

// Callers in the counter's own tables (cntr_ops, cntr_fi_ops) only;
// cntr_from_fid checks what it is given.
cntr* cntr_of(struct fid_cntr* f) { return self_of<cntr>(f); }

// After every change of value or err. Costs an atomic load unless somebody
// waits (or the wait fd was exported).
void wake(cntr* c) noexcept {
    if (c->signal_fd.fd < 0) return;
    if (c->fd_exported.load(std::memory_order_relaxed)) c->signal_fd.signal();
    if (!c->waiters.load()) return;
    evd::lock_guard g(c->wmu);
    for (int fd : c->wfds) eventfd_signal(fd);
}

// Pulls the completions waiting in every source (counting them).
void progress(cntr* c) {
    evd::lock_guard g(c->mu);
    for (const cntr_source& s : c->sources) {
        int r = cq_progress(s.q);
        if (r < 0) EVD_DBG(FI_LOG_CNTR, "counter progress: cq_progress %d\n", r);
    }
}

// Arms every source's completion channel; true if all sources can wake us.
bool arm(cntr* c) {
    evd::lock_guard g(c->mu);
    for (const cntr_source& s : c->sources) cq_arm(s.q);
    return c->unwaitable == 0;
}

uint64_t cntr_read(struct fid_cntr* f) {
    return guard([&]() -> uint64_t {
        cntr* c = cntr_of(f);
        if (!c) return 0;
        progress(c);
        uint64_t v = c->value.load(std::memory_order_acquire);
        c->seen_value.store(v, std::memory_order_relaxed);
        return v;
    });
}

uint64_t cntr_readerr(struct fid_cntr* f) {
    return guard([&]() -> uint64_t {
        cntr* c = cntr_of(f);
        if (!c) return 0;
        progress(c);
        uint64_t e = c->err.load(std::memory_order_acquire);
        c->seen_err.store(e, std::memory_order_relaxed);
        return e;
    });
}

// fi_cntr_add/adderr/set/seterr: op changes the value or error value, then
// every waiter (and the exported fd) learns of it.
template <class Op>
int change(struct fid_cntr* f, Op op) {
    cntr* c = cntr_of(f);
    if (!c) return -FI_EINVAL;
    op(*c);
    wake(c);
    return 0;
}

int cntr_add(struct fid_cntr* f, uint64_t v) {
    return change(f, [v](cntr& c) { c.value.fetch_add(v); });
}
int cntr_adderr(struct fid_cntr* f, uint64_t v) {
    return change(f, [v](cntr& c) { c.err.fetch_add(v); });
}
int cntr_set(struct fid_cntr* f, uint64_t v) {
    return change(f, [v](cntr& c) { c.value.store(v); });
}
int cntr_seterr(struct fid_cntr* f, uint64_t v) {
    return change(f, [v](cntr& c) { c.err.store(v); });
}

// A waiting thread's registration: its eventfd is in c->wfds and counted in
// c->waiters for as long as it waits (registered before counted: a waker
// that sees waiters > 0 finds the fd).
class waiter_reg {
public:
    waiter_reg(cntr* c, int fd) : c_(c), fd_(fd) {
        {
            evd::lock_guard g(c->wmu);
            c->wfds.push_back(fd);
        }
        c->waiters.fetch_add(1);
    }
    ~waiter_reg() {
        c_->waiters.fetch_sub(1);
        evd::lock_guard g(c_->wmu);
        std::erase(c_->wfds, fd_);
    }
    waiter_reg(const waiter_reg&) = delete;
    waiter_reg& operator=(const waiter_reg&) = delete;

private:
    cntr* c_;
    int fd_;
};

// Whether a wait is over: 0 when the value reached threshold, -FI_EAVAIL
// when the error count moved from err0 (the caller sees either change), 1
// to keep waiting.
int wait_outcome(cntr* c, uint64_t threshold, uint64_t err0) {
    uint64_t v = c->value.load();
    if (v >= threshold) {
        c->seen_value.store(v, std::memory_order_relaxed);
        return 0;
    }
    uint64_t e = c->err.load();
    if (e != err0) {
        c->seen_err.store(e, std::memory_order_relaxed);
        return -FI_EAVAIL;
    }
    return 1;
}

int do_wait(cntr* c, uint64_t threshold, int timeout) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
    const uint64_t err0 = c->err.load();
    // one eventfd per waiting thread, kept for the thread's later waits (a
    // stale signal in it only costs one more look at the counter)
    thread_local fd_owner mine;
    if (mine.fd < 0) {
        mine.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
        if (mine.fd < 0) return -errno;
    }
    waiter_reg reg(c, mine.fd);
    for (;;) {
        progress(c);
        if (int r = wait_outcome(c, threshold, err0); r <= 0) return r;
        bool all_waitable = arm(c);
        progress(c);  // completions that raced the arm
        if (int r = wait_outcome(c, threshold, err0); r <= 0) return r;
        int wait_ms = -1;
        if (timeout >= 0) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now())
                    .count();
            if (left <= 0) return -FI_ETIMEDOUT;
            wait_ms = static_cast<int>(left);
        }
        // a source without a channel cannot wake us: poll it every ms
        if (!all_waitable && (wait_ms < 0 || wait_ms > 1)) wait_ms = 1;
        struct pollfd p[2] = {{mine.fd, POLLIN, 0}, {c->wait_fd.fd, POLLIN, 0}};
        if (::poll(p, 2, wait_ms) < 0 && errno != EINTR) {
            int e = errno;
            EVD_WARN(FI_LOG_CNTR, "fi_cntr_wait: poll: %s\n", strerror(e));
            return -e;
        }
        if (p[0].revents & POLLIN) eventfd_drain(mine.fd);
        c->signal_fd.drain();  // else an exported, signalled fd keeps poll() returning
    }
}

int cntr_wait(struct fid_cntr* f, uint64_t threshold, int timeout) {
    return guard([&] {
        cntr* c = cntr_of(f);
        if (!c) return -FI_EINVAL;
        if (c->wait_obj == FI_WAIT_NONE) {
            EVD_WARN(FI_LOG_CNTR, "fi_cntr_wait: the counter was opened with FI_WAIT_NONE "
                                  "(poll it with fi_cntr_read)\n");
            return -FI_EINVAL;
        }
        return do_wait(c, threshold, timeout);
    });
}

// fi_trywait: 0 when the wait fd may be slept on (sources armed, the
// application has seen the current values), -FI_EAGAIN when the counter
// changed since the application last read it (or a source cannot wake the fd).
int do_trywait(cntr* c) {
    if (c->wait_obj == FI_WAIT_NONE) return -FI_EINVAL;
    c->signal_fd.drain();
    bool changed = false;
    if (!arm(c)) {
        EVD_DBG(FI_LOG_CNTR, "fi_trywait(cntr): a source CQ has no wait object\n");
        changed = true;
    }
    progress(c);
    if (c->value.load() != c->seen_value.load(std::memory_order_relaxed) ||
        c->err.load() != c->seen_err.load(std::memory_order_relaxed))
        changed = true;
    return changed ? -FI_EAGAIN : 0;
}

int cntr_close(struct fid* f) {
    return guard([&] {
        cntr* c = cntr_of(reinterpret_cast<struct fid_cntr*>(f));
        if (!c) return -FI_EINVAL;
        if (c->refs.busy()) {
            EVD_WARN(FI_LOG_CNTR, "fi_close(cntr): %d endpoint bindings still use it\n",
                     c->refs.n.load());
            return -FI_EBUSY;
        }
        if (c->wset) wait_set_del(c->wset, &c->wmember);
        return retire(c, &c->dom->refs);
    });
}

int cntr_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        cntr* c = cntr_of(reinterpret_cast<struct fid_cntr*>(f));
        if (!c) return -FI_EINVAL;
        switch (command) {
        case FI_GETWAIT:
        case FI_GETWAITOBJ: {
            int rc = control_wait_fd(command, arg, c->wait_fd.fd, c->wait_obj, FI_LOG_CNTR,
                                     "counter");
            if (rc == 0 && command == FI_GETWAIT) c->fd_exported.store(true);
            return rc;
        }
        case kCtrlTrywait:
            return do_trywait(c);
        default:
            EVD_WARN(FI_LOG_CNTR, "fi_control(cntr): command %d not supported\n", command);
            return -FI_ENOSYS;
        }
    });
}

// Ops tables (defined at the end of the file).
extern struct fi_ops cntr_fi_ops;
extern struct fi_ops_cntr cntr_ops;

}  // namespace

// ---------------------------------------------------------------- contract
cntr* cntr_from_fid(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_CNTR) return nullptr;
    return from_fid<cntr>(reinterpret_cast<struct fid_cntr*>(f));
}
struct fid_domain* cntr_domain(cntr* c) { return c ? &c->dom->fid : nullptr; }
void cntr_bind_ref(cntr* c) { c->refs.get(); }
void cntr_bind_unref(cntr* c) { c->refs.put(); }
int cntr_waiters(cntr* c) noexcept { return c ? c->waiters.load() : 0; }

void cntr_inc(cntr* c) noexcept {
    c->value.fetch_add(1);
    wake(c);
}

void cntr_inc_err(cntr* c) noexcept {
    c->err.fetch_add(1);
    wake(c);
}

int cntr_add_source(cntr* c, cq* q) {
    return guard([&] {
        evd::lock_guard g(c->mu);
        for (cntr_source& s : c->sources)
            if (s.q == q) {
                ++s.n;
                return 0;
            }
        int fd = cq_chan_fd(q);
        c->sources.push_back({q, 1, -1});
        // a source without fd in the epoll set (no channel, or a counter
        // without wait object) counts as unwaitable: waits poll it
        if (fd < 0 || c->wait_fd.fd < 0) {
            ++c->unwaitable;
            return 0;
        }
        struct epoll_event ev {};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (epoll_ctl(c->wait_fd.fd, EPOLL_CTL_ADD, fd, &ev)) {
            int e = errno;
            EVD_WARN(FI_LOG_CNTR, "counter: epoll_ctl(ADD cq channel): %s\n", strerror(e));
            ++c->unwaitable;  // still counted; waits poll it
            return 0;
        }
        c->sources.back().fd = fd;
        return 0;
    });
}

void cntr_del_source(cntr* c, cq* q) {
    evd::lock_guard g(c->mu);
    for (size_t i = 0; i < c->sources.size(); ++i) {
        cntr_source& s = c->sources[i];
        if (s.q != q) continue;
        if (--s.n > 0) return;
        if (s.fd >= 0)
            epoll_ctl(c->wait_fd.fd, EPOLL_CTL_DEL, s.fd, nullptr);
        else
            --c->unwaitable;
        c->sources.erase(c->sources.begin() + static_cast<std::ptrdiff_t>(i));
        return;
    }
}

namespace {

// fi_cntr_attr.wait_obj -> the counter's wait object (and its wait set).
int take_wait_obj(cntr* c, const struct fi_cntr_attr& a) {
    switch (a.wait_obj) {
    case FI_WAIT_NONE:
        c->wait_obj = FI_WAIT_NONE;
        return 0;
    case FI_WAIT_UNSPEC:
    case FI_WAIT_FD:
        c->wait_obj = FI_WAIT_FD;
        return 0;
    case FI_WAIT_SET:
        // the counter's own wait fd (as for FI_WAIT_FD) joins an FD set
        if (int r = member_wait_set(a.wait_set, FI_LOG_CNTR, "fi_cntr_open", "a counter",
                                    &c->wset))
            return r;
        c->wait_obj = FI_WAIT_SET;
        return 0;
    default:
        EVD_WARN(FI_LOG_CNTR, "fi_cntr_open: wait object %d not supported (NONE, UNSPEC, "
                              "FD, FD wait sets)\n", a.wait_obj);
        return -FI_ENOSYS;
    }
}

// The wait fd: an epoll fd holding the eventfd every change signals.
int open_wait_fds(cntr* c) {
    c->signal_fd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (c->signal_fd.fd < 0) return -errno;
    c->wait_fd.reset(epoll_create1(EPOLL_CLOEXEC));
    if (c->wait_fd.fd < 0) return -errno;
    struct epoll_event ev {};
    ev.events = EPOLLIN;
    ev.data.fd = c->signal_fd.fd;
    if (epoll_ctl(c->wait_fd.fd, EPOLL_CTL_ADD, c->signal_fd.fd, &ev)) return -errno;
    return 0;
}

int join_wait_set(cntr* c) {
    // fi_wait sleeps on the wait fd: every change must reach it
    c->fd_exported.store(true);
    c->wmember.fid = &c->fid.fid;
    c->wmember.fd = c->wait_fd.fd;
    c->wmember.trywait = [](wait_member* m) {
        return do_trywait(from_fid<cntr>(reinterpret_cast<struct fid_cntr*>(m->fid)));
    };
    if (int r = wait_set_add(c->wset, &c->wmember)) {
        c->wset = nullptr;
        return r;
    }
    return 0;
}

}  // namespace

int cntr_open(struct fid_domain* dom_fid, struct fi_cntr_attr* attr, struct fid_cntr** out,
              void* context) {
    return guard([&] {
        domain* dom = domain_from_fid(dom_fid);
        if (!dom || !out) {
            EVD_WARN(FI_LOG_CNTR, "fi_cntr_open: invalid domain or NULL cntr\n");
            return -FI_EINVAL;
        }
        struct fi_cntr_attr defaults {};
        defaults.events = FI_CNTR_EVENTS_COMP;
        defaults.wait_obj = FI_WAIT_NONE;
        const struct fi_cntr_attr& a = attr ? *attr : defaults;
        if (a.events != FI_CNTR_EVENTS_COMP) {
            EVD_WARN(FI_LOG_CNTR, "fi_cntr_open: events %d not supported (only "
                                  "FI_CNTR_EVENTS_COMP)\n", a.events);
            return -FI_ENOSYS;
        }
        if (a.flags) {
            EVD_WARN(FI_LOG_CNTR, "fi_cntr_open: flags 0x%llx: reserved, must be 0\n",
                     static_cast<unsigned long long>(a.flags));
            return -FI_EINVAL;
        }
        auto c = std::make_unique<cntr>();
        if (int r = take_wait_obj(c.get(), a)) return r;
        {  // c is not published yet: the locks are taken for the analysis
            evd::lock_guard lk(c->mu);
            c->sources.reserve(4);
        }
        {
            evd::lock_guard lk(c->wmu);
            c->wfds.reserve(8);
        }
        if (c->wait_obj != FI_WAIT_NONE)
            if (int r = open_wait_fds(c.get())) return r;
        if (c->wset)
            if (int r = join_wait_set(c.get())) return r;
        c->dom = dom;
        fid_init(*c, FI_CLASS_CNTR, context, &cntr_fi_ops, &cntr_ops);
        return hand_out(std::move(c), dom->refs, out);
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops cntr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cntr_close,
    .bind = op_no_bind,
    .control = cntr_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_cntr cntr_ops = {
    .size = sizeof(struct fi_ops_cntr),
    .read = cntr_read,
    .readerr = cntr_readerr,
    .add = cntr_add,
    .set = cntr_set,
    .wait = cntr_wait,
    .adderr = cntr_adderr,
    .seterr = cntr_seterr,
};

}  // namespace

}  // namespace evd
