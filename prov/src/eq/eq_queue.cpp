// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The EQ's queue and what the provider posts to it (eq_post, eq_post_err,
// eq_forget_fid); the entry points that read it are eq.cpp.
//
// Storage: `cap` fixed slots allocated at open (header + kEqInline bytes
// inline), an order ring of slot indices (FIFO, with removal in the middle
// for out-of-band errors), and a pool of `nbig` chunks of eq_max_write bytes
// for larger payloads. Steady state allocates nothing.
//
// Ordering: normal events leave in arrival order. An error entry is "ready"
// when no earlier normal event of the same source (fid) is queued; while one
// is ready fi_eq_read answers -FI_EAVAIL and fi_eq_readerr returns the oldest
// ready error. So errors are reported out of band as fi_eq(3) says, yet per
// fid nothing ever overtakes anything (the oldest normal event never has an
// earlier error of its fid, because that error would be ready).
//
// The sources that feed it are multiplexed in eq_sources.cpp; how readers
// block and producers wake them is eq_wait.cpp.
#include "eq/eq.h"

#include <algorithm>
#include <cstring>

#include "eq/eq_state.h"
#include "lock.h"

namespace evd {

// ------------------------------------------------------------------ queue (mu held)

int eq_push_locked(eq* q, size_t limit, uint32_t event, const struct fi_eq_err_entry* err,
                const void* data, size_t len) EVD_REQUIRES(q->mu) {
    if (q->count >= limit || q->nfree == 0) return -FI_EOVERRUN;
    uint32_t big = kNoBig;
    if (len > kEqInline) {
        if (q->nbigfree == 0) return -FI_EOVERRUN;
        big = q->bigfree[--q->nbigfree];
    }
    uint32_t i = q->freel[--q->nfree];
    eq_slot& s = q->slots[i];
    s.event = event;
    s.len = static_cast<uint32_t>(len);
    s.big = big;
    s.is_err = err != nullptr;
    if (err) {
        s.err = *err;
        s.err.err_data = nullptr;
        s.err.err_data_size = 0;
        s.src = err->fid;
    } else if (len >= sizeof(fid_t)) {
        std::memcpy(&s.src, data, sizeof(fid_t));
    } else {
        s.src = nullptr;
    }
    if (len) std::memcpy(q->payload(s), data, len);
    q->order[q->wrap(q->head + q->count)] = i;
    q->count++;
    if (err) q->nerr++;
    return 0;
}

namespace {

void remove_locked(eq* q, size_t pos) EVD_REQUIRES(q->mu) {
    uint32_t i = q->order[q->wrap(q->head + pos)];
    eq_slot& s = q->slots[i];
    if (s.big != kNoBig) q->bigfree[q->nbigfree++] = s.big;
    if (s.is_err) q->nerr--;
    q->freel[q->nfree++] = i;
    if (pos == 0) {
        q->head = q->wrap(q->head + 1);
    } else {
        for (size_t k = pos; k + 1 < q->count; k++)
            q->order[q->wrap(q->head + k)] = q->order[q->wrap(q->head + k + 1)];
    }
    q->count--;
}

}  // namespace

long eq_ready_err_locked(eq* q) {
    if (q->nerr == 0) return -1;
    for (size_t p = 0; p < q->count; p++) {
        eq_slot& s = q->at(p);
        if (!s.is_err) continue;
        bool blocked = false;
        for (size_t j = 0; j < p && !blocked; j++) {
            eq_slot& t = q->at(j);
            blocked = !t.is_err && t.src == s.src;
        }
        if (!blocked) return static_cast<long>(p);
    }
    return -1;
}

ssize_t eq_read_locked(eq* q, uint32_t* event, void* buf, size_t len, uint64_t flags) {
    if (q->count == 0) return q->overrun ? -FI_EAVAIL : -FI_EAGAIN;
    if (q->nerr && eq_ready_err_locked(q) >= 0) return -FI_EAVAIL;
    // a normal event: an error at the head is always ready
    const uint32_t i = q->order[q->head];
    eq_slot& s = q->slots[i];
    if (len < s.len) return -FI_ETOOSMALL;
    if (s.len) std::memcpy(buf, q->payload(s), s.len);
    *event = s.event;
    const ssize_t n = s.len;
    if (flags & FI_PEEK) return n;
    // remove_locked(q, 0), with what is known here: slot i, not an error
    if (s.big != kNoBig) q->bigfree[q->nbigfree++] = s.big;
    q->freel[q->nfree++] = i;
    q->head = q->wrap(q->head + 1);
    q->count--;
    return n;
}

namespace {

// ------------------------------------------------------------------ errors

void fill_err(eq* q, struct fi_eq_err_entry* buf, const struct fi_eq_err_entry& e,
              const void* data, size_t n) {
    const bool old_api = !api::has_1_5(q->api);
    const bool provider_buf = old_api || buf->err_data_size == 0;
    void* user_data = buf->err_data;
    size_t user_size = old_api ? 0 : buf->err_data_size;
    buf->fid = e.fid;
    buf->context = e.context;
    buf->data = e.data;
    buf->err = e.err;
    buf->prov_errno = e.prov_errno;
    if (provider_buf) {
        // Valid until the next read call on this EQ (fi_eq(3) compatibility).
        if (n) std::memcpy(q->errbuf.get(), data, n);
        buf->err_data = n ? q->errbuf.get() : nullptr;
        if (!old_api) buf->err_data_size = n;  // an old struct may end before it
    } else {
        size_t c = std::min(n, user_size);
        if (c) std::memcpy(user_data, data, c);
        buf->err_data_size = c;
    }
}

}  // namespace

ssize_t eq_readerr_locked(eq* q, struct fi_eq_err_entry* buf, uint64_t flags) {
    long p = eq_ready_err_locked(q);
    if (p >= 0) {
        eq_slot& s = q->at(static_cast<size_t>(p));
        fill_err(q, buf, s.err, q->payload(s), s.len);
        if (!(flags & FI_PEEK)) remove_locked(q, static_cast<size_t>(p));
        return sizeof(*buf);
    }
    if (q->count == 0 && q->overrun) {
        // Sticky: an overrun EQ is fatal (fi_eq(3) NOTES).
        struct fi_eq_err_entry e {};
        e.fid = &q->fid.fid;
        e.context = q->fid.fid.context;
        e.data = q->lost;
        e.err = FI_EOVERRUN;
        e.prov_errno = FI_EVD_PERR(FI_EVD_PERR_EQ, FI_EVD_EQ_PERR_OVERRUN);
        fill_err(q, buf, e, nullptr, 0);
        return sizeof(*buf);
    }
    return -FI_EAGAIN;
}

// ------------------------------------------------------------------ contract

namespace {

// A post by evd itself: it may use the reserve beyond the application's
// capacity; when even that is full the event is lost, counted, and the EQ
// is overrun for good (fi_eq(3) NOTES). Returns 0 or -FI_EOVERRUN;
// *first_loss tells the caller to log it (the loss that made the EQ fatal).
int post_internal(eq* q, uint32_t event, const struct fi_eq_err_entry* err, const void* data,
                  size_t len, bool* first_loss) {
    *first_loss = false;
    wake_plan sig;
    int rc = 0;
    {
        evd::lock_guard lk(q->mu);
        if (q->overrun) {
            q->lost++;
            return -FI_EOVERRUN;  // already fatal and reported
        }
        rc = eq_push_locked(q, q->cap, event, err, data, len);
        if (rc) {
            q->overrun = true;
            q->lost++;
            *first_loss = true;
        }
        sig = eq_disarm_locked(q);
    }
    if (sig) eq_signal(q, sig);
    return rc;
}

}  // namespace

int eq_post(eq* q, uint32_t event, const void* entry, size_t len) {
    if (!q || (len && !entry)) return -FI_EINVAL;
    if (len > std::max(q->max_write, kEqInline)) {
        EVD_WARN(FI_LOG_EQ, "eq_post: %zu-byte event %u exceeds the EQ's %zu-byte maximum\n", len,
                 event, q->max_write);
        return -FI_EINVAL;
    }
    bool first_loss;
    int rc = post_internal(q, event, nullptr, entry, len, &first_loss);
    if (first_loss)
        EVD_WARN(FI_LOG_EQ, "EQ %p overran (%zu entries): event %u lost, EQ is now fatal\n",
                 static_cast<void*>(q), q->cap, event);
    return rc;
}

size_t eq_forget_fid(eq* q, const struct fid* f) {
    if (!q || !f) return 0;
    size_t dropped = 0;
    evd::lock_guard lk(q->mu);
    for (size_t p = 0; p < q->count;) {
        if (q->at(p).src == f) {
            remove_locked(q, p);
            ++dropped;
        } else {
            ++p;
        }
    }
    if (dropped)
        EVD_DBG(FI_LOG_EQ, "eq %p: %zu queued events of closed fid %p dropped\n",
                static_cast<void*>(q), dropped, static_cast<const void*>(f));
    return dropped;
}

int eq_post_err(eq* q, const struct fi_eq_err_entry& err, const void* err_data,
                size_t err_data_len) {
    if (!q || (err_data_len && !err_data)) return -FI_EINVAL;
    if (err_data_len > std::max(q->max_write, kEqInline)) {
        EVD_WARN(FI_LOG_EQ, "eq_post_err: %zu bytes of err_data truncated to %zu\n", err_data_len,
                 q->max_write);
        err_data_len = std::max(q->max_write, kEqInline);
    }
    bool first_loss;
    int rc = post_internal(q, 0, &err, err_data, err_data_len, &first_loss);
    if (first_loss)
        EVD_WARN(FI_LOG_EQ, "EQ %p overran (%zu entries): error %d lost, EQ is now fatal\n",
                 static_cast<void*>(q), q->cap, err.err);
    return rc;
}

void eq_bind_ref(eq* q) {
    if (q) q->refs.get();
}
void eq_bind_unref(eq* q) {
    if (q) q->refs.put();
}

eq* eq_from_fid(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_EQ) return nullptr;
    return from_fid<eq>(reinterpret_cast<struct fid_eq*>(f));
}
eq* eq_from_fid(struct fid_eq* f) { return f ? eq_from_fid(&f->fid) : nullptr; }
struct fid_eq* eq_fid(eq* q) { return q ? &q->fid : nullptr; }

}  // namespace evd
