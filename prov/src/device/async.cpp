// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hardware async events -> EQ records: the translation table (data, one
// place), the pure translation, routing/posting under the device registry
// lock, fi_eq_strerror sentences and the FI_EVD_ASYNC_OPS domain extension.
#include "config.h"

#include "device/async.h"
#include "msg/qp_flush.h"

#include <time.h>

#include <cstdio>
#include <cstring>
#include <iterator>

#include "cm/linger.h"
#include "cm/probe.h"
#include "cq/cq.h"
#include "domain.h"
#include "eq/eq.h"
#include "msg/ep.h"
#include "msg/srx.h"

// HAVE_DECL_IBV_EVENT_*: config.h (configure.ac's AC_CHECK_DECLS, always 0 or 1)

namespace evd {
namespace {

using O = async_obj;
using R = async_rec;
using A = async_act;

// ---------------------------------------------------------------- THE TABLE
// One row per enum ibv_event_type of the installed verbs.h, in enum order.
// fi_evd(7) prints the same rows (man/parts/async.7); test/unit/async_table.cpp
// checks both.
constexpr async_row kTable[] = {
    {IBV_EVENT_CQ_ERR, "IBV_EVENT_CQ_ERR", O::cq, R::error, FI_EOVERRUN, A::none,
     "completion queue %C of %D overran or failed; completions were lost",
     "the only way a CQ raises an error is an overrun (or a device fault): completions are "
     "gone, so the CQ's owner must treat its endpoints' state as unknown"},
    {IBV_EVENT_QP_FATAL, "IBV_EVENT_QP_FATAL", O::qp, R::error, FI_EIO, A::terminal,
     "queue pair %Q of %D hit a fatal error and is in the error state",
     "a local I/O failure the application cannot correct; the endpoint is ended"},
    {IBV_EVENT_QP_REQ_ERR, "IBV_EVENT_QP_REQ_ERR", O::qp, R::error, FI_EREMOTEIO, A::terminal,
     "queue pair %Q of %D received an invalid request from its peer and is in the error state",
     "the peer violated the transport protocol (invalid request): a remote I/O error; the "
     "endpoint is ended"},
    {IBV_EVENT_QP_ACCESS_ERR, "IBV_EVENT_QP_ACCESS_ERR", O::qp, R::error, FI_EACCES,
     A::terminal,
     "queue pair %Q of %D refused a request that violated memory access rights and is in the "
     "error state",
     "an RDMA request hit a bad key, range or permission: access denied; the endpoint is "
     "ended"},
    {IBV_EVENT_COMM_EST, "IBV_EVENT_COMM_EST", O::qp, R::notify, 0, A::comm_est,
     "queue pair %Q of %D received its first message before the connection was reported "
     "established",
     "evd passes it to rdma_notify() so early data never stalls the connection; a "
     "notification only on request"},
    {IBV_EVENT_SQ_DRAINED, "IBV_EVENT_SQ_DRAINED", O::qp, R::notify_or_error, FI_EOPBADSTATE,
     A::none, "the send queue of queue pair %Q on %D has drained",
     "evd never asks for the SQ-drain state: unless the binding requested notifications "
     "(FI_EVD_NOTIFY_ASYNC) it is an unexpected state change (bad state), not fatal"},
    {IBV_EVENT_PATH_MIG, "IBV_EVENT_PATH_MIG", O::qp, R::notify, 0, A::none,
     "queue pair %Q of %D migrated to its alternate path", "informational"},
    {IBV_EVENT_PATH_MIG_ERR, "IBV_EVENT_PATH_MIG_ERR", O::qp, R::error, FI_EHOSTUNREACH,
     A::none, "queue pair %Q of %D could not migrate to its alternate path",
     "the alternate path does not reach the peer; the QP keeps its current path, so not "
     "terminal"},
    {IBV_EVENT_DEVICE_FATAL, "IBV_EVENT_DEVICE_FATAL", O::device, R::error, FI_ENODEV,
     A::device_fatal, "device %D failed and can no longer be used",
     "the device is gone: every domain gets this record and every endpoint of the device "
     "exactly one terminal record"},
    {IBV_EVENT_PORT_ACTIVE, "IBV_EVENT_PORT_ACTIVE", O::port, R::notify, 0, A::port_up,
     "port %P of %D is active",
     "the domain's port snapshot becomes IBV_PORT_ACTIVE: new connections work again"},
    {IBV_EVENT_PORT_ERR, "IBV_EVENT_PORT_ERR", O::port, R::error, FI_ENETDOWN, A::port_down,
     "port %P of %D is down",
     "the link is down; connections through it stall or fail, so the application is told "
     "(not terminal: PORT_ACTIVE may follow)"},
    {IBV_EVENT_LID_CHANGE, "IBV_EVENT_LID_CHANGE", O::port, R::notify, 0, A::port_change,
     "the LID of port %P of %D changed", "informational"},
    {IBV_EVENT_PKEY_CHANGE, "IBV_EVENT_PKEY_CHANGE", O::port, R::notify, 0, A::port_change,
     "the P_Key table of port %P of %D changed", "informational"},
    {IBV_EVENT_SM_CHANGE, "IBV_EVENT_SM_CHANGE", O::port, R::notify, 0, A::port_change,
     "the subnet manager of port %P of %D changed", "informational"},
    {IBV_EVENT_SRQ_ERR, "IBV_EVENT_SRQ_ERR", O::srq, R::error, FI_EIO, A::none,
     "shared receive queue %S of %D failed",
     "a local I/O failure of the shared receive queue; its receives are lost"},
    {IBV_EVENT_SRQ_LIMIT_REACHED, "IBV_EVENT_SRQ_LIMIT_REACHED", O::srq, R::notify_armed, 0,
     A::none, "shared receive queue %S of %D fell below its armed limit",
     "raised only after srq_arm (FI_EVD_ASYNC_OPS): arming is the request, so always "
     "delivered"},
    {IBV_EVENT_QP_LAST_WQE_REACHED, "IBV_EVENT_QP_LAST_WQE_REACHED", O::qp, R::notify, 0,
     A::none, "queue pair %Q of %D will take no more receives from its shared receive queue",
     "informational"},
    {IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER", O::port, R::notify, 0,
     A::port_change, "the subnet manager asks clients of port %P of %D to register again",
     "informational"},
#if HAVE_DECL_IBV_EVENT_GID_CHANGE
    {IBV_EVENT_GID_CHANGE, "IBV_EVENT_GID_CHANGE", O::port, R::notify, 0, A::port_change,
     "the GID table of port %P of %D changed", "informational (RoCE: an IP address changed)"},
#endif
#if HAVE_DECL_IBV_EVENT_WQ_FATAL
    {IBV_EVENT_WQ_FATAL, "IBV_EVENT_WQ_FATAL", O::wq, R::error, FI_EIO, A::none,
     "work queue %W of %D hit a fatal error",
     "a local I/O failure of a work queue (evd creates none: normally undeliverable)"},
#endif
};

constexpr bool table_in_enum_order() {
    for (size_t i = 0; i < std::size(kTable); ++i)
        if (kTable[i].type != static_cast<int>(i)) return false;
    return true;
}
static_assert(table_in_enum_order(), "async table rows must follow enum ibv_event_type");

uint32_t obj_code(async_obj o) {
    switch (o) {
        case O::qp: return FI_EVD_ASYNC_QP;
        case O::cq: return FI_EVD_ASYNC_CQ;
        case O::srq: return FI_EVD_ASYNC_SRQ;
        case O::wq: return FI_EVD_ASYNC_WQ;
        case O::port: return FI_EVD_ASYNC_PORT;
        case O::device: return FI_EVD_ASYNC_DEVICE;
    }
    return 0;
}

void copy_name(char (&dst)[FI_EVD_DEVNAME_MAX], const char* src) {
    std::snprintf(dst, sizeof dst, "%s", src ? src : "");
}

}  // namespace

// The event type as an integer: the kernel may report a type newer than the
// installed verbs.h, and loading such a value as the enum is undefined.
int async_event_type(const struct ibv_async_event& ev) noexcept {
    int t;
    static_assert(sizeof t == sizeof ev.event_type);
    std::memcpy(&t, &ev.event_type, sizeof t);
    return t;
}

std::span<const async_row> async_table() noexcept { return {kTable, std::size(kTable)}; }

const async_row* async_row_for(int type) noexcept {
    if (type < 0 || static_cast<size_t>(type) >= std::size(kTable)) return nullptr;
    return &kTable[type];
}

uint64_t async_now_ns() noexcept {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// The affected object's identity into d (qp/cq/srq/wq number or port);
// returns the number FI_NOTIFY data carries for it.
uint32_t fill_object(const struct ibv_async_event& ev, O obj, struct fi_evd_async_err& d) {
    uint32_t num = 0;
    switch (obj) {
        case O::qp:
            if (ev.element.qp) d.qp_num = num = ev.element.qp->qp_num;
            break;
        case O::cq:
            if (ev.element.cq) d.cq_handle = ev.element.cq->handle;
            num = d.cq_handle;
            break;
        case O::srq:
            if (ev.element.srq) d.srq_handle = num = ev.element.srq->handle;
            break;
        case O::wq:
            if (ev.element.wq) d.wq_num = num = ev.element.wq->wq_num;
            break;
        case O::port:
            d.port_num = ev.element.port_num > 0 ? static_cast<uint32_t>(ev.element.port_num) : 0;
            break;
        case O::device:
            break;
    }
    return num;
}

// What the row's record kind becomes for this target: an error entry, an
// FI_NOTIFY entry, or nothing (a notification nobody asked for).
async_out outcome_for(R rec, bool notify_wanted) {
    switch (rec) {
        case R::error: return async_out::error;
        case R::notify: return notify_wanted ? async_out::notify : async_out::none;
        case R::notify_armed: return async_out::notify;
        case R::notify_or_error: return notify_wanted ? async_out::notify : async_out::error;
    }
    return async_out::none;
}

}  // namespace

async_record async_translate(const struct ibv_async_event& ev, const async_input& in) noexcept {
    async_record r;
    r.row = async_row_for(async_event_type(ev));
    auto& d = r.data;
    d.magic = FI_EVD_ASYNC_MAGIC;
    d.version = FI_EVD_ASYNC_VERSION;
    d.size = sizeof(struct fi_evd_async_err);
    d.event_type = async_event_type(ev);
    copy_name(d.device, in.device);
    d.fid = in.fid;
    d.timestamp_ns = in.timestamp_ns;
    d.seq = in.seq;
    d.terminal = in.terminal ? 1 : 0;
    if (!r.row) return r;  // unknown type: out == none

    d.object = obj_code(r.row->obj);
    const uint32_t num = fill_object(ev, r.row->obj, d);
    r.out = outcome_for(r.row->rec, in.notify_wanted);
    if (r.out == async_out::error) {
        r.err.fid = in.fid;
        r.err.context = in.context;
        r.err.data = 0;
        r.err.err = r.row->err;
        r.err.prov_errno = async_event_type(ev);
        r.err.err_data = nullptr;
        r.err.err_data_size = 0;
    } else if (r.out == async_out::notify) {
        r.notify.fid = in.fid;
        r.notify.context = in.context;
        r.notify.data = FI_EVD_NOTIFY_DATA(async_event_type(ev), d.port_num, num);
    }
    return r;
}

const char* async_format(const async_row& row, const struct fi_evd_async_err& data, char* buf,
                         size_t len) noexcept {
    if (!buf || len == 0) return row.sentence;
    size_t n = 0;
    auto put = [&](const char* s) {
        for (; *s && n + 1 < len; ++s) buf[n++] = *s;
    };
    char dev[FI_EVD_DEVNAME_MAX];
    std::memcpy(dev, data.device, sizeof dev);
    dev[sizeof dev - 1] = '\0';  // err_data came back from the application
    for (const char* p = row.sentence; *p && n + 1 < len; ++p) {
        if (*p != '%' || !p[1]) {
            buf[n++] = *p;
            continue;
        }
        char num[24];
        switch (*++p) {
            case 'D': put(dev[0] ? dev : "?"); break;
            case 'P': std::snprintf(num, sizeof num, "%u", data.port_num); put(num); break;
            case 'Q': std::snprintf(num, sizeof num, "%u", data.qp_num); put(num); break;
            case 'C': std::snprintf(num, sizeof num, "%u", data.cq_handle); put(num); break;
            case 'S': std::snprintf(num, sizeof num, "%u", data.srq_handle); put(num); break;
            case 'W': std::snprintf(num, sizeof num, "%u", data.wq_num); put(num); break;
            default: buf[n++] = '%'; if (n + 1 < len) buf[n++] = *p; break;
        }
    }
    put(" (");
    put(row.name);
    put(")");
    buf[n] = '\0';
    return buf;
}

const char* async_strerror(int prov_errno, const void* err_data, char* buf, size_t len) noexcept {
    if (!err_data) return nullptr;
    struct fi_evd_async_err d;
    std::memcpy(&d, err_data, sizeof(d.magic));
    if (d.magic != FI_EVD_ASYNC_MAGIC) return nullptr;
    std::memcpy(&d, err_data, sizeof d);
    if (d.version != FI_EVD_ASYNC_VERSION || d.size != sizeof d || d.event_type != prov_errno)
        return nullptr;
    const async_row* row = async_row_for(prov_errno);
    if (!row) return nullptr;
    return async_format(*row, d, buf, len);
}

// ---------------------------------------------------------------- dispatch
namespace {

using reg_map = std::unordered_map<const void*, async_target>;

// Does the binding of EQ `q` ask for async notifications? Either the target's
// own binding flags, or a domain of the device bound to q with the flag.
bool notify_wanted(devctx* d, eq* q, uint64_t target_flags) EVD_REQUIRES(d->reg_mu) {
    if (target_flags & FI_EVD_NOTIFY_ASYNC) return true;
    for (void* p : d->domains) {
        auto* dom = static_cast<domain*>(p);
        if (dom->eq_bound.load(std::memory_order_acquire) == q &&
            (dom->eq_flags & FI_EVD_NOTIFY_ASYNC))
            return true;
    }
    return false;
}

void undeliverable(devctx* d, const async_row* row, int type, const char* why) {
    d->undeliverable.fetch_add(1, std::memory_order_relaxed);
    EVD_WARN(FI_LOG_EQ, "async event %s (%d) of %s is undeliverable: %s\n",
             row ? row->name : "unknown", type, d->name.c_str(), why);
}

// Posts a translated record to q. Returns true when something was posted.
bool post_record(devctx* d, eq* q, const async_record& r) {
    int ret = 0;
    if (r.out == async_out::error) {
        ret = eq_post_err(q, r.err, &r.data, sizeof r.data);
    } else if (r.out == async_out::notify) {
        ret = eq_post(q, FI_NOTIFY, &r.notify, sizeof r.notify);
    } else {
        d->async_suppressed.fetch_add(1, std::memory_order_relaxed);
        EVD_INFO(FI_LOG_EQ, "async %s of %s: notification not requested (FI_EVD_NOTIFY_ASYNC)\n",
                 r.row ? r.row->name : "?", d->name.c_str());
        return false;
    }
    // -FI_EOVERRUN: the EQ counted it and reports the overrun itself.
    if (ret && ret != -FI_EOVERRUN)
        EVD_WARN(FI_LOG_EQ, "async %s of %s: posting failed (%d)\n", r.row->name,
                 d->name.c_str(), ret);
    d->delivered.fetch_add(1, std::memory_order_relaxed);
    return true;
}

// QP / CQ / SRQ / WQ events: to the registered target's routed EQ.
void to_object(devctx* d, const async_row& row, const ibv_async_event& ev, reg_map& map,
               const void* key, uint64_t ts, uint64_t seq) EVD_REQUIRES(d->reg_mu) {
    auto it = map.find(key);
    if (it == map.end()) {
        undeliverable(d, &row, async_event_type(ev),
                      "no evd object owns it (closed or never registered)");
        return;
    }
    const async_target& t = it->second;
    eq* q = t.route ? t.route(t.owner) : nullptr;
    bool terminal = row.act == A::terminal;
    bool claimed = true;
    if (terminal && t.claim_terminal) claimed = t.claim_terminal(t.owner);
    if (!q) {
        undeliverable(d, &row, async_event_type(ev), "its object has no EQ bound");
    } else if (claimed) {
        async_input in;
        in.device = d->name.c_str();
        in.fid = t.fid;
        in.context = t.context;
        in.notify_wanted = notify_wanted(d, q, t.eq_flags);
        in.terminal = terminal;
        in.timestamp_ns = ts;
        in.seq = seq;
        post_record(d, q, async_translate(ev, in));
    } else {
        EVD_INFO(FI_LOG_EQ, "async %s of %s: endpoint already had its terminal event\n",
                 row.name, d->name.c_str());
    }
    if (t.consequence) t.consequence(t.owner, ev);
}

void port_snapshot(domain* dom, const async_row& row, uint64_t ts) {
    if (row.act == A::port_up) dom->port_state.store(IBV_PORT_ACTIVE, std::memory_order_release);
    if (row.act == A::port_down) dom->port_state.store(IBV_PORT_DOWN, std::memory_order_release);
    dom->port_last_event.store(row.type, std::memory_order_relaxed);
    dom->port_change_ns.store(ts, std::memory_order_relaxed);
    dom->port_changes.fetch_add(1, std::memory_order_release);
}

// Port / device events: to every domain on the device (port events: on that port).
void to_domains(devctx* d, const async_row& row, const ibv_async_event& ev, uint64_t ts,
                uint64_t seq) EVD_REQUIRES(d->reg_mu) {
    bool any = false;
    for (void* p : d->domains) {
        auto* dom = static_cast<domain*>(p);
        if (row.obj == O::port && dom->port_num != ev.element.port_num) continue;
        any = true;
        if (row.obj == O::port) port_snapshot(dom, row, ts);
        eq* q = dom->eq_bound.load(std::memory_order_acquire);
        if (!q) {
            undeliverable(d, &row, async_event_type(ev), "its domain has no EQ (fi_domain_bind)");
            continue;
        }
        async_input in;
        in.device = d->name.c_str();
        in.fid = &dom->fid.fid;
        in.context = dom->fid.fid.context;
        in.notify_wanted = (dom->eq_flags & FI_EVD_NOTIFY_ASYNC) != 0;
        in.timestamp_ns = ts;
        in.seq = seq;
        post_record(d, q, async_translate(ev, in));
    }
    if (!any) undeliverable(d, &row, async_event_type(ev), "no evd domain is open on it");
}

// Posts the terminal record `ev` means for the endpoint of registration t
// (whose claim_terminal the caller won), naming its QP in err_data.
void post_endpoint_terminal(devctx* d, const async_row& row, const async_target& t,
                            const ibv_async_event& ev, const struct ibv_qp* qp, uint64_t ts,
                            uint64_t seq) {
    eq* q = t.route ? t.route(t.owner) : nullptr;
    if (!q) {
        undeliverable(d, &row, async_event_type(ev), "an endpoint has no EQ bound");
        return;
    }
    async_input in;
    in.device = d->name.c_str();
    in.fid = t.fid;
    in.context = t.context;
    in.terminal = true;
    in.timestamp_ns = ts;
    in.seq = seq;
    async_record r = async_translate(ev, in);
    if (qp) r.data.qp_num = qp->qp_num;
    post_record(d, q, r);
}

// DEVICE_FATAL: one terminal record per endpoint (unless it already had one).
void end_endpoints(devctx* d, const async_row& row, uint64_t ts, uint64_t seq) EVD_REQUIRES(d->reg_mu) {
    for (auto& [key, t] : d->qps) {
        struct ibv_async_event one {};
        one.event_type = IBV_EVENT_DEVICE_FATAL;
        one.element.qp = const_cast<struct ibv_qp*>(static_cast<const struct ibv_qp*>(key));
        if (!t.claim_terminal || t.claim_terminal(t.owner))
            post_endpoint_terminal(d, row, t, one, one.element.qp, ts, seq);
        if (t.consequence) t.consequence(t.owner, one);
    }
}

// PORT_ERR on a fail-fast domain: every connected endpoint of the domain on
// that port gets its one terminal record now (FI_ENETDOWN, err_data naming the
// port and the endpoint's QP), and its QP is moved to the error state so that
// its posted work is flushed to its CQs instead of waiting for the transport
// to give up. Endpoints still connecting are left to rdma_cm's own timeouts.
void fail_fast(devctx* d, const async_row& row, const ibv_async_event& ev, uint64_t ts,
               uint64_t seq) EVD_REQUIRES(d->reg_mu) {
    for (auto& [key, t] : d->qps) {
        if (!t.fid || t.fid->fclass != FI_CLASS_EP || !t.claim_terminal) continue;
        auto* e = static_cast<ep*>(t.owner);
        if (!e->dom->fail_fast.load() || e->dom->port_num != ev.element.port_num) continue;
        if (static_cast<ep_state>(e->state.load()) != ep_state::connected) continue;
        if (!t.claim_terminal(t.owner)) continue;  // it already had its terminal event
        auto* qp = const_cast<struct ibv_qp*>(static_cast<const struct ibv_qp*>(key));
        post_endpoint_terminal(d, row, t, ev, qp, ts, seq);
        if (int rc = qp_to_error(qp))
            EVD_WARN(FI_LOG_EP_CTRL, "fail-fast: QP %u to the error state: %s\n", qp->qp_num,
                     strerror(rc));
        EVD_INFO(FI_LOG_EP_CTRL, "fail-fast: port %u of %s is down: endpoint %p ended\n",
                 static_cast<unsigned>(ev.element.port_num), d->name.c_str(),
                 static_cast<void*>(t.fid));
    }
}

}  // namespace

void async_dispatch(devctx* d, const struct ibv_async_event& ev) noexcept {
    if (!d) return;
    try {
        const uint64_t ts = async_now_ns();
        const uint64_t seq = d->async_events.fetch_add(1, std::memory_order_relaxed) + 1;
        const async_row* row = async_row_for(async_event_type(ev));
        if (!row) {
            undeliverable(d, nullptr, async_event_type(ev), "event type unknown to evd");
            return;
        }
        EVD_INFO(FI_LOG_EQ, "async event %s on %s (seq %llu)\n", row->name, d->name.c_str(),
                 static_cast<unsigned long long>(seq));
        {
            evd::lock_guard lk(d->reg_mu);
            switch (row->obj) {
                case O::qp: to_object(d, *row, ev, d->qps, ev.element.qp, ts, seq); break;
                case O::cq: to_object(d, *row, ev, d->cqs, ev.element.cq, ts, seq); break;
                case O::srq: to_object(d, *row, ev, d->srqs, ev.element.srq, ts, seq); break;
                case O::wq: to_object(d, *row, ev, d->wqs, ev.element.wq, ts, seq); break;
                case O::port:
                    to_domains(d, *row, ev, ts, seq);
                    if (row->act == A::port_down) fail_fast(d, *row, ev, ts, seq);
                    if (row->act == A::port_up) probe_port_active(d, ev.element.port_num);
                    break;
                case O::device:
                    to_domains(d, *row, ev, ts, seq);
                    end_endpoints(d, *row, ts, seq);
                    break;
            }
        }
        // Outside the registry lock (linger.h's lock order): disconnects that
        // waited for the port send their DREQ now.
        if (row->act == A::port_up) linger_port_active(d, ev.element.port_num);
    } catch (...) {
        d->undeliverable.fetch_add(1, std::memory_order_relaxed);
        EVD_WARN(FI_LOG_EQ, "async event %d of %s lost: internal error\n", async_event_type(ev),
                 d->name.c_str());
    }
}

void async_ep_consequence(void* owner, const struct ibv_async_event& ev) {
    if (async_event_type(ev) != IBV_EVENT_COMM_EST) return;
    auto* e = static_cast<ep*>(owner);
    if (!e || !e->id) return;
    if (rdma_notify(e->id.get(), IBV_EVENT_COMM_EST))
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_notify(COMM_EST) on QP %u: %d\n",
                 ep_qp_of(e) ? ep_qp_of(e)->qp_num : 0u, errno);
}

// ---------------------------------------------------------------- FI_EVD_ASYNC_OPS
namespace {

int op_port_state(struct fid_domain* f, struct fi_evd_port_state* st) {
    return guard([&]() -> int {
        domain* dom = from_fid<domain>(f);
        if (!dom || !st) {
            EVD_WARN(FI_LOG_DOMAIN, "port_state: %s\n", !dom ? "not an evd domain" : "state is NULL");
            return -FI_EINVAL;
        }
        *st = {};
        if (dom->dev) copy_name(st->device, dom->dev->name.c_str());
        st->port_num = dom->port_num;
        int s = dom->port_state.load(std::memory_order_acquire);
        if (s == IBV_PORT_NOP && dom->dev && dom->dev->ctx) {
            // No port event seen yet and the domain did not record the state.
            struct ibv_port_attr pa {};
            if (ibv_query_port(dom->dev->ctx.get(), dom->port_num, &pa) == 0) {
                int expected = IBV_PORT_NOP;
                dom->port_state.compare_exchange_strong(expected, pa.state);
                s = dom->port_state.load(std::memory_order_acquire);
            }
        }
        st->changes = dom->port_changes.load(std::memory_order_acquire);
        st->state = s;
        st->last_event = dom->port_last_event.load(std::memory_order_relaxed);
        st->last_change_ns = dom->port_change_ns.load(std::memory_order_relaxed);
        return 0;
    });
}

int op_counters(struct fid_domain* f, struct fi_evd_async_counters* c) {
    return guard([&]() -> int {
        domain* dom = from_fid<domain>(f);
        if (!dom || !c || !dom->dev) {
            EVD_WARN(FI_LOG_DOMAIN, "counters: %s\n",
                     !dom ? "not an evd domain" : (!c ? "counters is NULL" : "domain has no device"));
            return -FI_EINVAL;
        }
        devctx* d = dom->dev;
        c->events = d->async_events.load(std::memory_order_relaxed);
        c->delivered = d->delivered.load(std::memory_order_relaxed);
        c->undeliverable = d->undeliverable.load(std::memory_order_relaxed);
        c->suppressed = d->async_suppressed.load(std::memory_order_relaxed);
        return 0;
    });
}

int op_srq_arm(struct fid_domain* f, struct fid_ep* srx, size_t limit) {
    return guard([&]() -> int {
        domain* dom = from_fid<domain>(f);
        if (!dom || !dom->dev || !srx) {
            EVD_WARN(FI_LOG_DOMAIN, "srq_arm: %s\n", !srx ? "srx is NULL" : "not an evd domain");
            return -FI_EINVAL;
        }
        if (limit > UINT32_MAX) {
            EVD_WARN(FI_LOG_DOMAIN, "srq_arm: limit %zu too large\n", limit);
            return -FI_EINVAL;
        }
        struct ibv_srq* srq = srx_ibv(&srx->fid);
        devctx* d = dom->dev;
        {
            evd::lock_guard lk(d->reg_mu);
            auto it = srq ? d->srqs.find(srq) : d->srqs.end();
            if (it == d->srqs.end() || it->second.fid != &srx->fid) {
                EVD_WARN(FI_LOG_DOMAIN, "srq_arm: not a shared rx context of device %s\n",
                         d->name.c_str());
                return -FI_EINVAL;
            }
        }
        struct ibv_srq_attr attr {};
        attr.srq_limit = static_cast<uint32_t>(limit);
        int ret = ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT);
        if (ret) {
            EVD_WARN(FI_LOG_DOMAIN, "srq_arm: ibv_modify_srq(limit %zu) failed: %d\n", limit, ret);
            return ret == EOPNOTSUPP || ret == ENOSYS ? -FI_ENOSYS : fi_err(ret);
        }
        return 0;
    });
}

struct fi_evd_async_ops g_async_ops = {
    sizeof(struct fi_evd_async_ops),
    op_port_state,
    op_counters,
    op_srq_arm,
};

}  // namespace

int async_domain_ops_open(struct fid* fid, const char* name, uint64_t flags, void** ops,
                          void* context) {
    return guard([&]() -> int {
        if (!name || !ops) return -FI_EINVAL;
        if (std::strcmp(name, FI_EVD_ASYNC_OPS) != 0) return -FI_ENOSYS;
        if (!fid || fid->fclass != FI_CLASS_DOMAIN ||
            !from_fid<domain>(reinterpret_cast<struct fid_domain*>(fid))) {
            EVD_WARN(FI_LOG_DOMAIN, "%s asked of something that is not an evd domain\n", name);
            return -FI_EINVAL;
        }
        if (flags) {
            EVD_WARN(FI_LOG_DOMAIN, "%s: flags must be 0\n", name);
            return -FI_EBADFLAGS;
        }
        *ops = &g_async_ops;
        return 0;
    });
}

}  // namespace evd
