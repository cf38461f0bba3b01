// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// An active endpoint's connection state machine: the rdma_cm events of its
// id (read on its EQ's channel, cm.cpp) move it through ep_state and become
// FI_CONNECTED, FI_SHUTDOWN or its one terminal error record; the setup
// deadline and every other terminal cause end it the same way.
#include <rdma/rdma_cma.h>

#include <cstring>

#include "cm/cm.h"
#include "cm/cm_deadline.h"
#include "device/devctx.h"
#include "domain.h"
#include "eq/eq.h"
#include "msg/ep.h"
#include "msg/ep_exchange.h"
#include "msg/ep_outage.h"
#include "msg/qp_flush.h"

namespace evd {

void ep_post_terminal_err(ep* e, int err, int prov_errno, const void* data, size_t len) {
    ep_set_state(e, ep_state::error);
    cm_post_err(ep_route_eq(e), &e->fid.fid, err, prov_errno, data, len);
}

// ------------------------------------------------------------------ rdma_cm events
namespace {

// ADDR_RESOLVED: the id is on a device now; the QP goes with it, then the
// route is resolved.
void on_addr_resolved(msg_ep* e) EVD_REQUIRES(e->mu) {
    if (ep_state_of(e) != ep_state::resolving) return;
    int ret = 0;
    if (!e->qp) {
        ret = ep_create_qp(e);
    } else if (e->id->qp != e->qp.get()) {
        // the id is on a device now: it drives the QP from here
        if (e->id->verbs != e->dom->dev->verbs) {
            EVD_WARN(FI_LOG_EP_CTRL,
                     "fi_connect: the source address is on device %s but the "
                     "endpoint's domain is %s\n",
                     ibv_get_device_name(e->id->verbs->device),
                     e->dom->dev->name.c_str());
            ret = -FI_EINVAL;
        } else {
            e->id->qp = e->qp.get();  // still owned by e (ep_destroy_qp)
        }
    }
    if (!ret) hb_release(e->id.get());
    if (!ret && rdma_resolve_route(e->id.get(), get_params().cm_timeout_ms))
        ret = fi_err(errno);
    if (ret && ep_claim_terminal(e)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: after address resolution: %d\n", ret);
        ep_post_terminal_err(e, -ret, -ret, nullptr, 0);
    }
}

// ROUTE_RESOLVED: the connect request goes out, unless the port is down.
void on_route_resolved(msg_ep* e) EVD_REQUIRES(e->mu) {
    if (ep_state_of(e) != ep_state::resolving) return;
    struct rdma_conn_param cp;
    cm_fill_conn_param(&cp, e->conn_data, e->conn_data_len,
                       cm_retry_count(e->dom->dev->attr.orig_attr.vendor_id));
    if (!port_active_now(e->id->verbs, e->id->port_num)) {
        // The REQ would be lost, and on rxe its failed send disables
        // the device's connection management (linger.h).
        EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: port %u of %s is down: no request sent\n",
                 e->id->port_num, ibv_get_device_name(e->id->verbs->device));
        if (ep_claim_terminal(e)) ep_post_terminal_err(e, FI_ENETDOWN, ENETDOWN, nullptr, 0);
        return;
    }
    ep_set_state(e, ep_state::connecting);
    e->cm_started = true;
    hb_release(e->id.get());
    if (rdma_connect(e->id.get(), &cp)) {
        int err = errno;
        EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: rdma_connect: %s\n", strerror(err));
        // iWARP connects TCP inside rdma_connect: a port nobody listens on
        // is refused here, the same error as a reject from IB's CM
        if (err == ECONNREFUSED) {
            if (ep_claim_terminal(e)) ep_post_terminal_err(e, FI_ECONNREFUSED, kRejNoListener, nullptr, 0);
        } else if (ep_claim_terminal(e)) {
            ep_post_terminal_err(e, FI_ECONNABORTED, err, nullptr, 0);
        }
    } else {
        cm_deadline_set(e->chan, e);
    }
}

// ESTABLISHED: FI_CONNECTED, with the accept data on the active side.
void on_established(msg_ep* e, const struct rdma_cm_event* ev, const cm_action& a)
    EVD_REQUIRES(e->mu) {
    auto st = ep_state_of(e);
    if (st != ep_state::connecting && st != ep_state::accepting) {
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: ESTABLISHED in state %d: ignored\n",
                 static_cast<void*>(e), static_cast<int>(st));
        return;
    }
    ep_set_state(e, ep_state::connected);
    e->cm_established = true;
    // resumable both ways (the accept's offer): a failure is held from now on
    ep_exchange_established(e, ev, st == ep_state::connecting);
    const void* data = nullptr;
    size_t len = 0;
    if (st == ep_state::connecting) {  // the active side gets the accept data
        if (a.data_ok) {
            data = a.data;
            len = a.data_len;
        } else {
            EVD_WARN(FI_LOG_EP_CTRL,
                     "accept data without a valid evd header: delivered as 0 bytes\n");
        }
    }
    cm_post_cm(ep_route_eq(e), FI_CONNECTED, &e->fid.fid, nullptr, data, len);
}

// DISCONNECTED: the peer's DREQ is answered and the endpoint ends with
// FI_SHUTDOWN.
void on_disconnected(msg_ep* e, cm_id_ptr& dead) EVD_REQUIRES(e->mu) {
    // The connection is over, not failed: the flush rdma_disconnect causes
    // starts no outage, and one under way ends here (ep_outage.h).
    ep_outage_disarm(e);
    dead = ep_outage_end(e);
    // Answer the peer's DREQ (DREP) now, so the side that called
    // fi_shutdown sees its DISCONNECTED without waiting for a timeout.
    // The side that called fi_shutdown already sent its DREQ: this
    // DISCONNECTED is the answer, nothing more to send.
    if (e->id && !e->disconnect_sent) {
        qp_mark_receives(e);  // rdma_disconnect moves the QP to the error state
        hb_release(e->id.get());
        rdma_disconnect(e->id.get());
        e->disconnect_sent = true;
    }
    if (ep_claim_terminal(e)) {
        ep_set_state(e, ep_state::shutdown);
        cm_post_cm(ep_route_eq(e), FI_SHUTDOWN, &e->fid.fid, nullptr, nullptr, 0);
    }
}

// Every other end (unreachable, rejected, device removal): one terminal error.
void on_error(msg_ep* e, const cm_row& r, const cm_action& a, cm_id_ptr& dead)
    EVD_REQUIRES(e->mu) {
    dead = ep_outage_end(e);  // what an outage held completes ahead of the record
    if (ep_claim_terminal(e)) {
        const void* data = a.peer_reject && a.data_ok ? a.data : nullptr;
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: %s (status %d)\n", static_cast<void*>(e),
                 r.name, a.prov_errno);
        ep_post_terminal_err(e, r.fi_err, a.prov_errno, data, data ? a.data_len : 0);
    }
}

}  // namespace

cm_id_ptr ep_cm_event(msg_ep* e, struct rdma_cm_event* ev, const cm_action& a) {
    evd::lock_guard lk(e->mu);
    const cm_row& r = *a.row;
    // The id of an attempt to join the peer again, or of a request taken
    // (ep_exchange.h); an id the connection has left behind is stale.
    if (e->rid && ev->id == e->rid.get()) return ep_exchange_cm_event(e, ev, a);
    if (e->rs_offered && e->id && ev->id != e->id.get()) {
        EVD_DBG(FI_LOG_EP_CTRL, "ep %p: %s of an id it resumed away from: dropped\n",
                static_cast<void*>(e), r.name);
        return nullptr;
    }
    // A resumable connection rides through an rdma_cm error the failure
    // table does not call an end (UNREACHABLE when the neighbour of a
    // connected id fails): its QP's own failure, if one comes, decides.
    if (r.outcome == cm_outcome::error && !e->terminal.load() &&
        ep_state_of(e) == ep_state::connected && ep_outage_ignores_cm(e, ev->event)) {
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: %s (status %d) on a resumable connection: not an end "
                 "(its QP's own failure decides)\n", static_cast<void*>(e), r.name, a.prov_errno);
        return nullptr;
    }
    if (r.outcome == cm_outcome::shutdown || r.outcome == cm_outcome::error ||
        r.outcome == cm_outcome::removal) {
        // What ended it first decides whether its QP may be kept (qp_pool.h).
        if (!e->cm_disconnected)
            e->cm_clean_end = r.outcome == cm_outcome::shutdown && ev->status == 0;
        e->cm_disconnected = true;  // nothing left to tell the peer at fi_close
    }
    // rdma_cm's view, even when the application's view already ended (a
    // setup deadline that fired just before): the peer thinks it is
    // connected and must be told at fi_close (linger.h).
    if (r.outcome == cm_outcome::connected) e->cm_established = true;
    if (ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) e->cm_timewait_over = true;
    if (r.outcome == cm_outcome::shutdown && e->terminal.load() && e->id && !e->disconnect_sent) {
        hb_release(e->id.get());
        rdma_disconnect(e->id.get());  // still answer the peer's DREQ
        e->disconnect_sent = true;
    }
    if (r.outcome != cm_outcome::internal && r.outcome != cm_outcome::resolve_route &&
        r.outcome != cm_outcome::send_connect)
        cm_deadline_clear_setup(e->chan, e);  // connected or ended: setup is over
    if (e->terminal.load() && r.outcome != cm_outcome::internal) {
        e->suppressed.fetch_add(1, std::memory_order_relaxed);
        EVD_DBG(FI_LOG_EP_CTRL, "ep %p: %s after its terminal event: suppressed\n",
                static_cast<void*>(e), r.name);
        return nullptr;
    }
    cm_id_ptr dead;
    switch (r.outcome) {
        case cm_outcome::resolve_route:
            on_addr_resolved(e);
            break;
        case cm_outcome::send_connect:
            on_route_resolved(e);
            break;
        case cm_outcome::connected:
            on_established(e, ev, a);
            break;
        case cm_outcome::shutdown:
            on_disconnected(e, dead);
            break;
        case cm_outcome::error:
        case cm_outcome::removal:
            on_error(e, r, a, dead);
            break;
        case cm_outcome::connreq:
        case cm_outcome::internal:
            EVD_DBG(FI_LOG_EP_CTRL, "ep %p: %s (status %d)\n", static_cast<void*>(e), r.name,
                    a.prov_errno);
            break;
    }
    return dead;
}

void ep_setup_timed_out(msg_ep* e) {
    evd::lock_guard lk(e->mu);
    const auto st = ep_state_of(e);
    if (st != ep_state::connecting && st != ep_state::accepting) return;  // raced with the end
    if (!ep_claim_terminal(e)) return;
    EVD_WARN(FI_LOG_EP_CTRL,
             "ep %p: not connected %d ms after its %s (FI_EVD_CONNECT_TIMEOUT): ended with "
             "FI_ETIMEDOUT\n",
             static_cast<void*>(e), get_params().connect_timeout_ms,
             st == ep_state::connecting ? "connect request" : "accept");
    if (e->qp) qp_to_error(e->qp.get());  // should the connection still complete, nothing flows on it
    ep_post_terminal_err(e, FI_ETIMEDOUT, -ETIMEDOUT, nullptr, 0);
}

bool ep_claim_terminal(ep* e) {
    const bool won = !e->terminal.exchange(true);
    if (won) ep_outage_disarm(e);  // ended: no later failure starts an outage
    // siw neither completes nor flushes work posted once its QP has left
    // RTS, even at close: on iWARP the endpoint takes no more posts from its
    // terminal event on (fi_evd(7), IWARP)
    if (won && e->dom->dev->iwarp) e->qp_ready.store(false);
    return won;
}

bool ep_claim_terminal_cb(void* owner) {
    ep* e = static_cast<ep*>(owner);
    bool won = ep_claim_terminal(e);
    if (won)
        ep_set_state(e, ep_state::error);
    else
        e->suppressed.fetch_add(1, std::memory_order_relaxed);
    return won;
}

void ep_terminal_error(ep* e, int err, int prov_errno, const char* why) {
    if (!ep_claim_terminal(e)) {
        e->suppressed.fetch_add(1, std::memory_order_relaxed);
        EVD_DBG(FI_LOG_EP_CTRL, "ep %p: %s after its terminal event: suppressed\n",
                static_cast<void*>(e), why ? why : "error");
        return;
    }
    EVD_INFO(FI_LOG_EP_CTRL, "ep %p: terminal error %d (%s)\n", static_cast<void*>(e), err,
             why ? why : "");
    ep_post_terminal_err(e, err, prov_errno, nullptr, 0);
}

}  // namespace evd
