// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Shared receive contexts (fi_srx_context) over one ibv_srq each. Endpoints
// bound to it are created with ibv_qp_init_attr::srq = srx_ibv(); receives are
// posted here with fi_recv*(srx_ep, ...) and complete on the receiving
// endpoint's receive CQ. On a domain opened for FI_EP_DGRAM the context is
// for datagram endpoints: each receive starts with the 40-byte UD header,
// scattered into a buffer of the context's own (ep.h, ud_ep::slots).
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "cq/cq.h"
#include "dgram/grh.h"
#include "domain.h"
#include "eq/eq.h"
#include "mr/mr.h"
#include "msg/ep.h"
#include "msg/qp_pool.h"
#include "msg/srx.h"
#include "owners.h"

namespace evd {

struct srx : object_head<struct fid_ep, kind::srx> {
    refcount refs;      // endpoints bound
    domain* dom = nullptr;
    ibv_srq_ptr srq;  // fi_close releases it itself (its failure keeps the object)
    uint32_t max_sge = 1;  // the application's, without the header's
    // datagram endpoints only: the header all receives share (nobody reads it)
    bool ud = false;
    std::unique_ptr<uint8_t[]> grh;
    ibv_mr_ptr grh_mr;
};

namespace {

srx* srx_of(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_SRX_CTX) return nullptr;
    return from_fid<srx>(reinterpret_cast<struct fid_ep*>(f));
}

ssize_t post_recv(srx* s, const struct iovec* iov, void* const* desc, size_t count, void* context) {
    if (count > s->max_sge || (count && !iov)) {
        EVD_WARN(FI_LOG_EP_DATA, "fi_recv(srx): %zu iovs (at most %u, non-NULL)\n", count, s->max_sge);
        return -FI_EINVAL;
    }
    struct ibv_sge sge[kMaxIov + 1];
    int n = 0;
    if (s->ud) {
        sge[n].addr = reinterpret_cast<uintptr_t>(s->grh.get());
        sge[n].length = kGrhLen;
        sge[n].lkey = s->grh_mr->lkey;
        ++n;
    }
    for (size_t i = 0; i < count; ++i) {
        if (!iov[i].iov_len) continue;
        if (!desc || !desc[i]) {
            EVD_WARN(FI_LOG_EP_DATA, "fi_recv(srx): iov %zu has no memory descriptor\n", i);
            return -FI_EINVAL;
        }
        sge[n].addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
        sge[n].length = static_cast<uint32_t>(iov[i].iov_len);
        sge[n].lkey = mr_desc_lkey(desc[i]);
        ++n;
    }
    struct ibv_recv_wr wr {};
    wr.wr_id = reinterpret_cast<uintptr_t>(context);
    wr.sg_list = n ? sge : nullptr;
    wr.num_sge = n;
    struct ibv_recv_wr* bad = nullptr;
    int r = post_errno(ibv_post_srq_recv(s->srq.get(), &wr, &bad));
    if (r == 0) return 0;
    if (r == ENOMEM || r == EAGAIN) return -FI_EAGAIN;
    EVD_WARN(FI_LOG_EP_DATA, "ibv_post_srq_recv: %s\n", strerror(r));
    return fi_err(r);
}

ssize_t srx_recv(struct fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t, void* context) {
    srx* s = from_fid<srx>(f);
    if (!s) return -FI_EINVAL;
    struct iovec iov = {buf, len};
    return post_recv(s, &iov, &desc, 1, context);
}

ssize_t srx_recvv(struct fid_ep* f, const struct iovec* iov, void** desc, size_t count, fi_addr_t,
                  void* context) {
    srx* s = from_fid<srx>(f);
    if (!s) return -FI_EINVAL;
    return post_recv(s, iov, desc, count, context);
}

ssize_t srx_recvmsg(struct fid_ep* f, const struct fi_msg* msg, uint64_t flags) {
    srx* s = from_fid<srx>(f);
    if (!s || !msg) return -FI_EINVAL;
    return post_recv(s, msg->msg_iov, msg->desc, msg->iov_count, msg->context);
}

ssize_t no_send(struct fid_ep*, const void*, size_t, void*, fi_addr_t, void*) { return -FI_ENOSYS; }
ssize_t no_sendv(struct fid_ep*, const struct iovec*, void**, size_t, fi_addr_t, void*) {
    return -FI_ENOSYS;
}
ssize_t no_sendmsg(struct fid_ep*, const struct fi_msg*, uint64_t) { return -FI_ENOSYS; }
ssize_t no_inject(struct fid_ep*, const void*, size_t, fi_addr_t) { return -FI_ENOSYS; }
ssize_t no_senddata(struct fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, void*) {
    return -FI_ENOSYS;
}
ssize_t no_injectdata(struct fid_ep*, const void*, size_t, uint64_t, fi_addr_t) {
    return -FI_ENOSYS;
}

ssize_t srx_cancel(fid_t, void*) { return -FI_ENOSYS; }
int srx_getopt(fid_t, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; }
int srx_setopt(fid_t, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; }
int srx_tx_ctx(struct fid_ep*, int, struct fi_tx_attr*, struct fid_ep**, void*) { return -FI_ENOSYS; }
int srx_rx_ctx(struct fid_ep*, int, struct fi_rx_attr*, struct fid_ep**, void*) { return -FI_ENOSYS; }
ssize_t srx_size_left(struct fid_ep*) { return -FI_ENOSYS; }

eq* srx_route(void* owner) { return static_cast<srx*>(owner)->dom->eq_bound.load(); }

int srx_close(struct fid* f) {
    return guard([&] {
        srx* s = srx_of(f);
        if (!s) return -FI_EINVAL;
        if (s->refs.busy()) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_close(srx): %d endpoints still bound\n", s->refs.n.load());
            return -FI_EBUSY;
        }
        devctx_unregister(s->dom->dev, &devctx::srqs, s->srq.get());
        qp_pool_purge_srq(s->srq.get());  // kept QPs still hold the SRQ
        if (int e = release_with(s->srq, ibv_destroy_srq)) {
            EVD_WARN(FI_LOG_EP_CTRL, "ibv_destroy_srq: %s\n", strerror(e));
            return fi_err(e);
        }
        return retire(s, &s->dom->refs);
    });
}

int srx_control(struct fid* f, int command, void*) {
    if (!srx_of(f)) return -FI_EINVAL;
    return command == FI_ENABLE ? 0 : -FI_ENOSYS;
}

// Ops tables (defined at the end of the file).
extern struct fi_ops srx_fi_ops;
extern struct fi_ops_ep srx_ep_ops;
extern struct fi_ops_msg srx_msg_ops;

}  // namespace

bool srx_for_dgram(struct fid* f) {
    srx* s = srx_of(f);
    return s && s->ud;
}

struct ibv_srq* srx_ibv(struct fid* f) {
    srx* s = srx_of(f);
    return s ? s->srq.get() : nullptr;
}
void srx_bind_ref(struct fid* f) {
    if (srx* s = srx_of(f)) s->refs.get();
}
void srx_bind_unref(struct fid* f) {
    if (srx* s = srx_of(f)) s->refs.put();
}

namespace {

// The SRQ's depth and SGE count: attr's (else the domain's rx_attr, else
// 256 and 1), trimmed to the device's SRQ limits.
void srq_limits(domain* dom, const struct fi_rx_attr* attr, size_t* size_out, size_t* sge_out) {
    const auto& da = dom->dev->attr.orig_attr;
    size_t size = (attr && attr->size) ? attr->size
                  : (dom->info && dom->info->rx_attr && dom->info->rx_attr->size)
                      ? dom->info->rx_attr->size
                      : 256;
    size_t sge = (attr && attr->iov_limit) ? attr->iov_limit : 1;
    // fi_getinfo's rx_attr describes a QP's receive queue (max_qp_wr,
    // max_sge); an SRQ may offer less (rxe: 27 SGEs on an SRQ, 32 on a
    // QP). Callers pass that rx_attr here (fabtests do), so a request
    // beyond the SRQ's limits is trimmed to them, and the values granted
    // are written back to *attr, as fi_endpoint(3) lets a provider do
    // for context attributes. Posts check the granted iov_limit.
    size_t max_wr = da.max_srq_wr > 0 ? static_cast<size_t>(da.max_srq_wr) : size;
    size_t max_sge = std::min<size_t>(kMaxIov, da.max_srq_sge > 0 ? static_cast<size_t>(da.max_srq_sge)
                                                                  : kMaxIov);
    if (size > max_wr) {
        EVD_INFO(FI_LOG_EP_CTRL, "fi_srx_context: size %zu trimmed to the device's SRQ depth %zu\n",
                 size, max_wr);
        size = max_wr;
    }
    if (sge > max_sge) {
        EVD_INFO(FI_LOG_EP_CTRL, "fi_srx_context: iov_limit %zu trimmed to the SRQ's %zu\n", sge,
                 max_sge);
        sge = max_sge;
    }
    *size_out = size;
    *sge_out = sge;
}

}  // namespace

int srx_open(struct fid_domain* dom_fid, struct fi_rx_attr* attr, struct fid_ep** out,
             void* context) {
    return guard([&] {
        domain* dom = domain_from_fid(dom_fid);
        if (!dom || !out) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_srx_context: invalid domain or NULL rx_ep\n");
            return -FI_EINVAL;
        }
        size_t size = 0, sge = 0;
        srq_limits(dom, attr, &size, &sge);
        auto s = std::make_unique<srx>();
        s->ud = dom->info && dom->info->ep_attr && dom->info->ep_attr->type == FI_EP_DGRAM;
        if (s->ud) {  // one SGE more, for the header
            if (sge + 1 > static_cast<size_t>(dom->dev->attr.orig_attr.max_srq_sge) && sge > 1) --sge;
            s->grh.reset(new uint8_t[kGrhLen]());
            s->grh_mr.reset(ibv_reg_mr(dom->pd.get(), s->grh.get(), kGrhLen,
                                       IBV_ACCESS_LOCAL_WRITE));
            if (!s->grh_mr) {
                int e = errno;
                EVD_WARN(FI_LOG_EP_CTRL, "fi_srx_context: registering the receive header: %s\n",
                         strerror(e));
                return fi_err(e);
            }
        }
        struct ibv_srq_init_attr ia {};
        ia.srq_context = s.get();
        ia.attr.max_wr = static_cast<uint32_t>(size);
        ia.attr.max_sge = static_cast<uint32_t>(sge + (s->ud ? 1 : 0));
        s->srq.reset(ibv_create_srq(dom->pd.get(), &ia));
        if (!s->srq) {
            int e = errno;
            EVD_WARN(FI_LOG_EP_CTRL, "ibv_create_srq(%zu x %zu): %s\n", size, sge, strerror(e));
            return fi_err(e);
        }
        s->dom = dom;
        s->max_sge = static_cast<uint32_t>(
            std::min<size_t>(ia.attr.max_sge - (s->ud ? 1 : 0), kMaxIov));  // sge[] bound
        fid_init(*s, FI_CLASS_SRX_CTX, context, &srx_fi_ops, &srx_ep_ops);
        s->fid.msg = &srx_msg_ops;
        if (attr) {
            attr->size = ia.attr.max_wr;
            attr->iov_limit = s->max_sge;
        }
        devctx_register(dom->dev, &devctx::srqs, s->srq.get(), async_target_of(s.get(), srx_route));  // throws: s frees the SRQ
        return hand_out(std::move(s), dom->refs, out);
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops srx_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = srx_close,
    .bind = op_no_bind,
    .control = srx_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_ep srx_ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = srx_cancel,
    .getopt = srx_getopt,
    .setopt = srx_setopt,
    .tx_ctx = srx_tx_ctx,
    .rx_ctx = srx_rx_ctx,
    .rx_size_left = srx_size_left,
    .tx_size_left = srx_size_left,
};

struct fi_ops_msg srx_msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = srx_recv,
    .recvv = srx_recvv,
    .recvmsg = srx_recvmsg,
    .send = no_send,
    .sendv = no_sendv,
    .sendmsg = no_sendmsg,
    .inject = no_inject,
    .senddata = no_senddata,
    .injectdata = no_injectdata,
};

}  // namespace

}  // namespace evd
