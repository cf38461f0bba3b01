// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Data path of a datagram endpoint (ep.h): fi_send*/fi_recv*/fi_inject* on
// its UD QP. A send names an address of the bound AV (av.h): one lock-free
// lookup, then the work request on the stack, as on MSG endpoints
// (ep_post_sq decides signaling and counters). A receive is posted with the
// 40-byte header every UD message starts with landing in evd's own buffer
// (ep.h, ud_ep::slots), never in the user's: no FI_MSG_PREFIX.
#include <arpa/inet.h>
#include <sys/uio.h>

#include <cstring>

#include "cq/cntr.h"
#include "cq/cq.h"
#include "dgram/av.h"
#include "dgram/grh.h"
#include "domain.h"
#include "msg/ep.h"

namespace evd {

namespace {

size_t iov_total(const struct iovec* iov, size_t count) {
    size_t t = 0;
    for (size_t i = 0; i < count && iov; ++i) t += iov[i].iov_len;
    return t;
}

// The datagram endpoint behind an fi_ep of these tables (set on datagram
// endpoints only, ep_ud_set_ops).
inline ud_ep* ud_of(struct fid_ep* f) { return static_cast<ud_ep*>(ep_of(f)); }

ssize_t ud_sq(ud_ep* e, const struct iovec* iov, void* const* desc, size_t count, fi_addr_t dest,
              bool has_imm, uint64_t data, void* context, uint64_t flags, bool no_ctx) {
    const av* a = e->av_bound;
    if (!a || !e->qp_ready.load(std::memory_order_acquire)) {
        EVD_WARN(FI_LOG_EP_DATA, "send: datagram endpoint not enabled\n");
        return -FI_EOPBADSTATE;
    }
    const av_entry* to = av_entry_of(a, dest);
    if (!to) {
        EVD_WARN(FI_LOG_EP_DATA, "send: fi_addr %llu is not in the endpoint's AV\n",
                 static_cast<unsigned long long>(dest));
        return -FI_EINVAL;
    }
    const size_t total = iov_total(iov, count);
    if (total > e->max_msg) {
        // rxe would end the QP for it
        EVD_WARN(FI_LOG_EP_DATA, "send of %zu bytes: a datagram carries at most %zu (the port's "
                 "MTU, max_msg_size)\n", total, e->max_msg);
        return -FI_EMSGSIZE;
    }
    const size_t inl_max = ep_max_inline(e);
    if ((flags & FI_INJECT) && total > inl_max) {
        EVD_WARN(FI_LOG_EP_DATA, "inject of %zu bytes: the endpoint's inject size is %zu\n", total,
                 inl_max);
        return -FI_EINVAL;
    }
    const bool inl = total && total <= inl_max;
    struct ibv_send_wr wr {};
    struct ibv_sge sge[kMaxIov];
    int nsge = 0;
    size_t t = 0;
    if (ssize_t r = ep_fill_sges(iov, desc, count, inl, sge, kMaxIov, nsge, t)) return r;
    wr.sg_list = nsge ? sge : nullptr;
    wr.num_sge = nsge;
    if (inl) wr.send_flags |= IBV_SEND_INLINE;
    wr.opcode = IBV_WR_SEND;
    if (has_imm) {
        if (data > UINT32_MAX) {
            EVD_WARN(FI_LOG_EP_DATA, "remote CQ data 0x%llx exceeds cq_data_size (4 bytes)\n",
                     static_cast<unsigned long long>(data));
            return -FI_EINVAL;
        }
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(static_cast<uint32_t>(data));
    }
    wr.wr.ud.ah = to->ah.get();
    wr.wr.ud.remote_qpn = to->name.qpn;
    wr.wr.ud.remote_qkey = kUdQkey;
    return ep_post_sq(e, wr, tx_kind::send, !no_ctx && ep_tx_completion(e, flags), no_ctx, context);
}

ssize_t ud_rq(ud_ep* e, const struct iovec* iov, void* const* desc, size_t count, void* context,
              uint64_t flags) {
    struct ibv_sge sge[kMaxIov];  // sge[0]: the GRH slot's header
    int nsge = 0;
    if (ssize_t r = ep_rx_prepare(e, iov, desc, count, sge, 1, nsge)) return r;
    struct ibv_recv_wr wr {};
    sge[0].addr = reinterpret_cast<uintptr_t>(e->slots[0].hdr);
    sge[0].length = kGrhLen;
    sge[0].lkey = e->slots_mr->lkey;
    wr.sg_list = sge;
    wr.num_sge = nsge + 1;
    wr.wr_id = ep_rx_wr_id(e, flags, context);
    struct ibv_recv_wr* bad = nullptr;
    int r;
    if (e->source) {
        // the next slot of the ring carries the header and the user's wr_id
        evd::lock_guard lk(e->rx_mu);
        ud_ep::rx_slot& s = e->slots[e->rx_posted % e->nslots];
        s.wr_id = wr.wr_id;
        s.hdr[0] = s.hdr[20] = 0;  // a header the device leaves short is not read as an old one
        sge[0].addr = reinterpret_cast<uintptr_t>(s.hdr);
        wr.wr_id = reinterpret_cast<uintptr_t>(&s);
        r = post_errno(ibv_post_recv(ep_qp_of(e), &wr, &bad));
        if (r == 0) ++e->rx_posted;
    } else {
        r = post_errno(ibv_post_recv(ep_qp_of(e), &wr, &bad));
    }
    return r == 0 ? 0 : ep_rx_post_failed(r, "ibv_post_recv (UD)");
}

// ---------------------------------------------------------------- fi_msg
ssize_t ud_recv(struct fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t, void* context) {
    ud_ep* e = ud_of(f);
    struct iovec iov = {buf, len};
    return ud_rq(e, &iov, &desc, 1, context, e->op_flags_rx);
}

ssize_t ud_recvv(struct fid_ep* f, const struct iovec* iov, void** desc, size_t count, fi_addr_t,
                 void* context) {
    ud_ep* e = ud_of(f);
    return ud_rq(e, iov, desc, count, context, e->op_flags_rx);
}

ssize_t ud_recvmsg(struct fid_ep* f, const struct fi_msg* msg, uint64_t flags) {
    if (!msg) return -FI_EINVAL;
    return ud_rq(ud_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}

ssize_t ud_send(struct fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest,
                void* context) {
    ud_ep* e = ud_of(f);
    struct iovec iov = {const_cast<void*>(buf), len};
    return ud_sq(e, &iov, &desc, 1, dest, false, 0, context, e->op_flags_tx, false);
}

ssize_t ud_sendv(struct fid_ep* f, const struct iovec* iov, void** desc, size_t count,
                 fi_addr_t dest, void* context) {
    ud_ep* e = ud_of(f);
    return ud_sq(e, iov, desc, count, dest, false, 0, context, e->op_flags_tx, false);
}

ssize_t ud_sendmsg(struct fid_ep* f, const struct fi_msg* msg, uint64_t flags) {
    if (!msg) return -FI_EINVAL;
    return ud_sq(ud_of(f), msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
                 flags & FI_REMOTE_CQ_DATA, msg->data, msg->context, flags, false);
}

ssize_t ud_inject(struct fid_ep* f, const void* buf, size_t len, fi_addr_t dest) {
    struct iovec iov = {const_cast<void*>(buf), len};
    return ud_sq(ud_of(f), &iov, nullptr, 1, dest, false, 0, nullptr, FI_INJECT, true);
}

ssize_t ud_senddata(struct fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                    fi_addr_t dest, void* context) {
    ud_ep* e = ud_of(f);
    struct iovec iov = {const_cast<void*>(buf), len};
    return ud_sq(e, &iov, &desc, 1, dest, true, data, context, e->op_flags_tx, false);
}

ssize_t ud_injectdata(struct fid_ep* f, const void* buf, size_t len, uint64_t data,
                      fi_addr_t dest) {
    struct iovec iov = {const_cast<void*>(buf), len};
    return ud_sq(ud_of(f), &iov, nullptr, 1, dest, true, data, nullptr, FI_INJECT, true);
}

}  // namespace

bool ep_ud_completion(ud_ep* e, struct ibv_wc& wc, fi_addr_t* from) {
    *from = FI_ADDR_NOTAVAIL;
    const ud_ep::rx_slot* s = nullptr;
    if (e->source) {
        const auto first = reinterpret_cast<uintptr_t>(e->slots.get());
        const uintptr_t at = static_cast<uintptr_t>(wc.wr_id);
        if (at >= first && at < first + e->nslots * sizeof(ud_ep::rx_slot)) {
            s = reinterpret_cast<const ud_ep::rx_slot*>(at);
            wc.wr_id = s->wr_id;  // the user's, in error too
        }
    }
    if (wc.status != IBV_WC_SUCCESS || !(wc.opcode & IBV_WC_RECV)) return false;
    wc.byte_len = wc.byte_len >= kGrhLen ? wc.byte_len - kGrhLen : 0;
    uint8_t gid[16];
    if (s && e->av_bound && (wc.wc_flags & IBV_WC_GRH) && grh_source_gid(s->hdr, gid))
        *from = av_find(e->av_bound, gid, wc.src_qp);
    return true;
}

struct fi_ops_msg ep_ud_msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = ud_recv,
    .recvv = ud_recvv,
    .recvmsg = ud_recvmsg,
    .send = ud_send,
    .sendv = ud_sendv,
    .sendmsg = ud_sendmsg,
    .inject = ud_inject,
    .senddata = ud_senddata,
    .injectdata = ud_injectdata,
};

}  // namespace evd
