// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Completion queues (fi_cq(3)) over one ibv_cq each.
//
// fi_cq_read polls the ibv_cq straight into the user's format. A work
// completion in error stops the read: it and whatever was polled after it in
// the same batch wait in a ring (raw ibv_wc) so ordering is kept; read
// answers -FI_EAVAIL while an error is at the head, readerr pops it.
// Counter progress (cntr.cpp) also pulls completions into that ring, so it
// is allocated at fi_cq_open with the CQ's size plus one batch; fi_cq_read
// returns what the ring holds before polling the ibv_cq again.
// Every completion polled, by whoever polls it, is accounted once on its
// endpoint's counters (acct(), cntr.h).
#include "cq/cntr.h"
#include "cq/cq.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "domain.h"
#include "eq/eq.h"
#include "eq/wait.h"
#include "lock.h"
#include "msg/ep.h"
#include "msg/qp_pool.h"
#include "owners.h"

namespace evd {

const uint8_t wr_suppressed = 0;
const uint8_t wr_flush_marker = 0;
const uint8_t wr_probe = 0;

// ---------------------------------------------------------------- the object
namespace {

constexpr size_t kBatch = kCqPollBatch;  // ibv_wc polled per ibv_poll_cq call (stack array)

}  // namespace

struct cq {
    static constexpr kind kTag = kind::cq;
    struct fid_cq fid{{0, nullptr, &unopened_fi_ops}};  // first member
    kind tag = kTag;
    refcount refs;      // endpoints bound
    domain* dom = nullptr;
    enum fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
    size_t entry_size = sizeof(struct fi_cq_entry);
    enum fi_wait_obj wait_obj = FI_WAIT_NONE;
    bool err_data_size_field = true;  // api >= 1.5: fi_cq_err_entry has err_data_size

    comp_channel_ptr chan;
    ibv_cq_ptr ibcq;  // after chan: destroyed first; cq_close releases it itself
    fd_owner signal_fd;             // eventfd written by fi_cq_signal
    std::atomic<bool> yield_signal{false};  // fi_cq_signal on an FI_WAIT_YIELD CQ
    fd_owner wait_fd;               // epoll over chan->fd and signal_fd (FI_GETWAIT)
    mutex chan_mu;                // serializes draining the comp channel

    mutex mu;  // the one lock of the read path: ring + routes + ibv_poll_cq
    // Backlog of polled, already counted completions, in order: one batch
    // stopped by an error, and whatever counter progress pulled before the
    // user read the CQ. ibcq->cqe + kBatch entries, allocated at fi_cq_open.
    std::unique_ptr<struct ibv_wc[]> ring EVD_GUARDED_BY(mu);
    size_t ring_cap = 0;
    size_t ring_head EVD_GUARDED_BY(mu) = 0;
    size_t ring_count EVD_GUARDED_BY(mu) = 0;
    // QP numbers whose flush marker was polled and not yet claimed by the
    // closing endpoint waiting for it (cq_pull_marker).
    std::vector<uint32_t> markers EVD_GUARDED_BY(mu);
    // The same for progress probes that completed (cq_pull_probe).
    std::vector<uint32_t> probes EVD_GUARDED_BY(mu);
    fd_owner backlog_fd;  // eventfd: counter progress filled the backlog (sread)
    bool internal = false;  // an endpoint's private CQ (counter-only direction)

    struct route_ent {
        uint32_t qpn;
        cntr_route* r;
    };
    std::vector<route_ent> routes EVD_GUARDED_BY(mu);  // endpoints with counters
    // Datagram endpoints whose receives complete here (under mu): their
    // completions drop the receive header and may name the sender.
    std::vector<std::pair<uint32_t, ep*>> ud EVD_GUARDED_BY(mu);

    wait_set* wset = nullptr;  // FI_WAIT_SET: the (FD) set this CQ joined
    wait_member wmember;

    mutex reg_mu;  // QP number -> endpoint, for terminal errors
    std::vector<std::pair<uint32_t, ep*>> qps EVD_GUARDED_BY(reg_mu);
};

namespace {

// Every caller is in the CQ's own tables (cq_ops, cq_fi_ops).
cq* cq_of(struct fid_cq* f) { return self_of<cq>(f); }

// A datagram receive whose sender was looked up (admit) carries this bit in
// wc_flags and the sender's fi_addr_t in src_qp (UINT32_MAX: not in the AV).
// No ibv_wc_flags value uses it.
constexpr unsigned kWcSource = 1u << 31;

fi_addr_t source_of(const struct ibv_wc& wc) {
    if (!(wc.wc_flags & kWcSource) || wc.src_qp == UINT32_MAX) return FI_ADDR_NOTAVAIL;
    return wc.src_qp;
}

// Writes one successful completion in the CQ's format at out, and its
// source at *src when the reader asked (fi_cq_readfrom).
void emit(const cq* c, const struct ibv_wc& wc, char* out, fi_addr_t*& src) {
    if (src) *src++ = source_of(wc);
    void* ctx = reinterpret_cast<void*>(wc.wr_id);
    switch (c->format) {
    case FI_CQ_FORMAT_CONTEXT: {
        auto* e = reinterpret_cast<struct fi_cq_entry*>(out);
        e->op_context = ctx;
        break;
    }
    case FI_CQ_FORMAT_MSG: {
        auto* e = reinterpret_cast<struct fi_cq_msg_entry*>(out);
        e->op_context = ctx;
        e->flags = wc_flags(wc);
        e->len = (wc.opcode & IBV_WC_RECV) ? wc.byte_len : 0;
        break;
    }
    default: {  // FI_CQ_FORMAT_DATA
        auto* e = reinterpret_cast<struct fi_cq_data_entry*>(out);
        e->op_context = ctx;
        e->flags = wc_flags(wc);
        e->len = (wc.opcode & IBV_WC_RECV) ? wc.byte_len : 0;
        e->buf = nullptr;
        e->data = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
        break;
    }
    }
}

void ring_push(cq* c, const struct ibv_wc& wc) EVD_REQUIRES(c->mu) {
    // never overflows: the read path refills it only when empty, from one
    // batch; counter progress (cq_progress) stops when it is full
    c->ring[(c->ring_head + c->ring_count) % c->ring_cap] = wc;
    ++c->ring_count;
}

// Wakes a reader waiting on the CQ: completions were pulled into the backlog
// by someone other than fi_cq_read (counter progress, the closing flush).
void signal_backlog(cq* c) { c->backlog_fd.signal(); }

// Makes room for `more` entries, keeping their order (fi_close only: the
// closing flush pulls whatever the ibv_cq holds while the user is not reading).
void ring_reserve(cq* c, size_t more) EVD_REQUIRES(c->mu) {
    if (c->ring_cap - c->ring_count >= more) return;
    size_t cap = std::max(c->ring_cap * 2, c->ring_count + more);
    std::unique_ptr<struct ibv_wc[]> r(new struct ibv_wc[cap]);
    for (size_t i = 0; i < c->ring_count; ++i) r[i] = c->ring[(c->ring_head + i) % c->ring_cap];
    c->ring = std::move(r);
    c->ring_cap = cap;
    c->ring_head = 0;
}

// Under c->mu, once for every completion polled from the ibv_cq: turns a
// send-queue slot id back into the user's context (or the hidden marker) and
// counts the completion on its endpoint's counters. False: drop it (a slot of
// an endpoint that is gone).
bool acct(cq* c, struct ibv_wc& wc) EVD_REQUIRES(c->mu) {
    bool slot = is_tx_slot_wr_id(wc.wr_id);
    if (!slot && c->routes.empty()) return true;
    cntr_route* r = nullptr;
    for (const auto& e : c->routes)
        if (e.qpn == wc.qp_num) {
            r = e.r;
            break;
        }
    bool ok = wc.status == IBV_WC_SUCCESS;
    if (slot) {
        uint32_t i = tx_slot_index(wc.wr_id);
        if (!r || i >= r->nslots) return false;
        tx_slot& s = r->slots[i];
        const tx_kind kd = s.kind.load(std::memory_order_relaxed);
        cntr* k = kd == tx_kind::send ? r->send : kd == tx_kind::read ? r->read : r->write;
        wc.wr_id = s.hidden.load(std::memory_order_relaxed)
                       ? wr_id_suppressed()
                       : reinterpret_cast<uintptr_t>(s.context.load(std::memory_order_relaxed));
        s.busy.store(false, std::memory_order_release);
        if (k) ok ? cntr_inc(k) : cntr_inc_err(k);
        return true;
    }
    // an endpoint with counters posts every send as a slot: this is a receive
    if (r && r->recv) ok ? cntr_inc(r->recv) : cntr_inc_err(r->recv);
    return true;
}

struct fatal_note {
    uint32_t qp_num;
    int status;
};

// Every completion polled from the ibv_cq goes through here once, under
// c->mu: it is counted (acct) and false means nobody is shown it (a slot of
// an endpoint that is gone, a hidden success, a hidden request flushed).
// Errors that leave the QP in error are noted for the endpoint's terminal
// event, delivered by the caller once c->mu is dropped (deliver_fatal).
//
// A request the application gave no context for (fi_inject*, the hidden
// signaled send of selective completion, a counted request it asked no
// completion for) is never shown, not even in error: a CQ error entry whose
// op_context nobody gave is what ofi_rxm and MPI dereference and crash on.
// Such a failure reaches the application as its endpoint's terminal event,
// and through the flush errors of every later request that has a context.
// Notes that a marker or probe of qp_num completed, without throwing (the
// rest of the polled batch must still be admitted): cq_attach_qp reserves the
// room; past it, out of memory drops the note and its waiter ends at its
// deadline.
void note_qp(std::vector<uint32_t>& v, uint32_t qp_num) noexcept {
    try {
        v.push_back(qp_num);
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_CQ, "QP %u: out of memory noting its flush marker or probe\n", qp_num);
    }
}

bool admit(cq* c, struct ibv_wc& wc, fatal_note* notes, size_t& nnotes) EVD_REQUIRES(c->mu) {
    if (wc.wr_id == wr_id_flush_marker()) {
        note_qp(c->markers, wc.qp_num);
        return false;
    }
    // a datagram endpoint's: its receives' slots, headers and senders
    if (!c->ud.empty()) {
        for (const auto& [qpn, owner] : c->ud) {
            if (qpn != wc.qp_num) continue;
            fi_addr_t from = FI_ADDR_NOTAVAIL;
            if (ep_ud_completion(owner, wc, &from)) {
                wc.wc_flags |= kWcSource;
                wc.src_qp = from == FI_ADDR_NOTAVAIL ? UINT32_MAX : static_cast<uint32_t>(from);
            }
            break;
        }
    }
    const bool probe = wc.wr_id == wr_id_probe();
    if (probe && wc.status == IBV_WC_SUCCESS) {
        note_qp(c->probes, wc.qp_num);
        return false;
    }
    // a probe that failed is an evd request that failed: hidden, terminal
    if (!probe && !acct(c, wc)) return false;
    const bool hidden = probe || wc.wr_id == wr_id_suppressed();
    if (wc.status == IBV_WC_SUCCESS) return !hidden;
    const wc_row* r = wc_lookup(wc.status);
    // every error but a flush leaves an RC QP in error; a hidden one is
    // reported through the terminal event whatever its status
    if (!r || r->qp_fatal || (hidden && wc.status != IBV_WC_WR_FLUSH_ERR)) {
        bool noted = false;
        for (size_t i = 0; i < nnotes && !noted; ++i) noted = notes[i].qp_num == wc.qp_num;
        if (!noted && nnotes < kBatch) notes[nnotes++] = {wc.qp_num, wc.status};
    }
    return !hidden;
}

// Polls one batch of at most `want` completions. Successes go to out (up to
// `want`), the first error and everything after it to the ring. Fatal errors
// are noted for the terminal event (delivered after the read lock is dropped).
// Returns completions written, or -errno from ibv_poll_cq. *more is set when
// the batch was full (there may be more to poll).
int poll_batch(cq* c, char*& out, fi_addr_t*& src, size_t want, fatal_note* notes, size_t& nnotes,
               bool& more) EVD_REQUIRES(c->mu) {
    struct ibv_wc wcs[kBatch];
    int got = ibv_poll_cq(c->ibcq.get(), static_cast<int>(std::min(want, kBatch)), wcs);
    more = false;
    if (got < 0) return got;
    more = static_cast<size_t>(got) == std::min(want, kBatch);
    int written = 0;
    bool stashing = false;
    for (int i = 0; i < got; ++i) {
        struct ibv_wc& wc = wcs[i];
        if (!admit(c, wc, notes, nnotes)) continue;
        if (wc.status != IBV_WC_SUCCESS) stashing = true;
        if (stashing) {
            ring_push(c, wc);
            continue;
        }
        emit(c, wc, out, src);
        out += c->entry_size;
        ++written;
    }
    if (stashing) more = false;
    return written;
}

void deliver_fatal(cq* c, const fatal_note* notes, size_t n) {
    if (!n) return;
    evd::lock_guard g(c->reg_mu);
    for (size_t i = 0; i < n; ++i) {
        for (auto& [qpn, owner] : c->qps) {
            if (qpn != notes[i].qp_num) continue;
            const wc_row* r = wc_lookup(notes[i].status);
            ep_terminal_error(owner, r ? r->fi_errno : FI_EOTHER,
                              FI_EVD_PERR(FI_EVD_PERR_WC, notes[i].status),
                              r ? r->name : "unknown ibv_wc_status");
        }
    }
}

ssize_t do_read(cq* c, void* buf, size_t count, fi_addr_t* src_addr) {
    if (count == 0) return 0;
    if (!buf) {
        EVD_WARN(FI_LOG_CQ, "fi_cq_read: buf is NULL with count %zu\n", count);
        return -FI_EINVAL;
    }
    char* out = static_cast<char*>(buf);
    fi_addr_t* src = src_addr;
    size_t n = 0;
    fatal_note notes[kBatch];
    size_t nnotes = 0;
    ssize_t ret = 0;
    {
        evd::lock_guard g(c->mu);
        while (n < count && c->ring_count) {
            const struct ibv_wc& wc = c->ring[c->ring_head];
            if (wc.status != IBV_WC_SUCCESS) break;
            if (wc.wr_id != wr_id_suppressed()) {
                emit(c, wc, out, src);
                out += c->entry_size;
                ++n;
            }
            c->ring_head = (c->ring_head + 1) % c->ring_cap;
            --c->ring_count;
        }
        if (!c->ring_count) {
            // stops after a batch that ended an endpoint, so its terminal
            // event goes out now and notes never outgrow one batch
            bool more = true;
            while (n < count && more && !nnotes) {
                int w = poll_batch(c, out, src, count - n, notes, nnotes, more);
                if (w < 0) {
                    EVD_WARN(FI_LOG_CQ, "ibv_poll_cq: %s\n", strerror(-w));
                    if (!n) ret = -FI_EIO;
                    break;
                }
                n += static_cast<size_t>(w);
            }
        }
        if (n == 0 && ret == 0) ret = c->ring_count ? -FI_EAVAIL : -FI_EAGAIN;
    }
    deliver_fatal(c, notes, nnotes);
    return n ? static_cast<ssize_t>(n) : ret;
}

ssize_t cq_read(struct fid_cq* f, void* buf, size_t count) {
    return guard([&]() -> ssize_t {
        cq* c = cq_of(f);
        if (!c) return -FI_EINVAL;
        return do_read(c, buf, count, nullptr);
    });
}

ssize_t cq_readfrom(struct fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr) {
    return guard([&]() -> ssize_t {
        cq* c = cq_of(f);
        if (!c) return -FI_EINVAL;
        return do_read(c, buf, count, src_addr);
    });
}

ssize_t cq_readerr(struct fid_cq* f, struct fi_cq_err_entry* buf, uint64_t flags) {
    return guard([&]() -> ssize_t {
        cq* c = cq_of(f);
        if (!c || !buf) {
            EVD_WARN(FI_LOG_CQ, "fi_cq_readerr: invalid CQ or NULL buffer\n");
            return -FI_EINVAL;
        }
        fatal_note notes[kBatch];
        size_t nnotes = 0;
        struct ibv_wc wc {};
        bool have = false;
        {
            evd::lock_guard g(c->mu);
            if (!c->ring_count) {
                // look for an error the user has not been told about yet
                struct ibv_wc wcs[kBatch];
                int got = ibv_poll_cq(c->ibcq.get(), static_cast<int>(kBatch), wcs);
                for (int i = 0; i < got; ++i)
                    if (admit(c, wcs[i], notes, nnotes)) ring_push(c, wcs[i]);
            }
            if (c->ring_count && c->ring[c->ring_head].status != IBV_WC_SUCCESS) {
                wc = c->ring[c->ring_head];
                c->ring_head = (c->ring_head + 1) % c->ring_cap;
                --c->ring_count;
                have = true;
            }
        }
        deliver_fatal(c, notes, nnotes);
        if (!have) return -FI_EAGAIN;
        buf->op_context = reinterpret_cast<void*>(wc.wr_id);  // admit() let no hidden one in
        buf->flags = 0;  // the opcode of an error completion is undefined
        buf->len = 0;
        buf->buf = nullptr;
        buf->data = 0;
        buf->tag = 0;
        buf->olen = 0;
        buf->err = wc_fi_errno(wc.status);
        buf->prov_errno = wc.status;
        buf->err_data = nullptr;
        if (c->err_data_size_field) buf->err_data_size = 0;
        // src_addr (API 1.20) is never written: evd has no FI_SOURCE_ERR, and
        // a caller of an older API has a struct that ends before it
        return 1;
    });
}

// Non-blocking: consume every pending completion-channel event.
void drain_channel(cq* c) {
    if (!c->chan) return;
    evd::lock_guard g(c->chan_mu);
    struct ibv_cq* ev_cq;
    void* ev_ctx;
    unsigned n = 0;
    while (ibv_get_cq_event(c->chan.get(), &ev_cq, &ev_ctx) == 0) ++n;
    if (n) ibv_ack_cq_events(c->ibcq.get(), n);
}


// FI_WAIT_YIELD: poll, yielding the CPU between polls, until a completion,
// fi_cq_signal (-FI_EAGAIN) or the timeout (-FI_EAGAIN); no wait fd is involved.
template <class Clock>
ssize_t yield_sread(cq* c, void* buf, size_t count, fi_addr_t* src_addr, int timeout,
                    typename Clock::time_point deadline) {
    for (;;) {
        ssize_t n = do_read(c, buf, count, src_addr);
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
        ssize_t n = do_read(c, buf, count, src_addr);
        if (n != -FI_EAGAIN) return n;
        drain_channel(c);
        if (ibv_req_notify_cq(c->ibcq.get(), 0)) {
            EVD_WARN(FI_LOG_CQ, "ibv_req_notify_cq: %s\n", strerror(errno));
            return -FI_EIO;
        }
        n = do_read(c, buf, count, src_addr);  // completions that raced the arm
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

const char* cq_strerror(struct fid_cq*, int prov_errno, const void*, char* buf, size_t len) {
    return wc_error_text(prov_errno, buf, len);
}

eq* cq_route(void* owner) { return static_cast<cq*>(owner)->dom->eq_bound.load(); }

async_target cq_target(cq* c) {
    async_target t;
    t.fid = &c->fid.fid;
    t.context = c->fid.fid.context;
    t.route = cq_route;
    t.owner = c;
    return t;
}

int cq_close(struct fid* f) {
    return guard([&] {
        cq* c = cq_of(reinterpret_cast<struct fid_cq*>(f));
        if (!c) return -FI_EINVAL;
        if (c->refs.busy()) {
            EVD_WARN(FI_LOG_CQ, "fi_close(cq): %d endpoints still bound\n", c->refs.n.load());
            return -FI_EBUSY;
        }
        if (c->wset) {
            wait_set_del(c->wset, &c->wmember);
            c->wset = nullptr;
        }
        devctx_unregister(c->dom->dev, &devctx::cqs, c->ibcq.get());
        drain_channel(c);
        qp_pool_purge_cq(c->ibcq.get());  // kept QPs still hold the CQ
        if (int e = release_with(c->ibcq, ibv_destroy_cq)) {
            EVD_WARN(FI_LOG_CQ, "ibv_destroy_cq: %s\n", strerror(e));
            devctx_register(c->dom->dev, &devctx::cqs, c->ibcq.get(), cq_target(c));
            return fi_err(e);
        }
        domain* dom = c->dom;
        c->tag = kind{0};
        delete c;
        dom->refs.put();
        return 0;
    });
}

int cq_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        cq* c = cq_of(reinterpret_cast<struct fid_cq*>(f));
        if (!c) return -FI_EINVAL;
        switch (command) {
        case FI_GETWAIT:
        case FI_GETWAITOBJ:
            return control_wait_fd(command, arg, c->wait_fd.fd, c->wait_obj, FI_LOG_CQ, "CQ");
        case kCtrlTrywait:
            return cq_trywait(c);
        default:
            EVD_WARN(FI_LOG_CQ, "fi_control(CQ): command %d not supported\n", command);
            return -FI_ENOSYS;
        }
    });
}

// Ops tables (defined at the end of the file).
extern struct fi_ops cq_fi_ops;
extern struct fi_ops_cq cq_ops;

}  // namespace

// ---------------------------------------------------------------- contract
cq* cq_from_fid(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_CQ) return nullptr;
    return from_fid<cq>(reinterpret_cast<struct fid_cq*>(f));
}
struct ibv_cq* cq_ibv(cq* c) { return c ? c->ibcq.get() : nullptr; }
struct fid_domain* cq_domain(cq* c) { return c ? &c->dom->fid : nullptr; }
void cq_bind_ref(cq* c) { c->refs.get(); }
void cq_bind_unref(cq* c) {
    if (c->refs.n.fetch_sub(1, std::memory_order_acq_rel) == 1 && c->internal) {
        int r = cq_close(&c->fid.fid);  // the endpoint's private CQ: its QP is gone
        if (r) EVD_WARN(FI_LOG_CQ, "closing an endpoint's internal CQ: %d\n", r);
    }
}

namespace {
// The counters of route r whose completions land in c (per direction).
template <class F>
void for_cntrs(cq* c, ep* owner, cntr_route* r, F&& f) {
    if (c == owner->tx_cq)
        for (cntr* k : {r->send, r->read, r->write})
            if (k) f(k);
    if (c == owner->rx_cq && r->recv) f(r->recv);
}
}  // namespace

int cq_attach_qp(cq* c, uint32_t qp_num, ep* owner) {
    return guard([&] {
        size_t n = 0;
        {
            evd::lock_guard g(c->reg_mu);
            n = c->qps.size() + 1;
        }
        {  // room for each QP's flush markers (send and receive, when the QP
           // has this CQ for both) and probe (admit does not allocate)
            evd::lock_guard g(c->mu);
            c->markers.reserve(2 * n);
            c->probes.reserve(n);
        }
        {
            evd::lock_guard g(c->reg_mu);
            c->qps.emplace_back(qp_num, owner);
        }
        if (owner->dgram && c == owner->rx_cq) {
            evd::lock_guard g(c->mu);
            c->ud.emplace_back(qp_num, owner);
        }
        cntr_route* r = ep_data_route(owner);
        if (!r) return 0;
        {
            evd::lock_guard g(c->mu);
            c->routes.push_back({qp_num, r});
        }
        int ret = 0;
        for_cntrs(c, owner, r, [&](cntr* k) {
            if (!ret) ret = cntr_add_source(k, c);
        });
        return ret;
    });
}

void cq_detach_qp(cq* c, uint32_t qp_num) {
    ep* owner = nullptr;
    {
        evd::lock_guard g(c->reg_mu);
        for (auto& [qpn, o] : c->qps)
            if (qpn == qp_num) owner = o;
        std::erase_if(c->qps, [&](const auto& p) { return p.first == qp_num; });
    }
    cntr_route* r = nullptr;
    {
        evd::lock_guard g(c->mu);
        for (auto& e : c->routes)
            if (e.qpn == qp_num) r = e.r;
        std::erase_if(c->routes, [&](const auto& e) { return e.qpn == qp_num; });
        std::erase_if(c->ud, [&](const auto& e) { return e.first == qp_num; });
        // a later QP may get the same number
        std::erase(c->markers, qp_num);
        std::erase(c->probes, qp_num);
    }
    if (r && owner) for_cntrs(c, owner, r, [&](cntr* k) { cntr_del_source(k, c); });
}

int cq_progress(cq* c) {
    fatal_note notes[kBatch];
    size_t nnotes = 0;
    int pulled = 0, ret = 0, pushed = 0;
    {
        evd::lock_guard g(c->mu);
        // bounded: at most one CQ's worth per call
        for (size_t rounds = c->ring_cap / kBatch + 1; rounds; --rounds) {
            size_t room = c->internal ? kBatch : c->ring_cap - c->ring_count;
            if (!room) break;
            int want = static_cast<int>(std::min(room, kBatch));
            struct ibv_wc wcs[kBatch];
            int got = ibv_poll_cq(c->ibcq.get(), want, wcs);
            if (got < 0) {
                ret = -FI_EIO;
                break;
            }
            for (int i = 0; i < got; ++i) {
                if (!admit(c, wcs[i], notes, nnotes)) continue;
                if (c->internal) continue;  // nobody reads it: counted is all
                ring_push(c, wcs[i]);
                ++pushed;
            }
            pulled += got;
            if (got < want || nnotes) break;
        }
    }
    if (pushed) signal_backlog(c);
    deliver_fatal(c, notes, nnotes);
    return ret ? ret : pulled;
}

namespace {

// cq_pull_marker and cq_pull_probe: pulls until qp_num is found in `seen`.
int pull_until(cq* c, std::vector<uint32_t> cq::*seen, uint32_t qp_num) {
    fatal_note notes[kBatch] = {};
    size_t nnotes = 0;
    int ret = 0, pushed = 0;
    {
        evd::lock_guard g(c->mu);
        for (;;) {
            auto it = std::find((c->*seen).begin(), (c->*seen).end(), qp_num);
            if (it != (c->*seen).end()) {
                (c->*seen).erase(it);
                ret = 1;
                break;
            }
            if (nnotes) break;  // deliver that terminal event before pulling on
            ring_reserve(c, kBatch);
            struct ibv_wc wcs[kBatch];
            int got = ibv_poll_cq(c->ibcq.get(), static_cast<int>(kBatch), wcs);
            if (got < 0) {
                ret = -FI_EIO;
                break;
            }
            for (int i = 0; i < got; ++i) {
                if (!admit(c, wcs[i], notes, nnotes) || c->internal) continue;
                ring_push(c, wcs[i]);
                ++pushed;
            }
            if (!got) break;
        }
    }
    if (pushed) signal_backlog(c);
    deliver_fatal(c, notes, nnotes);
    return ret;
}

}  // namespace

int cq_pull_marker(cq* c, uint32_t qp_num) { return pull_until(c, &cq::markers, qp_num); }

int cq_pull_probe(cq* c, uint32_t qp_num) { return pull_until(c, &cq::probes, qp_num); }

int cq_chan_fd(cq* c) { return c && c->chan ? c->chan->fd : -1; }

int cq_arm(cq* c) {
    if (!c || !c->chan) return -1;
    drain_channel(c);
    if (ibv_req_notify_cq(c->ibcq.get(), 0)) {
        EVD_WARN(FI_LOG_CQ, "ibv_req_notify_cq: %s\n", strerror(errno));
        return -1;
    }
    return c->chan->fd;
}

int cq_open_internal(struct fid_domain* dom, size_t size, cq** out) {
    struct fi_cq_attr a {};
    a.size = size;
    a.format = FI_CQ_FORMAT_CONTEXT;
    a.wait_obj = FI_WAIT_FD;
    struct fid_cq* f = nullptr;
    int r = cq_open(dom, &a, &f, nullptr);
    if (r) return r;
    cq* c = cq_from_fid(&f->fid);
    c->internal = true;
    *out = c;
    return 0;
}

int cq_trywait(cq* c) {
    if (!c) return -FI_EINVAL;
    if (c->chan) {
        drain_channel(c);
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
            if (!admit(c, wcs[i], notes, nnotes)) continue;
            ring_push(c, wcs[i]);
            ++kept;
        }
    }
    deliver_fatal(c, notes, nnotes);
    return kept ? -FI_EAGAIN : 0;
}

namespace {

// fi_cq_attr.format -> the entry layout fi_cq_read writes.
int take_format(cq* c, const struct fi_cq_attr* attr) {
    switch (attr->format) {
    case FI_CQ_FORMAT_UNSPEC:
    case FI_CQ_FORMAT_CONTEXT:
        c->format = FI_CQ_FORMAT_CONTEXT;
        c->entry_size = sizeof(struct fi_cq_entry);
        break;
    case FI_CQ_FORMAT_MSG:
        c->format = FI_CQ_FORMAT_MSG;
        c->entry_size = sizeof(struct fi_cq_msg_entry);
        break;
    case FI_CQ_FORMAT_DATA:
        c->format = FI_CQ_FORMAT_DATA;
        c->entry_size = sizeof(struct fi_cq_data_entry);
        break;
    default:
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: format %d not supported (CONTEXT, MSG, DATA; "
                            "evd has no tagged messages)\n", attr->format);
        return -FI_ENOSYS;
    }
    return 0;
}

// fi_cq_attr.wait_obj -> how fi_cq_sread waits (and the wait set joined).
int take_wait_obj(cq* c, const struct fi_cq_attr* attr) {
    switch (attr->wait_obj) {
    case FI_WAIT_NONE:
        c->wait_obj = FI_WAIT_NONE;
        break;
    case FI_WAIT_UNSPEC:
    case FI_WAIT_FD:
        c->wait_obj = FI_WAIT_FD;
        break;
    case FI_WAIT_YIELD:  // fi_cq_sread polls and yields; no wait fd
        c->wait_obj = FI_WAIT_YIELD;
        break;
    case FI_WAIT_SET:
        if (int r = member_wait_set(attr->wait_set, FI_LOG_CQ, "fi_cq_open", "a CQ", &c->wset))
            return r;
        c->wait_obj = FI_WAIT_SET;
        break;
    default:
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: wait object %d not supported (NONE, UNSPEC, FD, "
                            "YIELD, FD wait sets)\n",
                 attr->wait_obj);
        return -FI_ENOSYS;
    }
    return 0;
}

// Every CQ has a completion channel, also FI_WAIT_NONE and YIELD ones (not
// exported): a counter counting this CQ's completions sleeps on it instead
// of polling. A CQ with a wait fd also gets its signal and backlog eventfds
// and the epoll fd over all three that FI_GETWAIT exports.
int open_wait_fds(cq* c, struct ibv_context* verbs) {
    c->chan.reset(ibv_create_comp_channel(verbs));
    if (!c->chan) {
        int e = errno;
        EVD_WARN(FI_LOG_CQ, "ibv_create_comp_channel: %s\n", strerror(e));
        return fi_err(e);
    }
    int fl = fcntl(c->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(c->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    if (c->wait_obj != FI_WAIT_NONE && c->wait_obj != FI_WAIT_YIELD) {
        c->signal_fd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->signal_fd.fd < 0) return -errno;
        c->backlog_fd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->backlog_fd.fd < 0) return -errno;
        c->wait_fd.fd = epoll_create1(EPOLL_CLOEXEC);
        if (c->wait_fd.fd < 0) return -errno;
        struct epoll_event ev {};
        ev.events = EPOLLIN;
        for (int fd : {c->chan->fd, c->signal_fd.fd, c->backlog_fd.fd}) {
            ev.data.fd = fd;
            if (epoll_ctl(c->wait_fd.fd, EPOLL_CTL_ADD, fd, &ev)) return -errno;
        }
    }
    return 0;
}

}  // namespace

namespace {

int check_cond_flags(const struct fi_cq_attr* attr) {
    if (attr->wait_cond != FI_CQ_COND_NONE && attr->wait_cond != FI_CQ_COND_THRESHOLD) {
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: wait_cond %d not supported\n", attr->wait_cond);
        return -FI_ENOSYS;
    }
    if (attr->flags & ~static_cast<uint64_t>(FI_AFFINITY)) {
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: unsupported flags 0x%llx\n",
                 static_cast<unsigned long long>(attr->flags));
        return -FI_EBADFLAGS;
    }
    return 0;
}

// The ibv_cq: attr's size (or FI_EVD_CQ_SIZE) within the device's max_cqe,
// on the completion vector FI_AFFINITY names when the device has it.
int create_ibcq(cq* c, domain* dom, const struct fi_cq_attr& attr) {
    struct ibv_context* verbs = dom->dev->ctx.get();
    size_t max_cqe = static_cast<size_t>(dom->dev->attr.orig_attr.max_cqe);
    size_t size = attr.size ? attr.size : get_params().cq_size;
    if (max_cqe && size > max_cqe) {
        EVD_INFO(FI_LOG_CQ, "fi_cq_open: size %zu clamped to the device's %zu\n", size, max_cqe);
        size = max_cqe;
    }
    int vector = 0;
    if ((attr.flags & FI_AFFINITY) && attr.signaling_vector >= 0 &&
        attr.signaling_vector < verbs->num_comp_vectors)
        vector = attr.signaling_vector;
    c->ibcq.reset(ibv_create_cq(verbs, static_cast<int>(size), c, c->chan.get(), vector));
    if (!c->ibcq) {
        int e = errno;
        EVD_WARN(FI_LOG_CQ, "ibv_create_cq(%zu entries): %s\n", size, strerror(e));
        return fi_err(e);
    }
    return 0;
}

int join_wait_set(cq* c) {
    c->wmember.fid = &c->fid.fid;
    c->wmember.fd = c->wait_fd.fd;
    c->wmember.trywait = [](wait_member* m) { return cq_trywait(cq_from_fid(m->fid)); };
    if (int r = wait_set_add(c->wset, &c->wmember)) {
        c->wset = nullptr;
        return r;
    }
    return 0;
}

}  // namespace

int cq_open(struct fid_domain* dom_fid, struct fi_cq_attr* attr, struct fid_cq** out,
            void* context) {
    return guard([&] {
        domain* dom = domain_from_fid(dom_fid);
        if (!dom || !attr || !out) {
            EVD_WARN(FI_LOG_CQ, "fi_cq_open: invalid domain, or NULL attr/cq\n");
            return -FI_EINVAL;
        }
        auto c = std::make_unique<cq>();
        if (int r = take_format(c.get(), attr)) return r;
        if (int r = take_wait_obj(c.get(), attr)) return r;
        if (int r = check_cond_flags(attr)) return r;
        struct ibv_context* verbs = dom->dev->ctx.get();
        if (int r = open_wait_fds(c.get(), verbs)) return r;
        if (int r = create_ibcq(c.get(), dom, *attr)) return r;
        c->ring_cap = static_cast<size_t>(c->ibcq->cqe) + kBatch;
        {
            evd::lock_guard lk(c->mu);  // c is not published yet; for the analysis
            c->ring.reset(new (std::nothrow) struct ibv_wc[c->ring_cap]);
            if (!c->ring) return -FI_ENOMEM;
        }
        c->dom = dom;
        if (dom->info && dom->info->fabric_attr)
            c->err_data_size_field = api::has_1_5(dom->info->fabric_attr->api_version);
        c->fid.fid.fclass = FI_CLASS_CQ;
        c->fid.fid.context = context;
        c->fid.fid.ops = &cq_fi_ops;
        c->fid.ops = &cq_ops;
        attr->size = static_cast<size_t>(c->ibcq->cqe);
        devctx_register(dom->dev, &devctx::cqs, c->ibcq.get(), cq_target(c.get()));
        undo_on_exit registered([&] { devctx_unregister(dom->dev, &devctx::cqs, c->ibcq.get()); });
        if (c->wset)
            if (int r = join_wait_set(c.get())) return r;
        registered.dismiss();
        dom->refs.get();
        *out = &c.release()->fid;
        return 0;
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops cq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cq_close,
    .bind = op_no_bind,
    .control = cq_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq),
    .read = cq_read,
    .readfrom = cq_readfrom,
    .readerr = cq_readerr,
    .sread = cq_sread,
    .sreadfrom = cq_sreadfrom,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

}  // namespace

}  // namespace evd
