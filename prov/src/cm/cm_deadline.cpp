// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Connection-setup deadlines (cm_deadline.h).
#include "cm/cm_deadline.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <new>

#include "cm/probe.h"
#include "msg/ep_keepalive.h"
#include "msg/ep_outage.h"

namespace evd {

namespace {

using clock = std::chrono::steady_clock;

void set_deadline(cm_chan* chan, msg_ep* e, int ms, cm_chan::due_kind kind);

// Under chan->dl_mu: the timer fires at the earliest deadline, or never.
void rearm(cm_chan* chan) EVD_REQUIRES(chan->dl_mu) {
    struct itimerspec its {};
    if (!chan->deadlines.empty()) {
        auto first = std::min_element(chan->deadlines.begin(), chan->deadlines.end(),
                                      [](const auto& a, const auto& b) { return a.at < b.at; });
        // steady_clock is CLOCK_MONOTONIC; a zero it_value would disarm
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      first->at.time_since_epoch())
                      .count();
        its.it_value.tv_sec = ns / 1000000000;
        its.it_value.tv_nsec = ns % 1000000000;
        if (!its.it_value.tv_sec && !its.it_value.tv_nsec) its.it_value.tv_nsec = 1;
    }
    // A timer that cannot be armed must not lose a deadline: an outage's
    // step is the resume itself, and nothing else would run it. Until an
    // arming succeeds the timer is polled at every read of the EQ (and a
    // sleeper on it wakes every kEqPolledMs); timer_progress serves what is
    // due whether or not the timer fired.
    if (timerfd_settime(chan->timer.fd, TFD_TIMER_ABSTIME, &its, nullptr)) {
        EVD_WARN(FI_LOG_EP_CTRL,
                 "timerfd_settime: %s: the deadlines of this EQ are served at its reads "
                 "until the timer can be armed\n",
                 strerror(errno));
        eq_source_poll(chan->q, &chan->timer_src, true);
        return;
    }
    eq_source_poll(chan->q, &chan->timer_src, false);
}

void timer_progress(eq_source* src) {
    auto* chan = static_cast<cm_chan*>(src->arg);
    uint64_t ticks;
    while (::read(chan->timer.fd, &ticks, sizeof ticks) == static_cast<ssize_t>(sizeof ticks)) {
    }
    // ids an outage's step let go, destroyed once chan->mu is dropped
    // (declared first: destroyed after the guard below)
    cm_id_ptr dead[16];
    std::vector<cm_id_ptr> graves;
    // chan->mu: an endpoint being closed clears its deadline under it, so every
    // endpoint found here is still open while it is ended
    evd::lock_guard chan_lk(chan->mu);
    cm_chan::deadline due[16];
    size_t n = 0;
    {
        evd::lock_guard lk(chan->dl_mu);
        const auto now = clock::now();
        for (auto it = chan->deadlines.begin(); it != chan->deadlines.end() && n < 16;) {
            if (it->at <= now) {
                due[n++] = *it;
                it = chan->deadlines.erase(it);
            } else {
                ++it;
            }
        }
        rearm(chan);  // more than 16 due: the timer fires again at once
    }
    for (size_t i = 0; i < n; ++i) {
        // A step that failed (out of memory) is not lost: it is due again
        // in 100 ms. The others still run.
        try {
            switch (due[i].kind) {
            case cm_chan::due_kind::probe: probe_due(due[i].e); break;
            case cm_chan::due_kind::setup: ep_setup_timed_out(due[i].e); break;
            case cm_chan::due_kind::outage: dead[i] = ep_outage_tick(due[i].e); break;
            case cm_chan::due_kind::keepalive: ep_keepalive_due(due[i].e); break;
            }
        } catch (const std::exception& x) {
            EVD_WARN(FI_LOG_EP_CTRL, "ep %p: its due step failed (%s): again in 100 ms\n",
                     static_cast<void*>(due[i].e), x.what());
            set_deadline(chan, due[i].e, 100, due[i].kind);
        }
    }
    if (!chan->dead.empty()) graves.swap(chan->dead);
}

}  // namespace

int cm_deadline_reserve(cm_chan* chan, size_t n) {
    evd::lock_guard lk(chan->dl_mu);
    auto& v = chan->deadlines;
    if (v.capacity() >= n) return 0;
    try {
        v.reserve(std::max(n, 2 * v.capacity()));
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_EP_CTRL, "no memory for the deadlines of %zu endpoints\n", n);
        return -FI_ENOMEM;
    }
    return 0;
}

int cm_deadline_open(cm_chan* chan) {
    chan->timer.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (chan->timer.fd < 0) {
        int err = errno;
        EVD_WARN(FI_LOG_EP_CTRL, "timerfd_create: %s\n", strerror(err));
        return fi_err(err);
    }
    chan->timer_src.fd = chan->timer.fd;
    chan->timer_src.progress = timer_progress;
    chan->timer_src.arg = chan;
    int ret = eq_add_source(chan->q, &chan->timer_src);
    if (ret) chan->timer.reset();
    return ret;
}

void cm_deadline_close(cm_chan* chan) {
    if (chan->timer.fd < 0) return;
    eq_remove_source(chan->q, &chan->timer_src);
    chan->timer.reset();
}

namespace {

void set_deadline(cm_chan* chan, msg_ep* e, int ms, cm_chan::due_kind kind) {
    if (!chan || !e || ms <= 0 || chan->timer.fd < 0) return;
    evd::lock_guard lk(chan->dl_mu);
    const auto at = clock::now() + std::chrono::milliseconds(ms);
    auto it = std::find_if(chan->deadlines.begin(), chan->deadlines.end(),
                           [&](const auto& d) { return d.e == e; });
    if (it != chan->deadlines.end()) {
        // an outage's step is never put off by a probe or a setup deadline;
        // a keepalive (set once connected: setup is over) never puts off a
        // probe's or an outage's
        if (it->kind == cm_chan::due_kind::outage && kind != cm_chan::due_kind::outage) return;
        if (kind == cm_chan::due_kind::keepalive && it->kind != kind &&
            it->kind != cm_chan::due_kind::setup)
            return;
        *it = {e, at, kind};
    } else if (chan->deadlines.size() < chan->deadlines.capacity()) {
        chan->deadlines.push_back({e, at, kind});  // within the reserve: no allocation
    } else {
        // cm_deadline_reserve keeps one slot per reference: never reached
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: no room for its deadline (%zu set): not set\n",
                 static_cast<void*>(e), chan->deadlines.size());
        return;
    }
    rearm(chan);
}

void clear_deadline(cm_chan* chan, msg_ep* e, bool setup_only) {
    if (!chan || !e) return;
    evd::lock_guard lk(chan->dl_mu);
    auto it = std::find_if(chan->deadlines.begin(), chan->deadlines.end(), [&](const auto& d) {
        return d.e == e && (!setup_only || d.kind == cm_chan::due_kind::setup);
    });
    if (it == chan->deadlines.end()) return;
    chan->deadlines.erase(it);
    rearm(chan);
}

}  // namespace

void cm_deadline_set(cm_chan* chan, msg_ep* e) {
    set_deadline(chan, e, get_params().connect_timeout_ms, cm_chan::due_kind::setup);
}

void cm_deadline_set_probe(cm_chan* chan, msg_ep* e, int ms) {
    set_deadline(chan, e, ms, cm_chan::due_kind::probe);
}

void cm_deadline_set_outage(cm_chan* chan, msg_ep* e, int ms) {
    set_deadline(chan, e, ms < 1 ? 1 : ms, cm_chan::due_kind::outage);
}

void cm_deadline_set_keepalive(cm_chan* chan, msg_ep* e, int ms) {
    set_deadline(chan, e, ms, cm_chan::due_kind::keepalive);
}

void cm_deadline_clear(cm_chan* chan, msg_ep* e) { clear_deadline(chan, e, false); }

void cm_deadline_clear_setup(cm_chan* chan, msg_ep* e) { clear_deadline(chan, e, true); }

}  // namespace evd
