// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The CQ's read path (fi_cq_read, fi_cq_readfrom, fi_cq_readerr): every
// completion polled is admitted once (counted, hidden or shown), successes
// go to the user's entries, an error and what follows it to the ring.
#include "cq/cq_state.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "cq/cntr.h"
#include "msg/ep.h"
#include "msg/ep_outage.h"
#include "msg/ep_resume.h"

namespace evd {

namespace {

// A datagram receive whose sender was looked up (admit) carries this bit in
// wc_flags and the sender's fi_addr_t in src_qp (UINT32_MAX: not in the AV).
// No ibv_wc_flags value uses it.
constexpr unsigned kWcSource = 1u << 31;

fi_addr_t source_of(const struct ibv_wc& wc) {
    if (!(wc.wc_flags & kWcSource) || wc.src_qp == UINT32_MAX) return FI_ADDR_NOTAVAIL;
    return wc.src_qp;
}

// Writes one successful completion in format F at out, and its source at
// *src when the reader asked (Src: fi_cq_readfrom). A template so that the
// read path's loops choose the format once, not per completion.
template <enum fi_cq_format F, bool Src>
inline __attribute__((always_inline)) void emit_as(const struct ibv_wc& wc, char* out,
                                                   fi_addr_t*& src) {
    if constexpr (Src) *src++ = source_of(wc);
    void* ctx = reinterpret_cast<void*>(wc.wr_id);
    if constexpr (F == FI_CQ_FORMAT_CONTEXT) {
        reinterpret_cast<struct fi_cq_entry*>(out)->op_context = ctx;
    } else if constexpr (F == FI_CQ_FORMAT_MSG) {
        auto* e = reinterpret_cast<struct fi_cq_msg_entry*>(out);
        e->op_context = ctx;
        e->flags = wc_flags(wc);
        e->len = (wc.opcode & IBV_WC_RECV) ? wc.byte_len : 0;
    } else {  // FI_CQ_FORMAT_DATA
        auto* e = reinterpret_cast<struct fi_cq_data_entry*>(out);
        e->op_context = ctx;
        e->flags = wc_flags(wc);
        e->len = (wc.opcode & IBV_WC_RECV) ? wc.byte_len : 0;
        e->buf = nullptr;
        e->data = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
    }
}

// The same in the CQ's format, chosen per call (the general path).
void emit(const cq* c, const struct ibv_wc& wc, char* out, fi_addr_t*& src) {
    const bool s = src != nullptr;
    switch (c->format) {
    case FI_CQ_FORMAT_CONTEXT:
        s ? emit_as<FI_CQ_FORMAT_CONTEXT, true>(wc, out, src)
          : emit_as<FI_CQ_FORMAT_CONTEXT, false>(wc, out, src);
        break;
    case FI_CQ_FORMAT_MSG:
        s ? emit_as<FI_CQ_FORMAT_MSG, true>(wc, out, src)
          : emit_as<FI_CQ_FORMAT_MSG, false>(wc, out, src);
        break;
    default:
        s ? emit_as<FI_CQ_FORMAT_DATA, true>(wc, out, src)
          : emit_as<FI_CQ_FORMAT_DATA, false>(wc, out, src);
        break;
    }
}

}  // namespace

void cq_ring_push(cq* c, const struct ibv_wc& wc) EVD_REQUIRES(c->mu) {
    // never overflows: the read path refills it only when empty, from one
    // batch; counter progress (cq_progress) stops when it is full
    c->ring[(c->ring_head + c->ring_count) % c->ring_cap] = wc;
    ++c->ring_count;
}

// Wakes a reader waiting on the CQ: completions were pulled into the backlog
// by someone other than fi_cq_read (counter progress, the closing flush).
void cq_signal_backlog(cq* c) { c->backlog_fd.signal(); }

// Makes room for `more` entries, keeping their order (fi_close only: the
// closing flush pulls whatever the ibv_cq holds while the user is not reading).
void cq_ring_reserve(cq* c, size_t more) EVD_REQUIRES(c->mu) {
    if (c->ring_cap - c->ring_count >= more) return;
    size_t cap = std::max(c->ring_cap * 2, c->ring_count + more);
    std::unique_ptr<struct ibv_wc[]> r(new struct ibv_wc[cap]);
    for (size_t i = 0; i < c->ring_count; ++i) r[i] = c->ring[(c->ring_head + i) % c->ring_cap];
    c->ring = std::move(r);
    c->ring_cap = cap;
    c->ring_head = 0;
}

namespace {

// Under c->mu, once for every completion polled from the ibv_cq: turns a
// send-queue slot id back into the user's context (or the hidden marker) and
// counts the completion on its endpoint's counters. False: drop it (a slot of
// an endpoint that is gone, or a failure a resumable endpoint holds back:
// the one that starts its outage is noted, for cq_deliver_fatal to tell it).
bool acct(cq* c, struct ibv_wc& wc, fatal_note* notes, size_t& nnotes) EVD_REQUIRES(c->mu) {
    bool slot = is_tx_slot_wr_id(wc.wr_id);
    const bool rs_id = is_rs_wr_id(wc.wr_id);
    if (!slot && !rs_id && c->routes.empty()) return true;
    cntr_route* r = nullptr;
    for (const auto& e : c->routes)
        if (e.qpn == wc.qp_num) {
            r = e.r;
            break;
        }
    bool ok = wc.status == IBV_WC_SUCCESS;
    if (rs_id && (!r || !r->rs)) return false;  // of a resumable endpoint that is gone
    if (r && r->rs) {  // a resumable endpoint: its ledgers hold the contexts
        uint8_t kd = 0;
        bool recv = false;
        switch (rs_complete(*r->rs, wc, &kd, &recv)) {
        case rs_placed::shown: break;
        case rs_placed::outage:
        case rs_placed::held:
        case rs_placed::fatal: {  // told to the endpoint: an outage, or its end
            // noted once per batch (every held one tries, so a full set of
            // notes never leaves an outage without its first step)
            bool noted = false;
            for (size_t i = 0; i < nnotes && !noted; ++i) noted = notes[i].qp_num == wc.qp_num;
            if (!noted && nnotes < kBatch) notes[nnotes++] = {wc.qp_num, wc.status};
            return false;
        }
        case rs_placed::dropped: return false;
        }
        cntr* k = route_cntr(*r, static_cast<tx_kind>(kd), recv);
        if (k) ok ? cntr_inc(k) : cntr_inc_err(k);
        return true;
    }
    if (slot) {
        uint32_t i = tx_slot_index(wc.wr_id);
        if (!r || i >= r->nslots) return false;
        tx_slot& s = r->slots[i];
        cntr* k = route_cntr(*r, s.kind.load(std::memory_order_relaxed), false);
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

}  // namespace

bool cq_admit(cq* c, struct ibv_wc& wc, fatal_note* notes, size_t& nnotes) EVD_REQUIRES(c->mu) {
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
    if (!probe && !acct(c, wc, notes, nnotes)) return false;
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

namespace {

// Neither a marker, a probe, a counter's slot nor a resumable endpoint's
// ledger id (wr_id_suppressed is the caller's to check).
bool users_wr_id(uint64_t wr_id) { return !is_evd_wr_id(wr_id) || wr_id == wr_id_suppressed(); }

// Admits wcs[from, got), polled from the ibv_cq: successes go to out, the
// first error and everything after it to the ring. Fatal errors are noted
// for the terminal event (delivered after the read lock is dropped).
// Returns completions written; clears *more when it stashed.
int take_polled(cq* c, struct ibv_wc* wcs, int from, int got, char*& out, fi_addr_t*& src,
                fatal_note* notes, size_t& nnotes, bool& more) EVD_REQUIRES(c->mu) {
    int written = 0;
    bool stashing = false;
    // No counters, resumable or datagram endpoints here: a success whose
    // wr_id is the user's goes straight out, one evd hid is dropped, as
    // cq_admit would (it would change nothing else for them)
    const bool plain = c->routes.empty() && c->ud.empty();
    for (int i = from; i < got; ++i) {
        struct ibv_wc& wc = wcs[i];
        if (plain && !stashing && wc.status == IBV_WC_SUCCESS && users_wr_id(wc.wr_id)) {
            if (wc.wr_id == wr_id_suppressed()) continue;
            emit(c, wc, out, src);
            out += c->entry_size;
            ++written;
            continue;
        }
        if (!cq_admit(c, wc, notes, nnotes)) continue;
        if (wc.status != IBV_WC_SUCCESS) stashing = true;
        if (stashing) {
            cq_ring_push(c, wc);
            continue;
        }
        emit(c, wc, out, src);
        out += c->entry_size;
        ++written;
    }
    if (stashing) more = false;
    return written;
}

// One ibv_poll_cq of at most `want` (and kBatch) completions into wcs.
// Returns what it returned; *more is set when the batch was full (there may
// be more to poll), cleared otherwise and on an error.
EVD_ALWAYS_INLINE int poll_some(cq* c, size_t want, struct ibv_wc* wcs, bool& more) {
    const size_t ask = std::min(want, kBatch);
    const int got = ibv_poll_cq(c->ibcq.get(), static_cast<int>(ask), wcs);
    more = got > 0 && static_cast<size_t>(got) == ask;
    return got;
}

// Polls one batch of at most `want` completions and admits it
// (take_polled). Returns completions written, or -errno from ibv_poll_cq.
// *more is set when the batch was full (there may be more to poll).
int poll_batch(cq* c, char*& out, fi_addr_t*& src, size_t want, fatal_note* notes, size_t& nnotes,
               bool& more) EVD_REQUIRES(c->mu) {
    struct ibv_wc wcs[kBatch];
    const int got = poll_some(c, want, wcs, more);
    if (got <= 0) return got;
    return take_polled(c, wcs, 0, got, out, src, notes, nnotes, more);
}

// read_plain's loop in format F: writes the user's successes of
// wcs[i, got) straight out and stops at the first completion that is not
// one (i is left there). Returns completions written.
template <enum fi_cq_format F, bool Src>
int plain_run(const struct ibv_wc* wcs, int got, int& i, char*& out, fi_addr_t*& src) {
    constexpr size_t size = F == FI_CQ_FORMAT_CONTEXT ? sizeof(struct fi_cq_entry)
                            : F == FI_CQ_FORMAT_MSG   ? sizeof(struct fi_cq_msg_entry)
                                                      : sizeof(struct fi_cq_data_entry);
    int written = 0;
    for (; i < got; ++i) {
        const struct ibv_wc& wc = wcs[i];
        // one compare for the common case: a success with the user's id
        if (wc.status != IBV_WC_SUCCESS || is_evd_wr_id(wc.wr_id)) {
            if (wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id_suppressed()) continue;
            break;
        }
        emit_as<F, Src>(wc, out, src);
        out += size;
        ++written;
    }
    return written;
}

// The common read, first and short: a plain CQ (no counters, resumable or
// datagram endpoints) with nothing in the ring. One poll; the user's
// successes go straight out, and at the first completion that is not one
// the rest of the batch is admitted as any other (take_polled). Returns
// completions written, or -errno from ibv_poll_cq; *more as poll_batch.
int read_plain(cq* c, char*& out, fi_addr_t*& src, size_t want, fatal_note* notes, size_t& nnotes,
               bool& more) EVD_REQUIRES(c->mu) {
    struct ibv_wc wcs[kBatch];
    const int got = poll_some(c, want, wcs, more);
    if (got <= 0) return got;
    int i = 0;
    int written = 0;
    switch (c->format) {
    case FI_CQ_FORMAT_CONTEXT:
        written = src ? plain_run<FI_CQ_FORMAT_CONTEXT, true>(wcs, got, i, out, src)
                      : plain_run<FI_CQ_FORMAT_CONTEXT, false>(wcs, got, i, out, src);
        break;
    case FI_CQ_FORMAT_MSG:
        written = src ? plain_run<FI_CQ_FORMAT_MSG, true>(wcs, got, i, out, src)
                      : plain_run<FI_CQ_FORMAT_MSG, false>(wcs, got, i, out, src);
        break;
    default:
        written = src ? plain_run<FI_CQ_FORMAT_DATA, true>(wcs, got, i, out, src)
                      : plain_run<FI_CQ_FORMAT_DATA, false>(wcs, got, i, out, src);
        break;
    }
    if (i < got) written += take_polled(c, wcs, i, got, out, src, notes, nnotes, more);
    return written;
}

}  // namespace

void cq_deliver_fatal(cq* c, const fatal_note* notes, size_t n) {
    if (!n) return;
    evd::lock_guard g(c->reg_mu);
    for (size_t i = 0; i < n; ++i) {
        for (auto& [qpn, owner] : c->qps) {
            if (qpn != notes[i].qp_num) continue;
            // a resumable endpoint's outage, begun or under way: no end yet
            if (ep_outage_noted(owner, notes[i].status)) continue;
            const wc_row* r = wc_lookup(notes[i].status);
            ep_terminal_error(owner, r ? r->fi_errno : FI_EOTHER,
                              FI_EVD_PERR(FI_EVD_PERR_WC, notes[i].status),
                              r ? r->name : "unknown ibv_wc_status");
        }
    }
}

ssize_t cq_do_read(cq* c, void* buf, size_t count, fi_addr_t* src_addr) {
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
        bool more = true;
        if (!c->ring_count && c->routes.empty() && c->ud.empty()) {
            // no counters, resumable or datagram endpoints and nothing in
            // the ring: read_plain's polls (a batch that stashed clears
            // more: the ring's head is then an error, for fi_cq_readerr)
            while (n < count && more && !nnotes) {
                int w = read_plain(c, out, src, count - n, notes, nnotes, more);
                if (w < 0) {
                    EVD_WARN(FI_LOG_CQ, "ibv_poll_cq: %s\n", strerror(-w));
                    if (!n) ret = -FI_EIO;
                    break;
                }
                n += static_cast<size_t>(w);
            }
        } else {
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
        }
        if (n == 0 && ret == 0) ret = c->ring_count ? -FI_EAVAIL : -FI_EAGAIN;
    }
    if (nnotes) cq_deliver_fatal(c, notes, nnotes);
    return n ? static_cast<ssize_t>(n) : ret;
}

namespace {

// The rest of cq_read_one after a completion read_one_rest took: the
// terminal events its notes call for, then (again) the general read of one.
__attribute__((noinline)) ssize_t finish_one(cq* c, void* buf, const fatal_note* notes,
                                             size_t nnotes, bool again, ssize_t r) noexcept {
    return guard([&]() -> ssize_t {
        if (nnotes) cq_deliver_fatal(c, notes, nnotes);
        return again ? cq_do_read(c, buf, 1, nullptr) : r;
    });
}

// cq_read_one's completion that is not a plain success, polled under c->mu
// (held on entry, dropped here): admitted as the general read admits it.
// Answers what that read would have: 1 written, -FI_EAVAIL (an error waits
// in the ring) or -FI_EAGAIN; a completion of evd's own, or hidden, is
// followed by the general read of one, as that read would have polled on.
__attribute__((noinline)) ssize_t read_one_rest(cq* c, struct ibv_wc& wc,
                                                void* buf) noexcept EVD_RELEASE(c->mu) {
    fatal_note notes[kBatch];
    size_t nnotes = 0;
    char* out = static_cast<char*>(buf);
    fi_addr_t* src = nullptr;
    bool more = true;  // one asked, one polled: the poll was full
    int w = 0;
    try {
        w = take_polled(c, &wc, 0, 1, out, src, notes, nnotes, more);
    } catch (const std::exception& x) {
        c->mu.unlock();
        EVD_WARN(FI_LOG_CQ, "fi_cq_read: admitting a completion failed (%s)\n", x.what());
        return -FI_EIO;
    }
    const bool again = w == 0 && more && !nnotes;
    const ssize_t r = w ? 1 : c->ring_count ? -FI_EAVAIL : -FI_EAGAIN;
    c->mu.unlock();
    if (!nnotes && !again) return r;
    return finish_one(c, buf, notes, nnotes, again, r);
}

__attribute__((noinline)) ssize_t read_general(cq* c, void* buf, size_t count) noexcept {
    return guard([&]() -> ssize_t { return cq_do_read(c, buf, count, nullptr); });
}

}  // namespace

// The lock is taken and dropped by hand, not by a scope: the rare paths
// (read_one_rest) drop it themselves, so that this one keeps few registers
// and nothing in memory but the polled completion.
ssize_t cq_read_one(cq* c, void* buf) noexcept {
    struct ibv_wc wc;
    c->mu.lock();
    if (c->ring_count || !c->routes.empty() || !c->ud.empty()) [[unlikely]] {
        c->mu.unlock();
        return read_general(c, buf, 1);
    }
    const int got = ibv_poll_cq(c->ibcq.get(), 1, &wc);
    if (got == 1 && wc.status == IBV_WC_SUCCESS && !is_evd_wr_id(wc.wr_id)) [[likely]] {
        char* out = static_cast<char*>(buf);
        fi_addr_t* src = nullptr;
        switch (c->format) {
        case FI_CQ_FORMAT_CONTEXT: emit_as<FI_CQ_FORMAT_CONTEXT, false>(wc, out, src); break;
        case FI_CQ_FORMAT_MSG: emit_as<FI_CQ_FORMAT_MSG, false>(wc, out, src); break;
        default: emit_as<FI_CQ_FORMAT_DATA, false>(wc, out, src); break;
        }
        c->mu.unlock();
        return 1;
    }
    if (got == 0) {
        c->mu.unlock();
        return -FI_EAGAIN;
    }
    if (got < 0) {
        c->mu.unlock();
        EVD_WARN(FI_LOG_CQ, "ibv_poll_cq: %s\n", strerror(-got));
        return -FI_EIO;
    }
    return read_one_rest(c, wc, buf);
}

ssize_t cq_read(struct fid_cq* f, void* buf, size_t count) {
    // one entry, the common read: its own short path (cq_read_one)
    if (count == 1 && buf && f) [[likely]] return cq_read_one(cq_of(f), buf);
    return guard([&]() -> ssize_t {
        cq* c = cq_of(f);
        if (!c) return -FI_EINVAL;
        return cq_do_read(c, buf, count, nullptr);
    });
}

ssize_t cq_readfrom(struct fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr) {
    return guard([&]() -> ssize_t {
        cq* c = cq_of(f);
        if (!c) return -FI_EINVAL;
        return cq_do_read(c, buf, count, src_addr);
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
                    if (cq_admit(c, wcs[i], notes, nnotes)) cq_ring_push(c, wcs[i]);
            }
            if (c->ring_count && c->ring[c->ring_head].status != IBV_WC_SUCCESS) {
                wc = c->ring[c->ring_head];
                c->ring_head = (c->ring_head + 1) % c->ring_cap;
                --c->ring_count;
                have = true;
            }
        }
        cq_deliver_fatal(c, notes, nnotes);
        if (!have) return -FI_EAGAIN;
        buf->op_context = reinterpret_cast<void*>(wc.wr_id);  // cq_admit() let no hidden one in
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

}  // namespace evd
