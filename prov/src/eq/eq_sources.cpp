// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The EQ's event-source multiplexer: the fds that feed an EQ (rdma_cm
// channels, device async fds, timers) sit in its epoll fd, and their
// progress callbacks run, one at a time per source and never under the
// queue lock, from whichever thread reads or waits on the EQ.
#include <sched.h>

#include <cerrno>
#include <cstring>

#include "eq/eq_state.h"
#include "lock.h"

namespace evd {

namespace {

thread_local eq_source* tl_running = nullptr;  // source whose progress runs here

}  // namespace

// Runs the progress callback of each source epoll reported readable
// (evs[0..n)), never under mu.
void eq_run_ready(eq* q, const struct epoll_event* evs, int n) {
    for (int k = 0; k < n; k++) {
        auto* src = static_cast<eq_source*>(evs[k].data.ptr);
        if (!src) continue;  // the eventfd
        {
            evd::lock_guard lk(q->mu);
            eq_source* it = q->sources;
            while (it && it != src) it = it->next;
            if (!it) continue;  // removed meanwhile
            int idle = 0;
            if (!src->busy.compare_exchange_strong(idle, 1, std::memory_order_acquire)) continue;
        }
        eq_source* prev = tl_running;
        tl_running = src;
        src->progress(src);
        tl_running = prev;
        src->busy.store(0, std::memory_order_release);
        src->busy.notify_all();  // eq_remove_source may wait for it
    }
}

int eq_add_polled(eq* q, struct epoll_event* evs, int n) {
    if (n < 0) n = 0;
    if (q->npolled.load(std::memory_order_acquire) == 0) return n;
    evd::lock_guard lk(q->mu);
    const int reported = n;
    for (eq_source* s = q->sources; s && n < reported + kEqMaxPolled; s = s->next) {
        if (!s->polled.load(std::memory_order_relaxed)) continue;
        bool seen = false;
        for (int k = 0; k < reported && !seen; ++k) seen = evs[k].data.ptr == s;
        if (seen) continue;
        evs[n].events = EPOLLIN;
        evs[n].data.ptr = s;
        ++n;
    }
    return n;
}

void eq_source_poll(eq* q, eq_source* src, bool on) {
    if (!q || !src) return;
    if (src->polled.exchange(on, std::memory_order_acq_rel) != on)
        q->npolled.fetch_add(on ? 1 : -1, std::memory_order_acq_rel);
}

void eq_run_sources(eq* q) {
    if (q->nsources.load(std::memory_order_acquire) == 0) return;
    struct epoll_event evs[16 + kEqMaxPolled];
    int n = epoll_wait(q->epfd.fd, evs, 16, 0);
    n = eq_add_polled(q, evs, n);
    eq_run_ready(q, evs, n);
}

int eq_add_source(eq* q, eq_source* src) {
    if (!q || !src || src->fd < 0 || !src->progress) return -FI_EINVAL;
    wake_plan sig;
    {
        evd::lock_guard lk(q->mu);
        for (eq_source* it = q->sources; it; it = it->next)
            if (it == src) return -FI_EALREADY;
        struct epoll_event ev {};
        ev.events = EPOLLIN;
        ev.data.ptr = src;
        if (epoll_ctl(q->epfd.fd, EPOLL_CTL_ADD, src->fd, &ev) != 0) {
            int e = errno;
            EVD_WARN(FI_LOG_EQ, "eq_add_source: epoll_ctl(fd %d): %s\n", src->fd, strerror(e));
            return -e;
        }
        src->busy.store(0, std::memory_order_relaxed);
        src->next = q->sources;
        q->sources = src;
        q->change_index++;
        q->nsources.fetch_add(1, std::memory_order_release);
        // Waiters blocked on the bare eventfd must start watching the epoll fd.
        if (q->waiters > 0) sig = eq_kick_locked(q);
    }
    if (sig) eq_signal(q, sig);
    return 0;
}

void eq_remove_source(eq* q, eq_source* src) {
    if (!q || !src) return;
    {
        evd::lock_guard lk(q->mu);
        eq_source** pp = &q->sources;
        while (*pp && *pp != src) pp = &(*pp)->next;
        if (!*pp) return;
        *pp = src->next;
        src->next = nullptr;
        (void)epoll_ctl(q->epfd.fd, EPOLL_CTL_DEL, src->fd, nullptr);
        if (src->polled.exchange(false, std::memory_order_acq_rel))
            q->npolled.fetch_sub(1, std::memory_order_acq_rel);
        q->change_index++;
        q->nsources.fetch_sub(1, std::memory_order_release);
    }
    if (tl_running == src) {
        EVD_WARN(FI_LOG_EQ, "eq_remove_source called from its own progress callback\n");
        return;
    }
    // Linked sources are claimed under mu; once unlinked only a running
    // callback can remain: wait for it.
    for (int b = src->busy.load(std::memory_order_acquire); b;
         b = src->busy.load(std::memory_order_acquire))
        src->busy.wait(b, std::memory_order_acquire);
}

}  // namespace evd
