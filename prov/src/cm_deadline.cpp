// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Connection-setup deadlines (cm_deadline.h).
#include "cm_deadline.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "probe.h"

namespace evd {

namespace {

using clock = std::chrono::steady_clock;

// Under c->dl_mu: the timer fires at the earliest deadline, or never.
void rearm(cm_chan* c) {
    struct itimerspec its {};
    if (!c->deadlines.empty()) {
        auto first = std::min_element(c->deadlines.begin(), c->deadlines.end(),
                                      [](const auto& a, const auto& b) { return a.at < b.at; });
        // steady_clock is CLOCK_MONOTONIC; a zero it_value would disarm
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      first->at.time_since_epoch())
                      .count();
        its.it_value.tv_sec = ns / 1000000000;
        its.it_value.tv_nsec = ns % 1000000000;
        if (!its.it_value.tv_sec && !its.it_value.tv_nsec) its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(c->timer_fd, TFD_TIMER_ABSTIME, &its, nullptr))
        EVD_WARN(FI_LOG_EP_CTRL, "timerfd_settime: %s\n", strerror(errno));
}

void timer_progress(eq_source* src) {
    auto* c = static_cast<cm_chan*>(src->arg);
    uint64_t ticks;
    while (::read(c->timer_fd, &ticks, sizeof ticks) == static_cast<ssize_t>(sizeof ticks)) {
    }
    // c->mu: an endpoint being closed clears its deadline under it, so every
    // endpoint found here is still open while it is ended
    std::lock_guard chan_lk(c->mu);
    cm_chan::deadline due[16];
    size_t n = 0;
    {
        std::lock_guard lk(c->dl_mu);
        const auto now = clock::now();
        for (auto it = c->deadlines.begin(); it != c->deadlines.end() && n < 16;) {
            if (it->at <= now) {
                due[n++] = *it;
                it = c->deadlines.erase(it);
            } else {
                ++it;
            }
        }
        rearm(c);  // more than 16 due: the timer fires again at once
    }
    for (size_t i = 0; i < n; ++i) {
        if (due[i].probe)
            probe_due(due[i].e);
        else
            ep_setup_timed_out(due[i].e);
    }
}

}  // namespace

int cm_deadline_open(cm_chan* c) {
    c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (c->timer_fd < 0) {
        int err = errno;
        EVD_WARN(FI_LOG_EP_CTRL, "timerfd_create: %s\n", strerror(err));
        return fi_err(err);
    }
    c->timer_src.fd = c->timer_fd;
    c->timer_src.progress = timer_progress;
    c->timer_src.arg = c;
    int ret = eq_add_source(c->q, &c->timer_src);
    if (ret) {
        ::close(c->timer_fd);
        c->timer_fd = -1;
    }
    return ret;
}

void cm_deadline_close(cm_chan* c) {
    if (c->timer_fd < 0) return;
    eq_remove_source(c->q, &c->timer_src);
    ::close(c->timer_fd);
    c->timer_fd = -1;
}

namespace {

void set_deadline(cm_chan* c, ep* e, int ms, bool probe) {
    if (!c || !e || ms <= 0 || c->timer_fd < 0) return;
    std::lock_guard lk(c->dl_mu);
    const auto at = clock::now() + std::chrono::milliseconds(ms);
    auto it = std::find_if(c->deadlines.begin(), c->deadlines.end(),
                           [&](const auto& d) { return d.e == e; });
    if (it != c->deadlines.end())
        *it = {e, at, probe};
    else
        c->deadlines.push_back({e, at, probe});
    rearm(c);
}

void clear_deadline(cm_chan* c, ep* e, bool setup_only) {
    if (!c || !e) return;
    std::lock_guard lk(c->dl_mu);
    auto it = std::find_if(c->deadlines.begin(), c->deadlines.end(), [&](const auto& d) {
        return d.e == e && !(setup_only && d.probe);
    });
    if (it == c->deadlines.end()) return;
    c->deadlines.erase(it);
    rearm(c);
}

}  // namespace

void cm_deadline_set(cm_chan* c, ep* e) {
    set_deadline(c, e, get_params().connect_timeout_ms, false);
}

void cm_deadline_set_probe(cm_chan* c, ep* e, int ms) { set_deadline(c, e, ms, true); }

void cm_deadline_clear(cm_chan* c, ep* e) { clear_deadline(c, e, false); }

void cm_deadline_clear_setup(cm_chan* c, ep* e) { clear_deadline(c, e, true); }

}  // namespace evd
