// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// fi_close of an active endpoint: the steps every kind shares (its posted
// work flushed to its CQs, no more async routing, what it held let go), and
// those of an FI_EP_MSG endpoint (no more deadlines or dispatch, a
// connection still up lingers until its peer is told (linger.h), its QP is
// kept for reuse (qp_pool.h) or destroyed). A datagram endpoint's own steps:
// ep_ud.cpp.
#include "cm/cm.h"
#include "cm/cm_deadline.h"
#include "cm/linger.h"
#include "cq/cntr.h"
#include "cq/cq.h"
#include "device/devctx.h"
#include "domain.h"
#include "eq/eq.h"
#include "msg/ep.h"
#include "msg/ep_exchange.h"
#include "msg/ep_outage.h"
#include "msg/pep_resume.h"
#include "msg/qp_flush.h"
#include "msg/qp_pool.h"
#include "msg/srx.h"

namespace evd {

// ------------------------------------------------------------------ shared steps
bool ep_close_quiesce(ep* e) {
    // queued work completes in the CQ before the QP can discard it
    const bool flushed = qp_flush(e);
    evd::lock_guard lk(e->mu);
    // A resumable endpoint's CQ detach completes what its ledgers still
    // hold as cancelled (cq_detach_qp): the QP must carry out nothing more,
    // flushed or not (FI_EVD_FLUSH_TIMEOUT=0, a QP never connected).
    if (e->qp && !flushed) {
        const cntr_route* r = ep_data_route(e);
        if (r && r->rs) qp_to_error(e->qp.get());
    }
    if (e->qp) {
        devctx_unregister(e->dom->dev, &devctx::qps, e->qp.get());
        cq_detach_qp(e->tx_cq, e->qp->qp_num);
        if (e->rx_cq != e->tx_cq) cq_detach_qp(e->rx_cq, e->qp->qp_num);
    }
    return flushed;
}

void ep_close_data(ep* e) {
    e->qp_ready.store(false);  // first: the data path reads e->dp behind it
    ep_data_close(e);
}

void ep_close_common(ep* e) {
    if (e->tx_cq) cq_bind_unref(e->tx_cq);
    if (e->rx_cq) cq_bind_unref(e->rx_cq);
    if (e->srx_fid) srx_bind_unref(e->srx_fid);
    // nothing posts for e any more: no reader may be handed its fid now
    eq_forget_fid(e->eq_bound.load(), &e->fid.fid);
    eq_forget_fid(e->dom->eq_bound.load(), &e->fid.fid);
    if (eq* q = e->eq_bound.load()) {
        devctx_detach_eq(e->dom->dev, q);
        eq_bind_unref(q);
    }
    if (e->suppressed.load())
        EVD_DBG(FI_LOG_EP_CTRL, "ep %p closed; %lu later terminal causes suppressed\n",
                static_cast<void*>(e), static_cast<unsigned long>(e->suppressed.load()));
    fi_freeinfo(e->info);
    e->info = nullptr;
}

int ep_close(struct fid* f) {
    return guard([&] {
        ep* e = ep_from_fid(f);
        if (!e) return -FI_EINVAL;
        if (e->refs.busy()) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_close(ep): %d objects still bound to it\n",
                     e->refs.n.load());
            return -FI_EBUSY;
        }
        return e->ekind->close(e);
    });
}

// ------------------------------------------------------------------ FI_EP_MSG
namespace {

// fi_close, once no deadline can fire: the QP's queued work completes in
// the CQs, then nothing routes to e any more (async events, fatal
// completions, a progress probe's deadline) and the QP is destroyed.
// Returns the QP when `keep` asks for it and its flush came out in full
// (it is then in the error state, its queues empty, out of the id's hands);
// otherwise it is destroyed.
// Called once nothing dispatches to e any more (its id's context no longer
// names it): the QP changes under e->mu all the same, the rule of ep.h.
ibv_qp_ptr retire_qp(msg_ep* e, bool keep) EVD_EXCLUDES(e->mu) {
    const bool flushed = ep_close_quiesce(e);
    if (e->chan) {  // a progress probe (probe.h) armed before the unregister
        evd::lock_guard chan_lk(e->chan->mu);
        cm_deadline_clear(e->chan, e);
    }
    ep_close_data(e);
    evd::lock_guard lk(e->mu);
    ibv_qp_ptr kept;
    if (keep && flushed && e->qp) {
        if (e->id && e->id->qp == e->qp.get()) e->id->qp = nullptr;  // rdma_cm lets go
        kept = std::move(e->qp);
    } else if (keep && e->qp) {
        qp_pool_discarded(e->dom);
    }
    ep_destroy_qp(e);
    return kept;
}

// Whether e's QP may be kept for reuse (qp_pool.h), as far as e knows
// before the flush: its connection came up and no error ended it. Not on a
// shared receive context: a receive the QP took from the SRQ may still
// complete after the close (only IBV_EVENT_QP_LAST_WQE_REACHED would say it
// will not). Not on iWARP either. linger_begin decides with rdma_cm's view
// under the channel lock.
bool qp_keepable(msg_ep* e) EVD_REQUIRES(e->mu) {
    if (!get_params().qp_pool_size || !e->qp || !e->cm_established || e->srx_fid) return false;
    // iWARP: the QP ends with its TCP stream; siw does not flush a closed
    // one the way the reuse needs (fi_evd(7), IWARP)
    if (e->dom->dev->iwarp) return false;
    return ep_state_of(e) != ep_state::error;
}

}  // namespace

int ep_msg_close(ep* base) {
    msg_ep* e = ep_msg(base);
    ep_outage_close(e);  // its closing flush is no outage (ep_outage.h)
    if (e->chan) {  // the deadline timer runs under the channel's lock
        evd::lock_guard chan_lk(e->chan->mu);
        cm_deadline_clear(e->chan, e);
        // out of its listener's table while dispatch cannot be reading it
        // for a request (ep_exchange.h: e shares that channel, or is in none)
        if (e->rs_tokens) {
            evd::lock_guard g(e->rs_tokens->mu);
            e->rs_tokens->tbl.remove(e);
        }
    }
    ep_exchange_close(e);  // an attempt's or a request's id and QP
    // A connection still up outlives e until the peer is told, and one
    // whose QP is kept until its time-wait is over (linger.h); otherwise no
    // more dispatch to e.
    bool keepable = false;
    {
        evd::lock_guard lk(e->mu);
        keepable = qp_keepable(e);
    }
    qp_verdict v = qp_verdict::destroy;
    linger* lg = e->chan && e->id ? linger_begin(e, keepable, &v) : nullptr;
    // No record (nothing to tell the peer, or none could be made): the id
    // is destroyed below, and dispatch must not reach e meanwhile.
    if (!lg && e->chan && e->id) cm_detach_owner(e->chan, e->id.get());
    uint64_t token = 0;
    if (ibv_qp_ptr kept = retire_qp(e, v != qp_verdict::destroy)) {
        const qp_key key = e->qkey;
        token = qp_pool_retire(e->dom, key, std::move(kept));
        if (token && v == qp_verdict::keep_now) {  // the peer can no longer address it
            qp_pool_release(token);
            token = 0;
        }
    }
    if (lg) {
        linger_arm(lg, std::move(e->id), token);  // with the channel reference
    } else {
        qp_pool_drop(token);  // nobody will see its time-wait end
        e->id.reset();  // before its channel can go
        if (e->chan) cm_chan_put(e->chan);
    }
    e->chan = nullptr;
    // its request handle, then what every endpoint holds
    if (e->creq) ep_drop_connreq(e);
    ep_close_common(e);
    return retire(e, &e->dom->refs);
}

}  // namespace evd
