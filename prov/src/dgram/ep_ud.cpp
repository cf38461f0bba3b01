// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// FI_EP_DGRAM endpoints (ep.h): an evd endpoint on an unreliable datagram
// (UD) QP. It has no rdma_cm id and no connection: fi_enable makes the QP
// and takes it to RTS, fi_getname tells its FI_ADDR_IB_UD name, sends go to
// addresses of its bound AV (av.h). The data path is in ep_ud_data.cpp; the
// rest of its life (binds of CQs, counters and EQ, fi_close with its flush,
// async events and fatal completions) is what every endpoint shares
// (ep_control.cpp, ep_close.cpp); its fi_close is its own (ud_close).
#include <rdma/fi_atomic.h>

#include <cstring>

#include "cq/cq.h"
#include "device/async.h"
#include "device/devctx.h"
#include "dgram/av.h"
#include "dgram/gid_table.h"
#include "dgram/grh.h"
#include "dgram/ud_cm.h"
#include "domain.h"
#include "msg/ep.h"
#include "msg/srx.h"

namespace evd {

namespace {

int modify(struct ibv_qp* qp, struct ibv_qp_attr& at, int mask, const char* what) {
    int rc = ibv_modify_qp(qp, &at, mask);
    if (rc) EVD_WARN(FI_LOG_EP_CTRL, "ibv_modify_qp(%s) of UD QP %u: %s\n", what, qp->qp_num,
                     strerror(rc));
    return rc;
}

// RESET -> INIT (port, P_Key index 0, the UD Q_Key) -> RTR -> RTS.
int ud_to_rts(struct ibv_qp* qp, uint8_t port) {
    struct ibv_qp_attr at {};
    at.qp_state = IBV_QPS_INIT;
    at.pkey_index = 0;
    at.port_num = port;
    at.qkey = kUdQkey;
    if (int rc = modify(qp, at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
                        "INIT"))
        return rc;
    at = {};
    at.qp_state = IBV_QPS_RTR;
    if (int rc = modify(qp, at, IBV_QP_STATE, "RTR")) return rc;
    at = {};
    at.qp_state = IBV_QPS_RTS;
    at.sq_psn = 0;
    return modify(qp, at, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTS");
}

// The GID the endpoint is named by: its info's source name (FI_ADDR_IB_UD,
// from fi_getinfo), else the port's first IPv4-mapped RoCE v2 GID (or GID 0
// on InfiniBand). Checked against the port's table.
int local_gid(ud_ep* e, ud_name* n) {
    domain* d = e->dom;
    struct ibv_context* verbs = d->dev->ctx.get();
    const fi_info* info = e->info;
    if (info->src_addr && info->src_addrlen == kUdNameLen) {
        std::memcpy(n, info->src_addr, kUdNameLen);
        gid_entry g = gid_find(verbs, d->port_num, n->gid);
        if (g.index < 0) {
            // an fi_info of another device used on this domain (fi_shared_ctx
            // asks fi_getinfo(node, NULL) for its further endpoints, and on
            // one host the route to node may leave from the other device):
            // the domain's GID of the same kind, the service kept
            char text[128];
            ud_straddr(*n, text, sizeof text);
            g = gid_source_for(verbs, d->port_num, n->gid);
            if (g.index < 0) {
                EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: the source name %s is not a GID of port %u "
                         "of %s, which has none of its kind\n", text, d->port_num,
                         d->dev->name.c_str());
                return -FI_EADDRNOTAVAIL;
            }
            EVD_INFO(FI_LOG_EP_CTRL, "fi_enable: the source name %s is not on %s: named by its "
                     "GID index %d instead\n", text, d->dev->name.c_str(), g.index);
            std::memcpy(n->gid, g.gid, 16);
        }
        e->sgid_index = g.index;
        return 0;
    }
    static const uint8_t v4_any[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
    gid_entry g = gid_source_for(verbs, d->port_num, v4_any);
    if (g.index < 0) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: port %u of %s has no GID a datagram endpoint can "
                 "use\n", d->port_num, d->dev->name.c_str());
        return -FI_EADDRNOTAVAIL;
    }
    *n = {};
    std::memcpy(n->gid, g.gid, 16);
    e->sgid_index = g.index;
    return 0;
}

// The slots the headers of receives land in (ep.h, ud_ep::slots), for a
// receive queue of max_recv_wr. Slot k is reused by the receive posted
// nslots after the one that last had it; by then that one has completed
// (at most max_recv_wr are outstanding) and its completion has been read,
// since no more than the CQ's entries plus one poll batch of completions
// can be waiting to be read.
int make_rx_slots(ud_ep* e, uint32_t max_recv_wr) {
    static_assert(sizeof(ud_ep::rx_slot::hdr) == kGrhLen);
    e->nslots = e->source ? max_recv_wr + static_cast<uint32_t>(cq_ibv(e->rx_cq)->cqe) +
                                static_cast<uint32_t>(kCqPollBatch) + 1
                          : 1;
    const size_t bytes = static_cast<size_t>(e->nslots) * sizeof(ud_ep::rx_slot);
    e->slots.reset(new ud_ep::rx_slot[e->nslots]());  // fi_enable's guard: -FI_ENOMEM
    e->slots_mr.reset(ibv_reg_mr(e->dom->pd.get(), e->slots.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
    if (!e->slots_mr) {
        int err = errno ? errno : ENOMEM;
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: registering %zu bytes of receive headers: %s\n", bytes,
                 strerror(err));
        return fi_err(err);
    }
    return 0;
}

int make_self_ah(ud_ep* e) {
    struct ibv_ah_attr at {};
    at.port_num = e->dom->port_num;
    at.is_global = 1;
    std::memcpy(at.grh.dgid.raw, e->name.gid, 16);
    at.grh.sgid_index = static_cast<uint8_t>(e->sgid_index);
    at.grh.hop_limit = 64;
    at.dlid = e->name.lid;
    e->self_ah.reset(ibv_create_ah(e->dom->pd.get(), &at));
    if (!e->self_ah) {
        int err = errno ? errno : EINVAL;
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: address handle to itself: %s\n", strerror(err));
        return fi_err(err);
    }
    return 0;
}

// ---------------------------------------------------------------- fi_ops_cm
int ud_getname(fid_t f, void* addr, size_t* addrlen) {
    return guard([&] {
        ud_ep* e = ep_ud(ep_from_fid(f));
        if (!e || !addrlen) return -FI_EINVAL;
        evd::lock_guard lk(e->mu);
        if (!e->enabled) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_getname: a datagram endpoint has its name once enabled\n");
            return -FI_EOPBADSTATE;
        }
        const size_t have = *addrlen;
        *addrlen = kUdNameLen;
        if (!addr || have < kUdNameLen) return -FI_ETOOSMALL;
        std::memcpy(addr, &e->name, kUdNameLen);
        return 0;
    });
}

int ud_setname(fid_t, void*, size_t) {
    EVD_WARN(FI_LOG_EP_CTRL, "fi_setname: a datagram endpoint's name is its QP's (choose the "
             "address with fi_getinfo)\n");
    return -FI_ENOSYS;
}

int ud_getpeer(struct fid_ep*, void*, size_t*) { return -FI_ENOSYS; }
int ud_connect(struct fid_ep*, const void*, const void*, size_t) {
    EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: datagram endpoints do not connect\n");
    return -FI_ENOSYS;
}
int ud_listen(struct fid_pep*) { return -FI_ENOSYS; }
int ud_accept(struct fid_ep*, const void*, size_t) { return -FI_ENOSYS; }
int ud_reject(struct fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; }
int ud_shutdown(struct fid_ep*, uint64_t) { return -FI_ENOSYS; }
int ud_join(struct fid_ep*, const void*, uint64_t, struct fid_mc**, void*) { return -FI_ENOSYS; }

// Every RMA and atomic entry of a datagram endpoint: UD has neither.
template <class F>
struct unsupported;
template <class R, class... A>
struct unsupported<R (*)(A...)> {
    static R fn(A...) {
        EVD_WARN(FI_LOG_EP_DATA, "RMA and atomics need an FI_EP_MSG endpoint (UD has neither)\n");
        return -FI_ENOSYS;
    }
};
#define EVD_UNSUPPORTED(table, member) unsupported<decltype(table::member)>::fn

struct fi_ops_rma ud_rma_ops = {
    .size = sizeof(struct fi_ops_rma),
    .read = EVD_UNSUPPORTED(fi_ops_rma, read),
    .readv = EVD_UNSUPPORTED(fi_ops_rma, readv),
    .readmsg = EVD_UNSUPPORTED(fi_ops_rma, readmsg),
    .write = EVD_UNSUPPORTED(fi_ops_rma, write),
    .writev = EVD_UNSUPPORTED(fi_ops_rma, writev),
    .writemsg = EVD_UNSUPPORTED(fi_ops_rma, writemsg),
    .inject = EVD_UNSUPPORTED(fi_ops_rma, inject),
    .writedata = EVD_UNSUPPORTED(fi_ops_rma, writedata),
    .injectdata = EVD_UNSUPPORTED(fi_ops_rma, injectdata),
};

struct fi_ops_atomic ud_atomic_ops = {
    .size = sizeof(struct fi_ops_atomic),
    .write = EVD_UNSUPPORTED(fi_ops_atomic, write),
    .writev = EVD_UNSUPPORTED(fi_ops_atomic, writev),
    .writemsg = EVD_UNSUPPORTED(fi_ops_atomic, writemsg),
    .inject = EVD_UNSUPPORTED(fi_ops_atomic, inject),
    .readwrite = EVD_UNSUPPORTED(fi_ops_atomic, readwrite),
    .readwritev = EVD_UNSUPPORTED(fi_ops_atomic, readwritev),
    .readwritemsg = EVD_UNSUPPORTED(fi_ops_atomic, readwritemsg),
    .compwrite = EVD_UNSUPPORTED(fi_ops_atomic, compwrite),
    .compwritev = EVD_UNSUPPORTED(fi_ops_atomic, compwritev),
    .compwritemsg = EVD_UNSUPPORTED(fi_ops_atomic, compwritemsg),
    .writevalid = EVD_UNSUPPORTED(fi_ops_atomic, writevalid),
    .readwritevalid = EVD_UNSUPPORTED(fi_ops_atomic, readwritevalid),
    .compwritevalid = EVD_UNSUPPORTED(fi_ops_atomic, compwritevalid),
};

}  // namespace

namespace {
int ud_enable(ep* base) EVD_REQUIRES(base->mu);
int ud_close(ep* base);
int ud_marker_dest(ep* base, struct ibv_send_wr& wr);
}  // namespace

const ep_kind kDgramKind = {
    .name = "FI_EP_DGRAM",
    .qp_type = IBV_QPT_UD,
    .connected = false,
    .enable = ud_enable,
    .close = ud_close,
    .not_enabled = "datagram endpoint not enabled",
    .marker_dest = ud_marker_dest,
};

ud_ep::ud_ep() : ep(&kDgramKind) {}

void ep_ud_set_ops(ud_ep* e) {
    e->fid.cm = &ep_ud_cm_ops;
    e->fid.msg = &ep_ud_msg_ops;
    e->fid.rma = &ud_rma_ops;
    e->fid.atomic = &ud_atomic_ops;
    e->source = e->info->caps & FI_SOURCE;
}

int ep_ud_bind_av(ep* base, struct fid* bfid) {
    av* a = av_from_fid(bfid);
    if (!a) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: not an evd AV\n");
        return -FI_EINVAL;
    }
    ud_ep* e = ep_ud(base);
    if (!e) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: an FI_EP_MSG endpoint takes no AV\n");
        return -FI_EINVAL;
    }
    if (a->dom != e->dom) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: the AV belongs to another domain\n");
        return -FI_EINVAL;
    }
    if (e->av_bound) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: an AV is already bound\n");
        return -FI_EINVAL;
    }
    a->refs.get();
    e->av_bound = a;
    return 0;
}

namespace {

// fi_enable: the UD QP (in RTS), its header buffer, its name.
int ud_enable(ep* base) {
    ud_ep* e = ep_ud(base);
    e->mu.assert_held();  // base's own lock
    if (!e->av_bound) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: a datagram endpoint needs an AV bound\n");
        return -FI_ENOAV;
    }
    if (e->srx_fid && e->source) {
        // receives of a shared context complete in no endpoint's order: the
        // header of each cannot be kept for it (ep.h, ud_ep::slots)
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: FI_SOURCE and a shared receive context together are "
                 "not supported on datagram endpoints\n");
        return -FI_EOPNOTSUPP;
    }
    domain* d = e->dom;
    if (int r = local_gid(e, &e->name)) return r;
    struct ibv_port_attr pa {};
    if (ibv_query_port(d->dev->ctx.get(), d->port_num, &pa) == 0) {
        e->name.lid = pa.lid;
        e->name.sl = pa.sm_sl;
        e->max_msg = static_cast<size_t>(128) << pa.active_mtu;
    } else {
        e->max_msg = 256;
    }
    if (const fi_ep_attr* ea = e->info->ep_attr;
        ea && ea->max_msg_size && ea->max_msg_size < e->max_msg)
        e->max_msg = ea->max_msg_size;
    struct ibv_qp_init_attr a;
    // one receive SGE more than the user's: the header goes to a buffer of evd's own
    if (int rc = ep_qp_init_attr(e, e->ekind->qp_type, 1, &a)) return rc;
    errno = 0;
    ibv_qp_ptr qp(ibv_create_qp(d->pd.get(), &a));
    if (!qp) {
        int err = errno ? errno : ENOMEM;
        EVD_WARN(FI_LOG_EP_CTRL, "ibv_create_qp(UD, send_wr %u recv_wr %u send_sge %u recv_sge %u "
                 "inline %u): %s\n", a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge,
                 a.cap.max_recv_sge, a.cap.max_inline_data, strerror(err));
        return fi_err(err);
    }
    // the receive queue's real depth sizes the header slots
    if (int r = make_rx_slots(e, a.srq ? 0 : a.cap.max_recv_wr)) return r;
    // the CQs know the QP before any receive can complete (its length and
    // slot are theirs to fix: cq.cpp), and fatal completions reach e. Each
    // step is undone (in reverse) when a later one fails.
    const uint32_t qpn = qp->qp_num;
    if (int ret = cq_attach_qp(e->tx_cq, qpn, e)) return ret;
    undo_on_exit untx([&] { cq_detach_qp(e->tx_cq, qpn); });
    const bool own_rx = e->rx_cq != e->tx_cq;
    if (own_rx)
        if (int ret = cq_attach_qp(e->rx_cq, qpn, e)) return ret;
    undo_on_exit unrx([&] {
        if (own_rx) cq_detach_qp(e->rx_cq, qpn);
    });
    if (int rc = ud_to_rts(qp.get(), d->port_num)) return fi_err(rc);
    e->name.qpn = qpn;
    // qp stays this function's until every step succeeded: declared before
    // the undo steps, it is destroyed after them, once its CQs forgot it
    if (int r = make_self_ah(e)) return r;
    undo_on_exit unah([&] { e->self_ah.reset(); });
    // peers that know its IP and service find it by SIDR (ud_cm.h); a
    // service asked for must be had, an ephemeral one is best effort
    struct sockaddr_storage ss {};
    socklen_t sl = 0;
    gid_to_sockaddr(e->name.gid, e->name.service, &ss, &sl);
    int lerr = 0;
    uint16_t port = 0;
    ud_listener* listener = evd::ud_listen(reinterpret_cast<sockaddr*>(&ss), qpn, &port, &lerr);
    if (listener) {
        e->name.service = port;
    } else if (e->name.service) {
        return lerr ? lerr : -FI_EADDRNOTAVAIL;
    } else {
        EVD_INFO(FI_LOG_EP_CTRL, "fi_enable: no SIDR listener (%d): peers need its fi_getname\n",
                 lerr);
    }
    undo_on_exit unlisten([&] { ud_unlisten(listener); });
    devctx_register(d->dev, &devctx::qps, qp.get(), ep_async_target(e));
    untx.dismiss();
    unrx.dismiss();
    unah.dismiss();
    unlisten.dismiss();
    e->qp = std::move(qp);
    e->listener = listener;
    char text[128];
    ud_straddr(e->name, text, sizeof text);
    EVD_INFO(FI_LOG_EP_CTRL, "datagram endpoint %s on %s port %u (GID index %d, %zu-byte "
             "messages)\n", text, d->dev->name.c_str(), d->port_num, e->sgid_index,
             e->max_msg);
    e->qp_ready.store(true);
    return 0;
}

// fi_close: no peer learns its QP number any more, its QP goes (its
// queued work flushed first: the send marker is addressed to itself, so the
// address handle lives until then), then what fi_enable and fi_ep_bind(AV)
// took, then what every endpoint holds.
int ud_close(ep* base) {
    ud_ep* e = ep_ud(base);
    ud_unlisten(e->listener);
    e->listener = nullptr;
    ep_close_quiesce(e);
    ep_close_data(e);
    {
        evd::lock_guard lk(e->mu);
        e->qp.reset();
    }
    e->self_ah.reset();
    e->slots_mr.reset();
    e->slots.reset();
    if (e->av_bound) e->av_bound->refs.put();
    e->av_bound = nullptr;
    ep_close_common(e);
    return retire(e, &e->dom->refs);
}

// The work request of the closing flush's send marker needs an address on
// UD: itself (qp_flush.cpp).
int ud_marker_dest(ep* base, struct ibv_send_wr& wr) {
    ud_ep* e = ep_ud(base);
    if (!e->self_ah) return EINVAL;  // a UD send needs an address: the endpoint itself
    wr.wr.ud.ah = e->self_ah.get();
    wr.wr.ud.remote_qpn = e->name.qpn;
    wr.wr.ud.remote_qkey = kUdQkey;
    return 0;
}

}  // namespace

struct fi_ops_cm ep_ud_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = ud_setname,
    .getname = ud_getname,
    .getpeer = ud_getpeer,
    .connect = ud_connect,
    .listen = ud_listen,
    .accept = ud_accept,
    .reject = ud_reject,
    .shutdown = ud_shutdown,
    .join = ud_join,
};

}  // namespace evd
