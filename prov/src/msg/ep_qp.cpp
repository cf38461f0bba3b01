// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// An active endpoint's RC queue pair: its size from the endpoint's
// attributes and the device's limits, its creation on the domain's PD (evd's
// own device context), its hand-over to the rdma_cm id, and its registration
// for async events and fatal completions (ep.h).
#include <rdma/rdma_cma.h>

#include <cstring>
#include <new>

#include "cq/cq.h"
#include "device/async.h"
#include "device/devctx.h"
#include "domain.h"
#include <new>

#include "msg/ep.h"
#include "msg/ep_dp.h"
#include "msg/srx.h"

namespace evd {

namespace {

// Moves a QP of an endpoint whose id is not on a device yet from RESET to
// INIT, so that receives can be posted before the connection exists. The
// port and P_Key index are placeholders: rdma_cm moves the QP through INIT
// again with the values address resolution chose (INIT->INIT may change
// both) before RTR.
int init_unbound_qp(struct ibv_qp* qp) {
    struct ibv_qp_attr at = {};
    at.qp_state = IBV_QPS_INIT;
    at.pkey_index = 0;
    at.port_num = 1;
    at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    int rc = ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                         IBV_QP_ACCESS_FLAGS);
    if (rc) EVD_WARN(FI_LOG_EP_CTRL, "ibv_modify_qp(INIT): %s\n", strerror(rc));
    return rc;
}

// Moves the QP of an endpoint whose id is on a device (a connection request,
// an endpoint bound to an address) to INIT with the port, P_Key index and
// access rights rdma_cm chose for the id.
int init_bound_qp(struct rdma_cm_id* id, struct ibv_qp* qp) {
    struct ibv_qp_attr at = {};
    int mask = 0;
    at.qp_state = IBV_QPS_INIT;
    if (rdma_init_qp_attr(id, &at, &mask)) {
        int err = errno;
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_init_qp_attr(INIT): %s\n", strerror(err));
        return err ? err : EINVAL;
    }
    int rc = ibv_modify_qp(qp, &at, mask);
    if (rc) EVD_WARN(FI_LOG_EP_CTRL, "ibv_modify_qp(INIT): %s\n", strerror(rc));
    return rc;
}

// Enhanced Connection Establishment: the QP takes the options the peer
// offered when it offered the QP's vendor (a connection request), and rdma_cm
// is told what the QP supports, for the request or reply it sends. A device
// without ECE answers EOPNOTSUPP or vendor 0: nothing to agree on.
void agree_ece(struct rdma_cm_id* id, struct ibv_qp* qp) {
    struct ibv_ece local = {};
    if (ibv_query_ece(qp, &local) || !local.vendor_id) return;
    struct ibv_ece remote = {};
    if (rdma_get_remote_ece(id, &remote) == 0 && remote.vendor_id) {
        struct ibv_ece want = remote;
        if (remote.vendor_id != local.vendor_id) {  // another vendor: nothing extra
            want = {};
            want.vendor_id = local.vendor_id;
        }
        if (int rc = ibv_set_ece(qp, &want))
            EVD_INFO(FI_LOG_EP_CTRL, "ibv_set_ece: %s\n", strerror(rc));
        if (ibv_query_ece(qp, &local)) return;
    }
    if (rdma_set_local_ece(id, &local))
        EVD_INFO(FI_LOG_EP_CTRL, "rdma_set_local_ece: %s\n", strerror(errno));
}

}  // namespace

async_target ep_async_target(ep* e) {
    async_target t = async_target_of(e, ep_route_eq);
    t.claim_terminal = ep_claim_terminal_cb;
    t.eq_flags = e->eq_flags;
    return t;
}

int ep_qp_init_attr(ep* e, enum ibv_qp_type type, uint32_t hdr_sge, struct ibv_qp_init_attr* a) {
    const struct ibv_device_attr& da = e->dom->dev->attr.orig_attr;
    uint32_t max_wr = da.max_qp_wr > 0 ? static_cast<uint32_t>(da.max_qp_wr) : 1024;
    uint32_t max_sge = da.max_sge > 0 ? static_cast<uint32_t>(da.max_sge) : 1 + hdr_sge;
    *a = {};
    a->qp_context = e;
    a->qp_type = type;
    a->sq_sig_all = 0;
    a->send_cq = cq_ibv(e->tx_cq);
    a->recv_cq = cq_ibv(e->rx_cq);
    a->srq = e->srx_fid ? srx_ibv(e->srx_fid) : nullptr;
    const fi_tx_attr* tx = e->info->tx_attr;
    const fi_rx_attr* rx = e->info->rx_attr;
    // a resumable connection's keepalive (msg/ep_keepalive.h) takes one slot
    // beyond what the application can fill (ep_resume_enable made sure the
    // device has it)
    const ep_dp* dp = e->dp.get();
    const uint32_t ka = type == IBV_QPT_RC && dp && dp->rs && dp->rs->keepalive_ms ? 1 : 0;
    a->cap.max_send_wr = clamp_u32((tx && tx->size ? tx->size : 256) + ka, 1, max_wr);
    a->cap.max_send_sge = clamp_u32(tx && tx->iov_limit ? tx->iov_limit : 1, 1, max_sge);
    a->cap.max_inline_data = tx ? static_cast<uint32_t>(tx->inject_size) : 0;
    if (!a->srq) {
        a->cap.max_recv_wr = clamp_u32(rx && rx->size ? rx->size : 256, 1, max_wr);
        a->cap.max_recv_sge =
            clamp_u32((rx && rx->iov_limit ? rx->iov_limit : 1) + hdr_sge, 1 + hdr_sge, max_sge);
    }
    if (!a->send_cq || !a->recv_cq) {
        EVD_WARN(FI_LOG_EP_CTRL, "endpoint needs a transmit and a receive CQ bound\n");
        return -FI_ENOCQ;
    }
    return 0;
}

namespace {

int qp_failed(const struct ibv_qp_init_attr& a, int err, const char* what) {
    EVD_WARN(FI_LOG_EP_CTRL, "%s(send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u): %s\n",
             what, a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge,
             a.cap.max_recv_sge, a.cap.max_inline_data, strerror(err));
    return fi_err(err);
}

// Makes e->qp on the domain's PD (evd's own device context, devctx.h), in
// INIT, with its ECE told to rdma_cm. An id already on a device drives the
// QP from here on (e->id->qp: RTR and RTS at connect or accept, ERR at
// disconnect); the endpoint still owns it (ep_destroy_qp).
int make_qp(msg_ep* e, struct ibv_qp_init_attr* a) EVD_REQUIRES(e->mu) {
    const qp_key key = qp_key_of(e->dom->pd.get(), *a);
    ibv_qp_ptr qp = qp_pool_take(e->dom, key);
    if (qp) {
        // A kept QP (qp_pool.h): in RESET, its queues empty, in no
        // endpoint's name since its last one closed (async events raised for
        // it meanwhile found no owner and were dropped; the record that
        // waited out its time-wait kept the device's async fd on the EQ
        // that delivered TIMEWAIT_EXIT, seconds after the QP's last event).
        qp->qp_context = e;
    } else {
        // Some providers fail without setting errno (libsiw when the kernel
        // could not map the queues): a stale EAGAIN would have the
        // application retry forever, so no errno is "out of resources".
        errno = 0;
        qp.reset(ibv_create_qp(e->dom->pd.get(), a));
        if (!qp) return qp_failed(*a, errno ? errno : ENOMEM, "ibv_create_qp");
    }
    agree_ece(e->id.get(), qp.get());  // before RTR: in RESET already
    bool bound = e->id->verbs != nullptr;
    if (int rc = bound ? init_bound_qp(e->id.get(), qp.get()) : init_unbound_qp(qp.get())) {
        if (rc == EINVAL && e->from_connreq) {
            // The kernel's CM left the request's state (the peer gave up and
            // its REJ arrived; rdma_ucm reports no event before rdma_accept).
            EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: the connection request ended before fi_accept\n");
            return -FI_ECONNABORTED;
        }
        return fi_err(rc);
    }
    if (bound) e->id->qp = qp.get();
    e->qp = std::move(qp);
    e->qkey = key;
    e->rq_marked.store(false);
    e->rq_after_marker.store(false);
    e->rq_closed.store(false);
    return 0;
}

}  // namespace

int ep_create_qp(msg_ep* e) {
    if (e->qp) return 0;
    if (!e->id) return -FI_EOPBADSTATE;
    domain* d = e->dom;
    if (e->id->verbs && e->id->verbs != d->dev->verbs) {
        EVD_WARN(FI_LOG_EP_CTRL,
                 "endpoint address is on device %s but its domain is %s\n",
                 ibv_get_device_name(e->id->verbs->device), d->dev->name.c_str());
        return -FI_EINVAL;
    }
    struct ibv_qp_init_attr a;
    if (int rc = ep_qp_init_attr(e, e->ekind->qp_type, 0, &a)) return rc;
    if (int rc = make_qp(e, &a)) return rc;
    async_target t = ep_async_target(e);
    t.consequence = async_ep_consequence;  // COMM_EST -> rdma_notify (async.cpp)
    devctx_register(d->dev, &devctx::qps, e->qp.get(), t);
    // The CQs route its fatal completions and count its completions on its
    // counters; without that the QP is not published: undone, the error
    // returned (a failed attach leaves nothing in its CQ).
    const uint32_t qpn = e->qp->qp_num;
    int ret = cq_attach_qp(e->tx_cq, qpn, e);
    if (!ret && e->rx_cq != e->tx_cq && (ret = cq_attach_qp(e->rx_cq, qpn, e)))
        cq_detach_qp(e->tx_cq, qpn);
    if (ret) {
        EVD_WARN(FI_LOG_EP_CTRL, "QP %u: its CQs could not take it (%d): not enabled\n", qpn, ret);
        devctx_unregister(d->dev, &devctx::qps, e->qp.get());
        ep_destroy_qp(e);
        return ret;
    }
    e->qp_ready.store(true);
    // an iWARP endpoint whose terminal event came first stays closed to
    // posts (ep_claim_terminal): both sides store, then load, sequentially
    // consistent, so one of them sees the other
    if (d->dev->iwarp && e->terminal.load()) e->qp_ready.store(false);
    return 0;
}

int ep_make_resume_qp(msg_ep* e, struct rdma_cm_id* id, ibv_qp_ptr* out) {
    if (!id || id->verbs != e->dom->dev->verbs) {
        EVD_WARN(FI_LOG_EP_CTRL, "resume: the new connection's id is not on the endpoint's "
                 "device\n");
        return -FI_EINVAL;
    }
    struct ibv_qp_init_attr a;
    if (int rc = ep_qp_init_attr(e, e->ekind->qp_type, 0, &a)) return rc;
    errno = 0;
    ibv_qp_ptr qp(ibv_create_qp(e->dom->pd.get(), &a));
    if (!qp) return qp_failed(a, errno ? errno : ENOMEM, "ibv_create_qp (resume)");
    agree_ece(id, qp.get());
    if (int rc = init_bound_qp(id, qp.get())) return fi_err(rc);
    // No COMM_EST consequence (rdma_notify of e->id): the id this QP belongs
    // to changes at the swap, and its ESTABLISHED comes with the RTU anyway
    // (a lost RTU is retransmitted by the peer's CM).
    // Called from an rdma_cm event or the outage's step, where no entry
    // point's guard turns an exception into a return: a registration with
    // no memory is this attempt's failure (the caller's backoff or refusal).
    try {
        devctx_register(e->dom->dev, &devctx::qps, qp.get(), ep_async_target(e));
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_EP_CTRL, "resume: QP %u: no memory to register it for its async "
                 "events\n", qp->qp_num);
        return -FI_ENOMEM;
    }
    const uint32_t qpn = qp->qp_num;
    int ret = cq_attach_qp(e->tx_cq, qpn, e);
    if (!ret && e->rx_cq != e->tx_cq && (ret = cq_attach_qp(e->rx_cq, qpn, e)))
        cq_detach_qp_keep(e->tx_cq, qpn);
    if (ret) {
        devctx_unregister(e->dom->dev, &devctx::qps, qp.get());
        return ret;
    }
    id->qp = qp.get();  // rdma_cm drives it from here (RTR, RTS); e owns it
    *out = std::move(qp);
    return 0;
}

void ep_drop_resume_qp(msg_ep* e, ibv_qp_ptr qp, struct rdma_cm_id* id) {
    if (!qp) return;
    if (id && id->qp == qp.get()) id->qp = nullptr;
    devctx_unregister(e->dom->dev, &devctx::qps, qp.get());
    cq_detach_qp_keep(e->tx_cq, qp->qp_num);
    if (e->rx_cq != e->tx_cq) cq_detach_qp_keep(e->rx_cq, qp->qp_num);
    qp.reset();
}

void ep_destroy_qp(msg_ep* e) {
    if (!e->qp) return;
    if (e->id && e->id->qp == e->qp.get()) e->id->qp = nullptr;  // rdma_cm lets go first
    e->qp.reset();
}

}  // namespace evd
