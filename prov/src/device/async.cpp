// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Hardware async events routed and posted: async_dispatch, under the device
// registry's lock, finds the object an event names and posts its record
// (async_table.cpp translates it) to that object's EQ, or to every domain's
// for port and device events; fail-fast, probes and lingering disconnects
// react to port events.
#include "config.h"

#include "device/async.h"

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
#include "msg/qp_flush.h"

namespace evd {

// ---------------------------------------------------------------- dispatch
namespace {

using O = async_obj;
using A = async_act;

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
    msg_ep* e = ep_msg(static_cast<ep*>(owner));  // set on RC QPs only (ep_create_qp)
    if (!e || !e->id) return;
    if (rdma_notify(e->id.get(), IBV_EVENT_COMM_EST))
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_notify(COMM_EST) on QP %u: %d\n",
                 ep_qp_of(e) ? ep_qp_of(e)->qp_num : 0u, errno);
}

}  // namespace evd
