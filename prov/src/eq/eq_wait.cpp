// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The EQ's blocking engine: how fi_eq_sread and wait_n sleep, and how a
// producer wakes them without a syscall when nobody waits.
//
// Signalling (wait objects other than NONE/YIELD): an eventfd `efd` inside an
// epoll fd `epfd` that also holds every source fd. `armed` is true when the
// fd is known to be clear; a producer signals only when armed (and disarms),
// a reader that observes the queue empty clears the fd (under the lock) and
// re-arms. Invariant: fd clear => armed, so no wakeup is lost and a stream of
// events costs no syscall while nobody waits.
#include <sched.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include "deadline.h"
#include "eq/eq_state.h"
#include "lock.h"
#include "mutex_cond.h"

namespace evd {

// Clears the wait fd once the caller has seen there is nothing to wait for
// (or, for threshold waits, not enough): the next event signals again.
void eq_arm_locked(eq* q) {
    if (q->efd_signalled) {
        uint64_t v;
        (void)!::read(q->efd.fd, &v, sizeof v);
        q->efd_signalled = false;
    }
    q->armed = true;
}

// Producer side, after a push: which wait objects need a signal. The external
// ones (fd watched from outside, mutex/cond, wait set) only when armed, i.e.
// once per empty -> non-empty transition a reader has seen; the internal
// futex only when a thread sleeps on it.
wake_plan eq_disarm_locked(eq* q) {
    wake_plan w;
    if (q->armed && (q->ext_fd || q->fd_sleepers || q->has_mc || q->ws)) {
        q->armed = false;
        w.fd = q->efd.fd >= 0 && (q->ext_fd || q->fd_sleepers);
        w.mc = q->has_mc;
        w.ws = q->ws != nullptr;
        if (w.fd) q->efd_signalled = true;
    }
    if (q->futex_sleepers) {
        q->futex_seq.fetch_add(1, std::memory_order_relaxed);
        w.futex = true;
    }
    return w;
}

// Wakes everybody (close, the wake op, a new source); mu held.
wake_plan eq_kick_locked(eq* q) {
    wake_plan w;
    q->armed = false;
    w.fd = q->efd.fd >= 0;
    if (w.fd) q->efd_signalled = true;
    w.mc = q->has_mc;
    w.ws = q->ws != nullptr;
    q->futex_seq.fetch_add(1, std::memory_order_relaxed);
    w.futex = true;
    return w;
}

void eq_signal(eq* q, wake_plan w) noexcept {
    if (w.fd) {
        uint64_t one = 1;
        (void)!::write(q->efd.fd, &one, sizeof one);
    }
    if (w.futex) (void)futex(&q->futex_seq, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
    if (w.mc) {
        // fi_trywait may run this on the thread that holds the mutex
        // (mutex_cond.h): then without taking it.
        lock_unless_held lk(&q->mc_mu);
        pthread_cond_broadcast(&q->mc_cond);
    }
    if (w.ws) wait_set_signal(q->ws);
}

namespace {

// Whether a waiter for `threshold` events has something to read (mu held).
bool ready_for(eq* q, size_t threshold) EVD_REQUIRES(q->mu) {
    return q->count >= threshold || (q->count == 0 && q->overrun) ||
           (q->nerr && eq_ready_err_locked(q) >= 0);
}

// Whether to poll the sources once before giving up or sleeping: a wait that
// will sleep in epoll_wait skips it (epoll_wait returns at once with the
// ready sources, one syscall instead of two).
bool poll_first(const eq* q, int timeout) {
    const bool epoll_sleep = q->wobj != FI_WAIT_YIELD && q->efd.fd >= 0;
    return q->nsources.load(std::memory_order_relaxed) && (!epoll_sleep || timeout == 0);
}

// One sleep of a waiter, mu held on entry and on return: a yield (YIELD),
// epoll_wait when sources must be watched, else a private futex (one syscall
// each side, like a bare eventfd). True when it ran sources epoll reported.
bool sleep_once(eq* q, const deadline& dl, const struct timespec& left) EVD_REQUIRES(q->mu) {
    if (q->wobj == FI_WAIT_YIELD || q->efd.fd < 0) {
        q->mu.unlock();
        sched_yield();
        q->mu.lock();
        return false;
    }
    if (!q->nsources.load(std::memory_order_relaxed)) {
        const uint32_t seq = q->futex_seq.load(std::memory_order_relaxed);
        q->futex_sleepers++;
        q->mu.unlock();
        (void)futex(&q->futex_seq, FUTEX_WAIT_PRIVATE, seq, dl.infinite ? nullptr : &left);
        q->mu.lock();
        q->futex_sleepers--;
        return false;
    }
    // Sleep in epoll_wait itself and progress what it reports: one syscall
    // per wakeup instead of a poll followed by a zero-timeout epoll_wait
    // (under emulation each syscall costs tens of us).
    eq_arm_locked(q);
    q->fd_sleepers++;
    q->mu.unlock();
    struct epoll_event evs[16 + kEqMaxPolled];
    int ms = dl.infinite ? -1 : ceil_ms(left);
    // a polled source (eq_source_poll) has no fd to wake this sleep
    const bool polled = q->npolled.load(std::memory_order_acquire) > 0;
    if (polled && (ms < 0 || ms > kEqPolledMs)) ms = kEqPolledMs;
    int n = epoll_wait(q->epfd.fd, evs, 16, ms);
    if (polled) n = eq_add_polled(q, evs, n);
    q->mu.lock();
    q->fd_sleepers--;  // awake: what the sources post needs no eventfd signal
    if (n <= 0) return false;
    {
        unlock_scope<qlock> unlocked(q->mu);  // taken back even if a callback throws
        eq_run_ready(q, evs, n);
    }
    return true;  // the ready sources ran: re-check before sleeping again
}

}  // namespace

ssize_t eq_wait_for(eq* q, size_t threshold, int timeout, uint32_t* event, void* buf, size_t len,
                    uint64_t flags, size_t* nmore, bool ext) {
    deadline dl(timeout);
    evd::unique_lock<qlock> lk(q->mu);
    if (q->closing) return -FI_ECANCELED;
    q->waiters++;
    const uint64_t gen = q->wake_gen;
    ssize_t r;
    bool progressed = false;
    for (;;) {
        if (ready_for(q, threshold)) {
            r = eq_read_locked(q, event, buf, len, flags);
            if (r != -FI_EAGAIN) break;
        }
        if (q->closing) {
            r = -FI_ECANCELED;
            break;
        }
        if (q->wake_gen != gen) {
            r = ext ? -FI_EINTR : -FI_EAGAIN;
            break;
        }
        if (!progressed && poll_first(q, timeout)) {
            lk.unlock();
            eq_run_sources(q);
            lk.lock();
            progressed = true;
            continue;
        }
        struct timespec left;
        if (!dl.left(&left)) {
            r = -FI_EAGAIN;
            break;
        }
        progressed = sleep_once(q, dl, left);
    }
    if (nmore) *nmore = q->count;
    if (--q->waiters == 0 && q->closing) q->waiters.notify_all();  // fi_close waits for it
    return r;
}

int eq_trywait(eq* q) {
    {
        evd::lock_guard lk(q->mu);
        if (q->count || q->overrun) return -FI_EAGAIN;
    }
    eq_run_sources(q);
    evd::lock_guard lk(q->mu);
    if (q->count || q->overrun) return -FI_EAGAIN;
    eq_arm_locked(q);
    return 0;
}

bool eq_has_events(eq* q) {
    {
        evd::lock_guard lk(q->mu);
        if (q->count || q->overrun) return true;
    }
    eq_run_sources(q);
    evd::lock_guard lk(q->mu);
    return q->count || q->overrun;
}

}  // namespace evd
