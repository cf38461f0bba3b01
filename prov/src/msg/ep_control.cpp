// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// What every active endpoint answers the same way, whatever its kind:
// fi_ep_bind (EQ, CQs, SRX, counters, AV), fi_control (FI_ENABLE, the ops
// flags), fi_getopt/fi_setopt, and the fid and ep ops tables fi_endpoint
// gives it. Its kind's part: ep_msg.cpp (FI_EP_MSG), dgram/ep_ud.cpp.
#include "cq/cntr.h"
#include "cq/cq.h"
#include "device/devctx.h"
#include "domain.h"
#include "eq/eq.h"
#include "msg/ep.h"
#include "msg/ep_resume.h"
#include "msg/srx.h"

namespace evd {

int ep_enable(ep* e) {
    if (e->enabled) return 0;
    if (!e->eq_bound.load() && e->ekind->connected) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: no EQ bound\n");
        return -FI_ENOEQ;
    }
    if (int r = ep_data_enable(e)) return r;  // counters: internal CQs, send slots
    if (!e->tx_cq || !e->rx_cq) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: bind a transmit and a receive CQ first\n");
        return -FI_ENOCQ;
    }
    if (ep_msg(e))
        if (int r = ep_resume_enable(e)) return r;  // resumable: ledgers and copies
    if (int ret = e->ekind->enable(e)) return ret;
    e->enabled = true;
    return 0;
}

namespace {

int bind_eq(ep* e, struct fid* bfid, uint64_t flags) EVD_REQUIRES(e->mu) {
    eq* q = eq_from_fid(bfid);
    if (!q) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: not an evd EQ\n");
        return -FI_EINVAL;
    }
    if (e->eq_bound.load()) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: an EQ is already bound\n");
        return -FI_EINVAL;
    }
    // an FI_EP_MSG endpoint's rdma_cm id moves to the EQ's channel; a
    // datagram endpoint's EQ gets its async events and terminal records only
    if (msg_ep* m = ep_msg(e)) {
        m->mu.assert_held();  // e's own lock
        if (m->migrating) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: an EQ is already bound\n");
            return -FI_EINVAL;
        }
        if (int rc = ep_msg_bind_eq(m, q)) return rc;
    }
    eq_bind_ref(q);
    int ret = devctx_attach_eq(e->dom->dev, q);
    if (ret && ret != -FI_ENOSYS)
        EVD_INFO(FI_LOG_EP_CTRL, "devctx_attach_eq: %d (async events read elsewhere)\n", ret);
    e->eq_flags = flags;
    e->eq_bound.store(q);
    return 0;
}

int bind_cq(ep* e, struct fid* bfid, uint64_t flags) {
    cq* c = cq_from_fid(bfid);
    if (!c) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: not an evd CQ\n");
        return -FI_EINVAL;
    }
    if (cq_domain(c) != &e->dom->fid) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: the CQ belongs to another domain\n");
        return -FI_EINVAL;
    }
    if (!(flags & (FI_TRANSMIT | FI_RECV))) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(CQ): flags need FI_TRANSMIT and/or FI_RECV\n");
        return -FI_EINVAL;
    }
    if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(CQ): unsupported flags 0x%lx\n",
                 static_cast<unsigned long>(flags));
        return -FI_EBADFLAGS;
    }
    if (((flags & FI_TRANSMIT) && e->tx_cq) || ((flags & FI_RECV) && e->rx_cq)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: a CQ is already bound for that direction\n");
        return -FI_EINVAL;
    }
    if (flags & FI_TRANSMIT) {
        e->tx_cq = c;
        e->tx_flags = flags;
        cq_bind_ref(c);
    }
    if (flags & FI_RECV) {
        e->rx_cq = c;
        e->rx_flags = flags;
        cq_bind_ref(c);
    }
    return 0;
}

int ep_bind(struct fid* f, struct fid* bfid, uint64_t flags) {
    return guard([&] {
        ep* e = ep_from_fid(f);
        if (!e || !bfid) return -FI_EINVAL;
        evd::lock_guard lk(e->mu);
        if (e->enabled && bfid->fclass != FI_CLASS_CNTR) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: endpoint already enabled\n");
            return -FI_EOPBADSTATE;
        }
        switch (bfid->fclass) {
            case FI_CLASS_EQ:
                return bind_eq(e, bfid, flags);
            case FI_CLASS_CQ:
                return bind_cq(e, bfid, flags);
            case FI_CLASS_SRX_CTX:
                if (srx_ibv(bfid) && srx_for_dgram(bfid) != (e->ekind->qp_type == IBV_QPT_UD)) {
                    EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: the shared receive context is not for "
                             "%s endpoints (the type of its domain)\n", e->ekind->name);
                    return -FI_EINVAL;
                }
                if (e->srx_fid || !srx_ibv(bfid)) {
                    EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: bad or second shared receive context\n");
                    return -FI_EINVAL;
                }
                e->srx_fid = bfid;
                srx_bind_ref(bfid);
                return 0;
            case FI_CLASS_CNTR:
                return ep_data_bind(e, bfid, flags);
            case FI_CLASS_AV:
                return ep_ud_bind_av(e, bfid);
            default:
                EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: cannot bind fclass %zu to an endpoint\n",
                         bfid->fclass);
                return -FI_EINVAL;
        }
    });
}

int ep_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        ep* e = ep_from_fid(f);
        if (!e) return -FI_EINVAL;
        evd::lock_guard lk(e->mu);
        switch (command) {
            case FI_ENABLE:
                return ep_enable(e);
            case FI_GETOPSFLAG:
            case FI_SETOPSFLAG: {
                if (!arg) return -FI_EINVAL;
                auto* fl = static_cast<uint64_t*>(arg);
                bool tx = *fl & FI_TRANSMIT, rx = *fl & FI_RECV;
                if (tx == rx) return -FI_EINVAL;
                uint64_t& slot = tx ? e->op_flags_tx : e->op_flags_rx;
                if (command == FI_GETOPSFLAG)
                    *fl = (*fl & (FI_TRANSMIT | FI_RECV)) | slot;
                else
                    slot = *fl & ~(FI_TRANSMIT | FI_RECV);
                return 0;
            }
            case FI_EVD_RESUME_TIMEOUT_GET: {  // the endpoint's own: 0 unless resumable
                if (!arg) return -FI_EINVAL;
                const cntr_route* r = e->enabled ? ep_data_route(e) : nullptr;
                *static_cast<int*>(arg) = r && r->rs ? static_cast<int>(r->rs->timeout_ms) : 0;
                return 0;
            }
            default:
                return -FI_ENOSYS;
        }
    });
}

int ep_getopt(fid_t f, int level, int optname, void* optval, size_t* optlen) {
    return guard([&] {
        if (!ep_from_fid(f) || !optlen) return -FI_EINVAL;
        return cm_getopt(level, optname, optval, optlen);
    });
}

int ep_setopt(fid_t, int level, int optname, const void*, size_t) {
    return cm_setopt(level, optname);
}

ssize_t ep_no_cancel(fid_t, void*) { return -FI_ENOSYS; }
int ep_no_tx_ctx(struct fid_ep*, int, struct fi_tx_attr*, struct fid_ep**, void*) {
    return -FI_ENOSYS;
}
int ep_no_rx_ctx(struct fid_ep*, int, struct fi_rx_attr*, struct fid_ep**, void*) {
    return -FI_ENOSYS;
}
ssize_t ep_no_size_left(struct fid_ep*) { return -FI_ENOSYS; }

struct fi_ops ep_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = ep_close,
    .bind = ep_bind,
    .control = ep_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_ep ep_ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = ep_no_cancel,
    .getopt = ep_getopt,
    .setopt = ep_setopt,
    .tx_ctx = ep_no_tx_ctx,
    .rx_ctx = ep_no_rx_ctx,
    .rx_size_left = ep_no_size_left,
    .tx_size_left = ep_no_size_left,
};

}  // namespace

ep* ep_from_fid(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_EP) return nullptr;
    return from_fid<ep>(reinterpret_cast<struct fid_ep*>(f));
}

eq* ep_route_eq(void* owner) {
    ep* e = static_cast<ep*>(owner);
    if (eq* q = e->eq_bound.load()) return q;
    return e->dom ? e->dom->eq_bound.load() : nullptr;
}

// fi_endpoint (ep_open.cpp) gives a new endpoint these ops, whatever its kind.
void ep_set_ops(ep* e) {
    e->fid.fid.ops = &ep_fi_ops;
    e->fid.ops = &ep_ep_ops;
}

}  // namespace evd
