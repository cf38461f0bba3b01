// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Wait sets (fi_wait_open / fi_wait) and fi_trywait (fi_poll(3)); poll
// sets are poll_set.cpp.
//
// A wait set keeps a list of members (EQs, and CQs / counters that join with
// wait_set_add). fi_wait asks every member first (trywait: 0 = nothing
// pending and armed) and blocks only when all are armed:
//  * FD / POLLFD / UNSPEC sets: an epoll fd holding every member's fd;
//  * MUTEX_COND sets: a sequence number bumped under the set's mutex by
//    wait_set_signal (members call it when an event arrives while armed);
//  * YIELD sets: sched_yield between rounds.
// Since members are armed before blocking, an event arriving between the
// check and the block always signals: no wakeup is lost.
#include "eq/wait.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include "deadline.h"
#include "domain.h"
#include "eq/eq.h"
#include "fabric.h"
#include "lock.h"
#include "mutex_cond.h"
#include "owners.h"

namespace evd {

struct wait_set : object_head<struct fid_wait, kind::wait> {
    fabric* fab = nullptr;
    refcount refs;  // members
    enum fi_wait_obj wobj = FI_WAIT_FD;  // as reported by FI_GETWAITOBJ
    mutex mu;
    wait_member* members EVD_GUARDED_BY(mu) = nullptr;
    fd_owner epfd;
    bool has_mc = false;
    pthread_mutex_t mc_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t mc_cond = PTHREAD_COND_INITIALIZER;
    // Bumped by wait_set_signal, under mc_mu (or on the thread holding it,
    // mutex_cond.h).
    std::atomic<uint64_t> seq{0};
    ~wait_set() {
        if (has_mc) {
            pthread_cond_destroy(&mc_cond);
            pthread_mutex_destroy(&mc_mu);
        }
    }
};

namespace {

bool fd_based(enum fi_wait_obj w) { return w == FI_WAIT_FD || w == FI_WAIT_POLLFD; }

// -FI_EAGAIN when some member has something pending; 0 when all are armed.
int members_trywait(wait_set* ws) {
    evd::lock_guard lk(ws->mu);
    for (wait_member* m = ws->members; m; m = m->next)
        if (m->trywait(m) == -FI_EAGAIN) return -FI_EAGAIN;
    return 0;
}

int ws_wait(struct fid_wait* f, int timeout) {
    return guard([&] {
        wait_set* ws = wait_set_from_fid(f);
        if (!ws) return -FI_EINVAL;
        const deadline dl(timeout);
        const bool infinite = dl.infinite;
        for (;;) {
            uint64_t seq = 0;
            if (ws->has_mc) {
                pthread_mutex_lock(&ws->mc_mu);
                seq = ws->seq.load();
                pthread_mutex_unlock(&ws->mc_mu);
            }
            if (members_trywait(ws) == -FI_EAGAIN) return 0;
            struct timespec left {};
            if (!dl.left(&left)) return -FI_ETIMEDOUT;
            if (fd_based(ws->wobj)) {
                struct pollfd p = {ws->epfd.fd, POLLIN, 0};
                (void)::ppoll(&p, 1, infinite ? nullptr : &left, nullptr);
            } else if (ws->has_mc) {
                pthread_mutex_lock(&ws->mc_mu);
                while (ws->seq.load() == seq) {
                    int rc = infinite ? pthread_cond_wait(&ws->mc_cond, &ws->mc_mu)
                                      : pthread_cond_timedwait(&ws->mc_cond, &ws->mc_mu, &dl.end);
                    if (rc == ETIMEDOUT) break;
                }
                pthread_mutex_unlock(&ws->mc_mu);
            } else {
                sched_yield();
            }
        }
    });
}

int ws_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        wait_set* ws = wait_set_from_fid(reinterpret_cast<struct fid_wait*>(f));
        if (!ws) return -FI_EINVAL;
        switch (command) {
        case FI_GETWAITOBJ:
            if (!arg) return -FI_EINVAL;
            *static_cast<enum fi_wait_obj*>(arg) = ws->wobj;
            return 0;
        case FI_GETWAIT:
            if (!arg) return -FI_EINVAL;
            if (ws->wobj == FI_WAIT_FD) {
                *static_cast<int*>(arg) = ws->epfd.fd;
                return 0;
            }
            if (ws->wobj == FI_WAIT_POLLFD) {
                auto* p = static_cast<struct fi_wait_pollfd*>(arg);
                size_t have = p->nfds;
                p->change_index = 0;  // one fd that never changes
                p->nfds = 1;
                if (have < 1) return -FI_ETOOSMALL;
                if (!p->fd) return -FI_EINVAL;
                p->fd[0] = {ws->epfd.fd, POLLIN, 0};
                return 0;
            }
            if (ws->has_mc) {
                auto* mc = static_cast<struct fi_mutex_cond*>(arg);
                mc->mutex = &ws->mc_mu;
                mc->cond = &ws->mc_cond;
                return 0;
            }
            return -FI_ENODATA;
        case kCtrlTrywait:
            return members_trywait(ws);
        default:
            return -FI_ENOSYS;
        }
    });
}

int ws_close(struct fid* f) {
    return guard([&] {
        wait_set* ws = wait_set_from_fid(reinterpret_cast<struct fid_wait*>(f));
        if (!ws) return -FI_EINVAL;
        if (ws->refs.busy()) {
            EVD_WARN(FI_LOG_FABRIC, "fi_close(wait set): %d objects still use it\n",
                     ws->refs.n.load());
            return -FI_EBUSY;
        }
        return retire(ws, ws->fab ? &ws->fab->refs : nullptr);
    });
}

// Ops tables (defined at the end of the file).
extern struct fi_ops ws_fi_ops;
extern struct fi_ops_wait ws_ops;

}  // namespace

// ------------------------------------------------------------------ contract

wait_set* wait_set_from_fid(struct fid_wait* f) {
    if (!f || f->fid.fclass != FI_CLASS_WAIT) return nullptr;
    return from_fid<wait_set>(f);
}

enum fi_wait_obj wait_set_obj(const wait_set* ws) { return ws->wobj; }

int member_wait_set(struct fid_wait* f, enum fi_log_subsys sub, const char* who,
                    const char* what, wait_set** out) {
    wait_set* ws = f ? wait_set_from_fid(f) : nullptr;
    if (!ws) {
        EVD_WARN(sub, "%s: FI_WAIT_SET without an evd wait set\n", who);
        return -FI_EINVAL;
    }
    if (wait_set_obj(ws) != FI_WAIT_FD) {
        EVD_WARN(sub, "%s: only FD wait sets can hold %s\n", who, what);
        return -FI_ENOSYS;
    }
    *out = ws;
    return 0;
}

int wait_set_add(wait_set* ws, wait_member* m) {
    if (!ws || !m || !m->trywait) return -FI_EINVAL;
    evd::lock_guard lk(ws->mu);
    if (fd_based(ws->wobj)) {
        if (m->fd < 0) return -FI_EINVAL;
        struct epoll_event ev {};
        ev.events = EPOLLIN;
        ev.data.ptr = m;
        if (epoll_ctl(ws->epfd.fd, EPOLL_CTL_ADD, m->fd, &ev) != 0) return fi_err(errno);
    }
    m->next = ws->members;
    ws->members = m;
    ws->refs.get();
    return 0;
}

void wait_set_del(wait_set* ws, wait_member* m) {
    if (!ws || !m) return;
    evd::lock_guard lk(ws->mu);
    wait_member** pp = &ws->members;
    while (*pp && *pp != m) pp = &(*pp)->next;
    if (!*pp) return;
    *pp = m->next;
    m->next = nullptr;
    if (fd_based(ws->wobj)) (void)epoll_ctl(ws->epfd.fd, EPOLL_CTL_DEL, m->fd, nullptr);
    ws->refs.put();
}

void wait_set_signal(wait_set* ws) noexcept {
    if (!ws || !ws->has_mc) return;
    // fi_trywait may run this on the thread that holds the mutex
    // (mutex_cond.h): then without taking it.
    lock_unless_held lk(&ws->mc_mu);
    ws->seq.fetch_add(1);
    pthread_cond_broadcast(&ws->mc_cond);
}

int fid_trywait(struct fid* f) {
    if (!f) return -FI_EINVAL;
    if (f->fclass == FI_CLASS_EQ) {
        eq* q = eq_from_fid(f);
        return q ? eq_trywait(q) : -FI_EINVAL;
    }
    if (f->fclass == FI_CLASS_WAIT) {
        wait_set* ws = wait_set_from_fid(reinterpret_cast<struct fid_wait*>(f));
        return ws ? members_trywait(ws) : -FI_EINVAL;
    }
    if (!f->ops || !f->ops->control) return -FI_EINVAL;
    int rc = f->ops->control(f, kCtrlTrywait, nullptr);
    if (rc == 0 || rc == -FI_EAGAIN) return rc;
    EVD_WARN(FI_LOG_FABRIC, "fi_trywait: fid class %zu cannot be waited on (%d)\n", f->fclass, rc);
    return -FI_EINVAL;
}

int wait_open(struct fid_fabric* ff, struct fi_wait_attr* attr, struct fid_wait** out) {
    return guard([&] {
        fabric* fab = from_fid<fabric>(ff);
        if (!fab || !attr || !out) return -FI_EINVAL;
        if (attr->flags) {
            EVD_WARN(FI_LOG_FABRIC, "fi_wait_open: flags must be 0\n");
            return -FI_EINVAL;
        }
        auto ws = std::make_unique<wait_set>();
        int raw_wait;  // an int: out-of-range values are rejected, not loaded
        static_assert(sizeof raw_wait == sizeof attr->wait_obj);
        std::memcpy(&raw_wait, &attr->wait_obj, sizeof raw_wait);
        switch (raw_wait) {
        case FI_WAIT_UNSPEC:
        case FI_WAIT_FD:
            ws->wobj = FI_WAIT_FD;
            break;
        case FI_WAIT_POLLFD:
            ws->wobj = FI_WAIT_POLLFD;
            break;
        case FI_WAIT_MUTEX_COND: {
            ws->wobj = FI_WAIT_MUTEX_COND;
            mutex_cond_init(&ws->mc_mu, &ws->mc_cond, CLOCK_MONOTONIC);
            ws->has_mc = true;
            break;
        }
        case FI_WAIT_YIELD:
            ws->wobj = FI_WAIT_YIELD;
            break;
        default:
            EVD_WARN(FI_LOG_FABRIC, "fi_wait_open: wait_obj %d is not a wait set type\n",
                     raw_wait);
            return -FI_EINVAL;
        }
        if (fd_based(ws->wobj)) {
            ws->epfd.reset(epoll_create1(EPOLL_CLOEXEC));
            if (ws->epfd.fd < 0) return fi_err(errno);
        }
        ws->fab = fab;
        fid_init(*ws, FI_CLASS_WAIT, nullptr, &ws_fi_ops, &ws_ops);
        return hand_out(std::move(ws), fab->refs, out);
    });
}

int control_wait_fd(int command, void* arg, int fd, enum fi_wait_obj obj,
                    enum fi_log_subsys sub, const char* what) {
    if (!arg) return -FI_EINVAL;
    if (command == FI_GETWAITOBJ) {
        *static_cast<enum fi_wait_obj*>(arg) = obj;
        return 0;
    }
    if (fd < 0) {
        EVD_WARN(sub, "FI_GETWAIT: the %s has no wait object (FI_WAIT_NONE)\n", what);
        return -FI_ENODATA;
    }
    *static_cast<int*>(arg) = fd;
    return 0;
}

int trywait(struct fid_fabric* ff, struct fid** fids, int count) {
    return guard([&] {
        if (!from_fid<fabric>(ff) || count < 0 || (count && !fids)) return -FI_EINVAL;
        for (int i = 0; i < count; i++) {
            int rc = fid_trywait(fids[i]);
            if (rc) return rc;
        }
        return 0;
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops ws_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = ws_close,
    .bind = op_no_bind,
    .control = ws_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_wait ws_ops = {
    .size = sizeof(struct fi_ops_wait),
    .wait = ws_wait,
};

}  // namespace

}  // namespace evd
