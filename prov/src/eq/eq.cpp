// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The event queue (fi_eq(3)) and its extensions (fi_ext_evd.h, section 1).
// The entry points (fi_eq_read, readerr, write, sread, the extensions),
// fi_eq_open and fi_close, FI_GETWAIT and the ops tables. The queue itself
// and the provider's posts are eq_queue.cpp, the state they share
// eq_state.h.
#include "eq/eq.h"

#include "eq/eq_state.h"
#include "lock.h"
#include "mutex_cond.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include "cm/linger.h"
#include "cq/cq.h"
#include "device/async.h"
#include "eq/wait.h"
#include "fabric.h"

namespace evd {

namespace {

constexpr size_t kMaxSize = size_t{1} << 20;  // largest attr.size accepted
constexpr size_t kMaxBig = 256;               // large-payload chunks per EQ (at most)
constexpr uint64_t kEqOpenFlags = FI_WRITE | FI_AFFINITY;

}  // namespace

// ------------------------------------------------------------------ entry points
namespace {

bool waitable(const eq* q) { return q->wobj != FI_WAIT_NONE && q->wobj != FI_WAIT_SET; }

// inline: fi_eq_read's first step (its warning is out of line, in EVD_WARN)
EVD_ALWAYS_INLINE eq* checked(struct fid_eq* f) {
    eq* q = eq_from_fid(f);
    if (!q) EVD_WARN(FI_LOG_EQ, "not an evd EQ: %p\n", static_cast<void*>(f));
    return q;
}

ssize_t eq_read(struct fid_eq* f, uint32_t* event, void* buf, size_t len, uint64_t flags) {
    return guard([&]() -> ssize_t {
        eq* q = checked(f);
        if (!q) return -FI_EINVAL;
        if (!event || (len && !buf)) {
            EVD_WARN(FI_LOG_EQ, "fi_eq_read: event must be set and buf must be set when len > 0\n");
            return -FI_EINVAL;
        }
        {
            evd::lock_guard lk(q->mu);
            ssize_t r = eq_read_locked(q, event, buf, len, flags);
            if (r != -FI_EAGAIN) return r;
            if (!q->nsources.load(std::memory_order_relaxed)) {
                eq_arm_locked(q);
                return r;
            }
        }
        eq_run_sources(q);
        evd::lock_guard lk(q->mu);
        ssize_t r = eq_read_locked(q, event, buf, len, flags);
        if (r == -FI_EAGAIN) eq_arm_locked(q);
        return r;
    });
}

ssize_t eq_readerr(struct fid_eq* f, struct fi_eq_err_entry* buf, uint64_t flags) {
    return guard([&]() -> ssize_t {
        eq* q = checked(f);
        if (!q) return -FI_EINVAL;
        if (!buf) {
            EVD_WARN(FI_LOG_EQ, "fi_eq_readerr: buf must not be NULL\n");
            return -FI_EINVAL;
        }
        const bool old_api = !api::has_1_5(q->api);
        if (!old_api && buf->err_data_size && !buf->err_data) {
            EVD_WARN(FI_LOG_EQ, "fi_eq_readerr: err_data_size %zu with a NULL err_data\n",
                     buf->err_data_size);
            return -FI_EINVAL;
        }
        {
            evd::lock_guard lk(q->mu);
            ssize_t r = eq_readerr_locked(q, buf, flags);
            if (r != -FI_EAGAIN || !q->nsources.load(std::memory_order_relaxed)) return r;
        }
        eq_run_sources(q);
        evd::lock_guard lk(q->mu);
        return eq_readerr_locked(q, buf, flags);
    });
}

ssize_t eq_write(struct fid_eq* f, uint32_t event, const void* buf, size_t len, uint64_t flags) {
    return guard([&]() -> ssize_t {
    eq* q = eq_from_fid(f);
    if (!q) return -FI_EINVAL;
    if (!(q->flags & FI_WRITE)) {
        EVD_WARN(FI_LOG_EQ, "fi_eq_write: EQ was opened without FI_WRITE\n");
        return -FI_EINVAL;
    }
    if (len > q->max_write || (len && !buf)) {
        EVD_WARN(FI_LOG_EQ, "fi_eq_write: len %zu (max %zu, FI_EVD_EQ_MAX_WRITE), buf %p\n", len,
                 q->max_write, buf);
        return -FI_EINVAL;
    }
    wake_plan sig;
    {
        evd::lock_guard lk(q->mu);
        if (q->overrun) return -FI_EOVERRUN;
        int rc = eq_push_locked(q, q->ucap, event, nullptr, buf, len);
        if (rc) return rc;
        sig = eq_disarm_locked(q);
    }
    if (sig) eq_signal(q, sig);
    return static_cast<ssize_t>(len);
    });
}

ssize_t eq_write_err(struct fid_eq* f, const struct fi_eq_err_entry* err, uint64_t flags) {
    return guard([&]() -> ssize_t {
        eq* q = checked(f);
        if (!q) return -FI_EINVAL;
        if (!(q->flags & FI_WRITE)) {
            EVD_WARN(FI_LOG_EQ, "write_err: EQ was opened without FI_WRITE\n");
            return -FI_EINVAL;
        }
        if (!err || err->err <= 0 || err->err_data_size > q->max_write ||
            (err->err_data_size && !err->err_data)) {
            EVD_WARN(FI_LOG_EQ, "write_err: need err > 0 and err_data_size <= %zu\n", q->max_write);
            return -FI_EINVAL;
        }
        wake_plan sig;
        {
            evd::lock_guard lk(q->mu);
            if (q->overrun) return -FI_EOVERRUN;
            int rc = eq_push_locked(q, q->ucap, 0, err, err->err_data, err->err_data_size);
            if (rc) return rc;
            sig = eq_disarm_locked(q);
        }
        if (sig) eq_signal(q, sig);
        return static_cast<ssize_t>(sizeof(*err));
    });
}

ssize_t eq_sread(struct fid_eq* f, uint32_t* event, void* buf, size_t len, int timeout,
                 uint64_t flags) {
    return guard([&]() -> ssize_t {
        eq* q = checked(f);
        if (!q) return -FI_EINVAL;
        if (!event || (len && !buf)) {
            EVD_WARN(FI_LOG_EQ, "fi_eq_sread: event must be set and buf must be set when len > 0\n");
            return -FI_EINVAL;
        }
        if (!waitable(q)) {
            EVD_WARN(FI_LOG_EQ, "fi_eq_sread on an EQ with FI_WAIT_NONE or FI_WAIT_SET\n");
            return -FI_EINVAL;
        }
        return eq_wait_for(q, 1, timeout, event, buf, len, flags, nullptr, false);
    });
}

ssize_t eq_wait_n(struct fid_eq* f, size_t threshold, int timeout, uint32_t* event, void* buf,
                  size_t len, size_t* nmore, uint64_t flags) {
    return guard([&]() -> ssize_t {
        eq* q = checked(f);
        if (!q) return -FI_EINVAL;
        if (!event || (len && !buf) || threshold == 0 || threshold > q->cap) {
            EVD_WARN(FI_LOG_EQ, "wait_n: threshold %zu must be 1..%zu; event and buf set\n",
                     threshold, q->cap);
            return -FI_EINVAL;
        }
        if (!waitable(q)) {
            EVD_WARN(FI_LOG_EQ, "wait_n on an EQ with FI_WAIT_NONE or FI_WAIT_SET\n");
            return -FI_EINVAL;
        }
        return eq_wait_for(q, threshold, timeout, event, buf, len, flags, nmore, true);
    });
}

int depth_impl(eq* q, struct fi_evd_eq_depth* d) {
    if (!d) return -FI_EINVAL;
    evd::lock_guard lk(q->mu);
    *d = {};
    d->events = q->count;
    d->errors = q->nerr;
    d->capacity = q->ucap;
    d->reserve = q->cap - q->ucap;
    d->lost = q->lost;
    d->overrun = q->overrun;
    d->waiters = static_cast<size_t>(q->waiters.load());
    long p = eq_ready_err_locked(q);
    if (q->count && p < 0) {
        eq_slot& s = q->at(0);
        d->next_event = s.event;
        d->next_len = s.len;
    }
    return 0;
}

int eq_depth(struct fid_eq* f, struct fi_evd_eq_depth* d) {
    return guard([&] {
        eq* q = checked(f);
        return q ? depth_impl(q, d) : -FI_EINVAL;
    });
}

int wake_impl(eq* q) {
    int n;
    wake_plan sig;
    {
        evd::lock_guard lk(q->mu);
        n = q->waiters.load();
        q->wake_gen++;
        if (n > 0) sig = eq_kick_locked(q);
    }
    if (sig) eq_signal(q, sig);
    return n;
}

int eq_wake(struct fid_eq* f) {
    return guard([&] {
        eq* q = checked(f);
        return q ? wake_impl(q) : -FI_EINVAL;
    });
}

const char* eq_strerror(struct fid_eq*, int prov_errno, const void* err_data, char* buf,
                        size_t len) {
    return eq_error_text(prov_errno, err_data, buf, len);
}

// From now on the eventfd is watched from outside: keep it signalled while
// events may be queued. Marked signalled so the caller's fi_trywait decides.
void export_fd(eq* q) {
    wake_plan w;
    {
        evd::lock_guard lk(q->mu);
        if (q->ext_fd) return;
        q->ext_fd = true;
        q->armed = false;
        q->efd_signalled = true;
        w.fd = true;
    }
    eq_signal(q, w);
}

int getwait(eq* q, void* arg) {
    if (!arg) return -FI_EINVAL;
    switch (q->wobj) {
    case FI_WAIT_FD:
        export_fd(q);
        *static_cast<int*>(arg) = q->epfd.fd;
        return 0;
    case FI_WAIT_POLLFD: {
        export_fd(q);
        auto* pfd = static_cast<struct fi_wait_pollfd*>(arg);
        evd::lock_guard lk(q->mu);
        size_t need = 1;
        for (eq_source* s = q->sources; s; s = s->next) need++;
        size_t have = pfd->nfds;
        pfd->change_index = q->change_index;
        pfd->nfds = need;
        if (have < need) return -FI_ETOOSMALL;
        if (!pfd->fd) return -FI_EINVAL;
        size_t i = 0;
        pfd->fd[i++] = {q->efd.fd, POLLIN, 0};
        for (eq_source* s = q->sources; s; s = s->next) pfd->fd[i++] = {s->fd, POLLIN, 0};
        return 0;
    }
    case FI_WAIT_MUTEX_COND: {
        auto* mc = static_cast<struct fi_mutex_cond*>(arg);
        mc->mutex = &q->mc_mu;
        mc->cond = &q->mc_cond;
        return 0;
    }
    default:
        EVD_WARN(FI_LOG_EQ, "FI_GETWAIT: the EQ's wait object (%d) has no native handle\n",
                 q->wobj);
        return -FI_ENODATA;
    }
}

int eq_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        eq* q = eq_from_fid(f);
        if (!q) return -FI_EINVAL;
        switch (command) {
        case FI_GETWAIT:
            return getwait(q, arg);
        case FI_GETWAITOBJ:
            if (!arg) return -FI_EINVAL;
            *static_cast<enum fi_wait_obj*>(arg) = q->wobj;
            return 0;
        case FI_EVD_EQ_GETDEPTH:
            return depth_impl(q, static_cast<struct fi_evd_eq_depth*>(arg));
        case FI_EVD_EQ_WAKE:
            return wake_impl(q) >= 0 ? 0 : -FI_EOTHER;
        case kCtrlTrywait:
            return eq_trywait(q);
        default:
            EVD_WARN(FI_LOG_EQ, "fi_control(EQ): unsupported command %d\n", command);
            return -FI_ENOSYS;
        }
    });
}

// The first source still registered with q (fi_close detaches them).
eq_source* first_source(eq* q) {
    evd::lock_guard lk(q->mu);
    return q->sources;
}

int eq_close(struct fid* f) {
    return guard([&] {
        eq* q = eq_from_fid(f);
        if (!q) return -FI_EINVAL;
        if (q->refs.busy()) {
            EVD_WARN(FI_LOG_EQ, "fi_close(EQ): %d objects are still bound to it\n",
                     q->refs.n.load());
            return -FI_EBUSY;
        }
        // Ids of closed endpoints still telling their peers (linger.h) live
        // on this EQ's channel: they end with it.
        linger_end_eq(q);
        {
            evd::unique_lock<qlock> lk(q->mu);
            if (q->closing) return -FI_EBUSY;  // a concurrent fi_close
            q->closing = true;
            if (q->waiters > 0) {
                wake_plan sig = eq_kick_locked(q);
                lk.unlock();
                eq_signal(q, sig);
                lk.lock();
            }
            // They were kicked: wait for the last one to leave.
            for (int n = q->waiters.load(); n > 0; n = q->waiters.load()) {
                lk.unlock();
                q->waiters.wait(n);
                lk.lock();
            }
            if (q->sources)
                EVD_WARN(FI_LOG_EQ, "fi_close(EQ): event sources still registered; detached\n");
        }
        while (eq_source* s = first_source(q)) eq_remove_source(q, s);
        if (q->ws) wait_set_del(q->ws, &q->wm);
        return retire(q, q->fab ? &q->fab->refs : nullptr);  // queued events go with the slots
    });
}

int eq_ops_open(struct fid* f, const char* name, uint64_t flags, void** ops, void* context);

int wm_trywait(wait_member* m) {
    eq* q = eq_from_fid(m->fid);
    return q ? eq_trywait(q) : -FI_EINVAL;
}

// Ops tables (defined at the end of the file).
extern struct fi_ops eq_fi_ops;
extern struct fi_ops_eq eq_ops;

struct fi_evd_eq_ops eq_ext_ops = {
    .size = sizeof(struct fi_evd_eq_ops),
    .wait_n = eq_wait_n,
    .depth = eq_depth,
    .wake = eq_wake,
    .write_err = eq_write_err,
};

int eq_ops_open(struct fid* f, const char* name, uint64_t flags, void** ops, void* context) {
    return guard([&] {
        if (!eq_from_fid(f) || !name || !ops) return -FI_EINVAL;
        if (std::strcmp(name, FI_EVD_EQ_OPS_V1) != 0) return -FI_ENOSYS;
        *ops = &eq_ext_ops;
        return 0;
    });
}

}  // namespace

namespace {

// fi_eq_attr's flags, signaling vector and size (*size: the depth to open).
int check_attr(const struct fi_eq_attr* attr, size_t* size) {
    if (attr->flags & ~kEqOpenFlags) {
        EVD_WARN(FI_LOG_EQ, "fi_eq_open: unsupported flags 0x%llx\n",
                 static_cast<unsigned long long>(attr->flags & ~kEqOpenFlags));
        return -FI_EINVAL;
    }
    if ((attr->flags & FI_AFFINITY) && attr->signaling_vector < 0) {
        EVD_WARN(FI_LOG_EQ, "fi_eq_open: FI_AFFINITY with signaling_vector %d\n",
                 attr->signaling_vector);
        return -FI_EINVAL;
    }
    *size = attr->size ? attr->size : get_params().eq_size;
    if (*size > kMaxSize) {
        EVD_WARN(FI_LOG_EQ, "fi_eq_open: size %zu exceeds %zu\n", *size, kMaxSize);
        return -FI_EINVAL;
    }
    return 0;
}

// fi_eq_attr.wait_obj -> the EQ's wait object (and its wait set).
int take_wait_obj(const struct fi_eq_attr* attr, enum fi_wait_obj* wobj, wait_set** ws) {
    *wobj = FI_WAIT_NONE;
    *ws = nullptr;
    // Read as an int: an out-of-range value must be rejected, not loaded
    // as an enum (undefined behaviour).
    int raw_wait;
    static_assert(sizeof raw_wait == sizeof attr->wait_obj);
    std::memcpy(&raw_wait, &attr->wait_obj, sizeof raw_wait);
    switch (raw_wait) {
    case FI_WAIT_NONE:
    case FI_WAIT_FD:
    case FI_WAIT_POLLFD:
    case FI_WAIT_MUTEX_COND:
    case FI_WAIT_YIELD:
        *wobj = static_cast<enum fi_wait_obj>(raw_wait);
        break;
    case FI_WAIT_UNSPEC:
        *wobj = FI_WAIT_FD;  // evd's best blocking object: an fd
        break;
    case FI_WAIT_SET:
        *wobj = FI_WAIT_SET;
        *ws = wait_set_from_fid(attr->wait_set);
        if (!*ws) {
            EVD_WARN(FI_LOG_EQ, "fi_eq_open: FI_WAIT_SET needs an evd wait set\n");
            return -FI_EINVAL;
        }
        break;
    default:
        EVD_WARN(FI_LOG_EQ, "fi_eq_open: unknown wait_obj %d\n", raw_wait);
        return -FI_EINVAL;
    }
    return 0;
}

// The slots, order ring, free lists and large-payload pool for `size`
// events: everything an event will ever need, allocated now.
void alloc_storage(eq* q, size_t size) {
    evd::lock_guard lk(q->mu);  // nobody else has q yet; taken for the analysis
    q->ucap = size;
    q->cap = size + std::clamp<size_t>(size / 4, 4, 256);
    q->max_write = std::max(get_params().eq_max_write, kEqInline);
    q->nbig = std::min(q->cap, std::max<size_t>(kMaxBig, (size_t{1} << 20) / q->max_write));
    q->nbig = std::min(q->nbig, q->cap);
    q->slots.reset(new eq_slot[q->cap]);
    q->order.reset(new uint32_t[q->cap]);
    q->freel.reset(new uint32_t[q->cap]);
    q->bigfree.reset(new uint32_t[q->nbig]);
    q->bigmem.reset(new unsigned char[q->nbig * q->max_write]);  // not touched until used
    q->errbuf.reset(new unsigned char[q->max_write]);
    for (size_t i = 0; i < q->cap; i++) q->freel[i] = static_cast<uint32_t>(q->cap - 1 - i);
    q->nfree = q->cap;
    for (size_t i = 0; i < q->nbig; i++)
        q->bigfree[i] = static_cast<uint32_t>(q->nbig - 1 - i);
    q->nbigfree = q->nbig;
}

// The epoll fd every source joins; for a blocking wait object also the
// eventfd posts signal (and the mutex/condition pair of MUTEX_COND).
int open_signals(eq* q, enum fi_wait_obj wobj) {
    q->epfd.reset(epoll_create1(EPOLL_CLOEXEC));
    if (q->epfd.fd < 0) return fi_err(errno);
    if (wobj != FI_WAIT_NONE && wobj != FI_WAIT_YIELD) {
        q->efd.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
        if (q->efd.fd < 0) return fi_err(errno);
        struct epoll_event ev {};
        ev.events = EPOLLIN;
        ev.data.ptr = nullptr;
        if (epoll_ctl(q->epfd.fd, EPOLL_CTL_ADD, q->efd.fd, &ev) != 0) return fi_err(errno);
        q->signals = true;
    }
    if (wobj == FI_WAIT_MUTEX_COND) {
        mutex_cond_init(&q->mc_mu, &q->mc_cond, CLOCK_REALTIME);
        q->has_mc = true;
    }
    return 0;
}

}  // namespace

int eq_open(struct fid_fabric* ff, struct fi_eq_attr* attr, struct fid_eq** out, void* context) {
    return guard([&] {
        fabric* fab = from_fid<fabric>(ff);
        if (!fab || !attr || !out) {
            EVD_WARN(FI_LOG_EQ, "fi_eq_open: fabric, attr and eq must be valid\n");
            return -FI_EINVAL;
        }
        size_t size = 0;
        if (int r = check_attr(attr, &size)) return r;
        wait_set* ws = nullptr;
        enum fi_wait_obj wobj = FI_WAIT_NONE;
        if (int r = take_wait_obj(attr, &wobj, &ws)) return r;

        auto q = std::make_unique<eq>();
        q->fab = fab;
        q->api = fab->fid.api_version;
        q->flags = attr->flags;
        q->wobj = wobj;
        alloc_storage(q.get(), size);

        if (int r = open_signals(q.get(), wobj)) return r;
        if (attr->flags & FI_AFFINITY)
            EVD_INFO(FI_LOG_EQ, "fi_eq_open: signaling_vector %d noted (EQ interrupts are "
                     "not steerable; hint ignored)\n", attr->signaling_vector);

        fid_init(*q, FI_CLASS_EQ, context, &eq_fi_ops, &eq_ops);
        q->wm.fid = &q->fid.fid;
        q->wm.trywait = wm_trywait;
        q->wm.fd = q->epfd.fd;
        if (ws) {
            int rc = wait_set_add(ws, &q->wm);
            if (rc) return rc;
            q->ws = ws;
            // FD sets watch the member's fd; MUTEX_COND / YIELD sets do not
            q->ext_fd = wait_set_obj(ws) == FI_WAIT_FD || wait_set_obj(ws) == FI_WAIT_POLLFD;
        }
        return hand_out(std::move(q), fab->refs, out);
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops eq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = eq_close,
    .bind = op_no_bind,
    .control = eq_control,
    .ops_open = eq_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq),
    .read = eq_read,
    .readerr = eq_readerr,
    .write = eq_write,
    .sread = eq_sread,
    .strerror = eq_strerror,
};

}  // namespace

}  // namespace evd
