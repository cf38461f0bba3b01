// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// An active endpoint's RC queue pair: its size from the endpoint's
// attributes and the device's limits, its creation on the domain's PD, and
// its registration for async events and fatal completions (ep.h).
#include <rdma/rdma_cma.h>

#include <cstring>

#include "async.h"
#include "cq.h"
#include "devctx.h"
#include "domain.h"
#include "ep.h"
#include "srx.h"

namespace evd {

namespace {

uint32_t clamp_u32(size_t v, uint32_t lo, uint32_t hi) {
    if (v < lo) return lo;
    if (v > hi) return hi;
    return static_cast<uint32_t>(v);
}

// Moves a QP evd made itself from RESET to INIT, so that receives can be
// posted before the connection exists. The port and P_Key index are
// placeholders: librdmacm moves the QP through INIT again with the values
// address resolution chose (INIT->INIT may change both) before RTR.
int init_own_qp(struct ibv_qp* qp) {
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

// The QP's attributes: its CQs (and SRQ) and its sizes, from the
// endpoint's attributes within the device's limits.
int qp_attrs(ep* e, struct ibv_qp_init_attr* a) {
    const struct ibv_device_attr& da = e->dom->dev->attr.orig_attr;
    uint32_t max_wr = da.max_qp_wr > 0 ? static_cast<uint32_t>(da.max_qp_wr) : 1024;
    uint32_t max_sge = da.max_sge > 0 ? static_cast<uint32_t>(da.max_sge) : 1;
    *a = {};
    a->qp_context = e;
    a->qp_type = IBV_QPT_RC;
    a->sq_sig_all = 0;
    a->send_cq = cq_ibv(e->tx_cq);
    a->recv_cq = cq_ibv(e->rx_cq);
    a->srq = e->srx_fid ? srx_ibv(e->srx_fid) : nullptr;
    const fi_tx_attr* tx = e->info->tx_attr;
    const fi_rx_attr* rx = e->info->rx_attr;
    a->cap.max_send_wr = clamp_u32(tx && tx->size ? tx->size : 256, 1, max_wr);
    a->cap.max_send_sge = clamp_u32(tx && tx->iov_limit ? tx->iov_limit : 1, 1, max_sge);
    a->cap.max_inline_data = tx ? static_cast<uint32_t>(tx->inject_size) : 0;
    if (!a->srq) {
        a->cap.max_recv_wr = clamp_u32(rx && rx->size ? rx->size : 256, 1, max_wr);
        a->cap.max_recv_sge = clamp_u32(rx && rx->iov_limit ? rx->iov_limit : 1, 1, max_sge);
    }
    if (!a->send_cq || !a->recv_cq) {
        EVD_WARN(FI_LOG_EP_CTRL, "endpoint needs a transmit and a receive CQ bound\n");
        return -FI_ENOCQ;
    }
    return 0;
}

int qp_failed(const struct ibv_qp_init_attr& a, int err, const char* what) {
    EVD_WARN(FI_LOG_EP_CTRL, "%s(send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u): %s\n",
             what, a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge,
             a.cap.max_recv_sge, a.cap.max_inline_data, strerror(err));
    return fi_err(err);
}

// Makes e->qp: through rdma_create_qp when the id is on a device already,
// else on the domain's PD, in INIT, with its ECE told to rdma_cm.
int make_qp(ep* e, struct ibv_qp_init_attr* a) {
    if (e->id->verbs) {
        if (rdma_create_qp(e->id.get(), e->dom->pd.get(), a))
            return qp_failed(*a, errno, "rdma_create_qp");
        e->qp.reset(e->id->qp);  // destroyed through the id (ep_destroy_qp)
        return 0;
    }
    ibv_qp_ptr qp(ibv_create_qp(e->dom->pd.get(), a));
    if (!qp) return qp_failed(*a, errno, "ibv_create_qp");
    if (int rc = init_own_qp(qp.get())) return fi_err(rc);
    // What rdma_create_qp would tell rdma_cm about the QP: its ECE
    // (a device without ECE answers EOPNOTSUPP or vendor 0: nothing to say).
    struct ibv_ece ece = {};
    if (ibv_query_ece(qp.get(), &ece) == 0 && ece.vendor_id &&
        rdma_set_local_ece(e->id.get(), &ece))
        EVD_INFO(FI_LOG_EP_CTRL, "rdma_set_local_ece: %s\n", strerror(errno));
    e->qp = std::move(qp);
    return 0;
}

}  // namespace

int ep_create_qp(ep* e) {
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
    if (int rc = qp_attrs(e, &a)) return rc;
    if (int rc = make_qp(e, &a)) return rc;
    async_target t;
    t.fid = &e->fid.fid;
    t.context = e->fid.fid.context;
    t.route = ep_route_eq;
    t.owner = e;
    t.claim_terminal = ep_claim_terminal_cb;
    t.eq_flags = e->eq_flags;
    t.consequence = async_ep_consequence;  // COMM_EST -> rdma_notify (async.cpp)
    devctx_register(d->dev, &devctx::qps, e->qp.get(), t);
    int ret = cq_attach_qp(e->tx_cq, e->qp->qp_num, e);
    if (!ret && e->rx_cq != e->tx_cq) ret = cq_attach_qp(e->rx_cq, e->qp->qp_num, e);
    if (ret && ret != -FI_ENOSYS)
        EVD_WARN(FI_LOG_EP_CTRL, "cq_attach_qp: %d (fatal completions not routed)\n", ret);
    e->qp_ready.store(true, std::memory_order_release);
    return 0;
}

void ep_destroy_qp(ep* e) {
    if (!e->qp) return;
    if (e->id && e->id->qp == e->qp.get()) {
        (void)e->qp.release();
        rdma_destroy_qp(e->id.get());  // also forgets it in the id
    } else {
        e->qp.reset();  // never handed to the id
    }
}

}  // namespace evd
