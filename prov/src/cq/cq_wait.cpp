// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Waiting on a CQ: fi_cq_sread(from), fi_cq_signal, arming its completion
// channel (for counters and wait sets) and fi_trywait.
#include "cq/cq_state.h"

#include <poll.h>
#include <sched.h>

#include <chrono>
#include <cstring>

namespace evd {

// Non-blocking: consume every pending completion-channel event.
void cq_drain_channel(cq* c) {
    if (!c->chan) return;
    evd::lock_guard g(c->chan_mu);
    struct ibv_cq* ev_cq;
    void* ev_ctx;
    unsigned n = 0;
    while (ibv_get_cq_event(c->chan.get(), &ev_cq, &ev_ctx) == 0) ++n;
    if (n) ibv_ack_cq_events(c->ibcq.get(), n);
}

namespace {

// FI_WAIT_YIELD: poll, yielding the CPU between polls, until a completion,
// fi_cq_signal (-FI_EAGAIN) or the timeout (-FI_EAGAIN); no wait fd is involved.
template <class Clock>
ssize_t yield_sread(cq* c, void* buf, size_t count, fi_addr_t* src_addr, int timeout,
                    typename Clock::time_point deadline) {
    for (;;) {
        ssize_t n = cq_do_read(c, buf, count, src_addr);
        if (n != -FI_EAGAIN) return n;
        if (c->yield_signal.exchange(false, std::memory_order_acq_rel)) return -FI_EAGAIN;
        if (timeout >= 0 && Clock::now() >= deadline) return -FI_EAGAIN;
        sched_yield();
    }
}

ssize_t do_sread(cq* c, void* buf, size_t count, fi_addr_t* src_addr, int timeout) {
    if (c->wait_obj == FI_WAIT_NONE) {
        EVD_WARN(FI_LOG_CQ, "fi_cq_sread: the CQ was opened with FI_WAIT_NONE\n");
        return -FI_ENOSYS;
    }
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
    if (c->wait_obj == FI_WAIT_YIELD)
        return yield_sread<clock>(c, buf, count, src_addr, timeout, deadline);
    for (;;) {
        ssize_t n = cq_do_read(c, buf, count, src_addr);
        if (n != -FI_EAGAIN) return n;
        cq_drain_channel(c);
        if (ibv_req_notify_cq(c->ibcq.get(), 0)) {
            EVD_WARN(FI_LOG_CQ, "ibv_req_notify_cq: %s\n", strerror(errno));
            return -FI_EIO;
        }
        n = cq_do_read(c, buf, count, src_addr);  // completions that raced the arm
        if (n != -FI_EAGAIN) return n;
        int wait_ms = -1;
        if (timeout >= 0) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now())
                            .count();
            if (left <= 0) return -FI_EAGAIN;
            wait_ms = static_cast<int>(left);
        }
        struct pollfd pfd[3] = {{c->chan->fd, POLLIN, 0},
                                {c->signal_fd.fd, POLLIN, 0},
                                {c->backlog_fd.fd, POLLIN, 0}};
        int r = ::poll(pfd, 3, wait_ms);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (pfd[1].revents & POLLIN) {
            c->signal_fd.drain();
            return -FI_EAGAIN;  // woken by fi_cq_signal
        }
        if (pfd[2].revents & POLLIN) c->backlog_fd.drain();  // a counter pulled completions
        if (r == 0 && timeout >= 0 && clock::now() >= deadline) return -FI_EAGAIN;
    }
}

}  // namespace

ssize_t cq_sread(struct fid_cq* f, void* buf, size_t count, const void* cond, int timeout) {
    return guard([&]() -> ssize_t {
        cq* c = cq_of(f);
        if (!c) return -FI_EINVAL;
        return do_sread(c, buf, count, nullptr, timeout);
    });
}

ssize_t cq_sreadfrom(struct fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr,
                     const void* cond, int timeout) {
    return guard([&]() -> ssize_t {
        cq* c = cq_of(f);
        if (!c) return -FI_EINVAL;
        return do_sread(c, buf, count, src_addr, timeout);
    });
}

int cq_signal(struct fid_cq* f) {
    return guard([&] {
        cq* c = cq_of(f);
        if (!c) return -FI_EINVAL;
        if (c->wait_obj == FI_WAIT_YIELD) {
            c->yield_signal.store(true, std::memory_order_release);
            return 0;
        }
        if (c->signal_fd.fd < 0) {
            EVD_WARN(FI_LOG_CQ, "fi_cq_signal: the CQ was opened with FI_WAIT_NONE\n");
            return -FI_ENOSYS;
        }
        return c->signal_fd.signal() ? 0 : -errno;
    });
}

int cq_chan_fd(cq* c) { return c && c->chan ? c->chan->fd : -1; }

int cq_arm(cq* c) {
    if (!c || !c->chan) return -1;
    cq_drain_channel(c);
    if (ibv_req_notify_cq(c->ibcq.get(), 0)) {
        EVD_WARN(FI_LOG_CQ, "ibv_req_notify_cq: %s\n", strerror(errno));
        return -1;
    }
    return c->chan->fd;
}

int cq_trywait(cq* c) {
    if (!c) return -FI_EINVAL;
    if (c->chan) {
        cq_drain_channel(c);
        c->signal_fd.drain();
        c->backlog_fd.drain();
        if (ibv_req_notify_cq(c->ibcq.get(), 0)) return -FI_EIO;
    }
    fatal_note notes[kBatch] = {};  // (zeroed: g++ cannot see nnotes guards it)
    size_t nnotes = 0;
    int kept = 0;
    {
        evd::lock_guard g(c->mu);
        if (c->ring_count) return -FI_EAGAIN;
        // peek: anything polled now waits in the ring for the next read
        struct ibv_wc wcs[kBatch];
        int got = ibv_poll_cq(c->ibcq.get(), static_cast<int>(kBatch), wcs);
        for (int i = 0; i < got; ++i) {
            if (!cq_admit(c, wcs[i], notes, nnotes)) continue;
            cq_ring_push(c, wcs[i]);
            ++kept;
        }
    }
    cq_deliver_fatal(c, notes, nnotes);
    return kept ? -FI_EAGAIN : 0;
}

}  // namespace evd
