// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Data path of an active MSG endpoint: fi_send*/fi_recv* (fi_msg(3)) and
// fi_read*/fi_write* (fi_rma(3)) as ibv_post_send/ibv_post_recv on ep->qp.
//
// Every work request is built on the stack; nothing is allocated and no lock
// is taken (ibv_post_* on one QP is thread safe in rdma-core providers),
// except on a resumable endpoint (ep_resume.h): its one lock per post keeps
// the ledger in the QP's order, and wr_id names the ledger's slot. Otherwise
// wr_id is the user's context (or, with counters, a slot id: cntr.h); work
// requests whose success must not be reported (fi_inject*, the periodic
// signaled send of selective completion) carry wr_id_suppressed() (cq.h)
// and are dropped by the CQ reader.
//
// Limits taken from the endpoint's fi_info (the CM half creates the QP with
// them): tx_attr->inject_size = ibv_qp_cap.max_inline_data,
// tx_attr->size = max_send_wr, tx/rx iov_limit = max_send_sge/max_recv_sge.
#include <arpa/inet.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <memory>

#include "cq/cntr.h"
#include "cq/cq.h"
#include "domain.h"
#include "mr/mr.h"
#include "msg/ep.h"
#include "msg/ep_dp.h"

namespace evd {

namespace {

// Never null on an open endpoint: fi_endpoint fails without it (ep_data_init).
ep_dp* dp_of(ep* e) { return e->dp.get(); }

// Fills sge[] from iov/desc. Zero-length entries are skipped. `inl`: the data
// is copied inline, descriptors are not needed.
EVD_ALWAYS_INLINE ssize_t fill_sges(const struct iovec* iov, void* const* desc, size_t count,
                                    bool inl, struct ibv_sge* sge, int& nsge, size_t& total) {
    if (count > kMaxIov || (count && !iov)) {
        EVD_WARN(FI_LOG_EP_DATA, "post: %zu iovs (at most %zu, non-NULL)\n", count, kMaxIov);
        return -FI_EINVAL;
    }
    nsge = 0;
    total = 0;
    if (!__builtin_constant_p(count) && count == 1) [[likely]] {
        // one entry, the shape of nearly every post: straight-line (the loop
        // below costs fi_sendmsg and fi_recvmsg a dozen instructions more;
        // where count is a constant the loop folds, and this would only
        // move registers)
        if (!iov[0].iov_len) return 0;
        uint32_t lkey = 0;
        if (!inl) {
            if (!desc || !desc[0]) {
                EVD_WARN(FI_LOG_EP_DATA, "post: iov 0 has no memory descriptor (FI_MR_LOCAL: "
                                         "pass fi_mr_desc() of a registration covering it)\n");
                return -FI_EINVAL;
            }
            lkey = mr_desc_lkey(desc[0]);
        }
        sge[0].addr = reinterpret_cast<uintptr_t>(iov[0].iov_base);
        sge[0].length = static_cast<uint32_t>(iov[0].iov_len);
        sge[0].lkey = lkey;
        nsge = 1;
        total = iov[0].iov_len;
        return 0;
    }
    for (size_t i = 0; i < count; ++i) {
        if (!iov[i].iov_len) continue;
        uint32_t lkey = 0;
        if (!inl) {
            if (!desc || !desc[i]) {
                EVD_WARN(FI_LOG_EP_DATA, "post: iov %zu has no memory descriptor (FI_MR_LOCAL: "
                                         "pass fi_mr_desc() of a registration covering it)\n", i);
                return -FI_EINVAL;
            }
            lkey = mr_desc_lkey(desc[i]);
        }
        sge[nsge].addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
        sge[nsge].length = static_cast<uint32_t>(iov[i].iov_len);
        sge[nsge].lkey = lkey;
        ++nsge;
        total += iov[i].iov_len;
    }
    return 0;
}

// A send-queue request on an endpoint with counters bound (slot mode): every
// request is signaled, carries a slot id (cntr.h), and the CQ hides its
// success unless the user asked for a completion. *slot_out: the slot taken.
EVD_ALWAYS_INLINE ssize_t take_slot(ep_dp* dp, struct ibv_send_wr& wr, tx_kind kind, bool hidden,
                                    void* context, uint32_t& slot_out) {
    cntr_route& r = dp->route;
    uint32_t i = r.next.fetch_add(1, std::memory_order_relaxed) % r.nslots;
    if (r.slots[i].busy.exchange(true, std::memory_order_acquire))
        return -FI_EAGAIN;  // its completion was not polled yet
    tx_slot& s = r.slots[i];
    s.context.store(context, std::memory_order_relaxed);
    s.kind.store(kind, std::memory_order_relaxed);
    s.hidden.store(hidden, std::memory_order_relaxed);
    wr.send_flags |= IBV_SEND_SIGNALED;
    wr.wr_id = tx_slot_wr_id(i);
    slot_out = i;
    return 0;
}

// Signaling and wr_id of a send-queue request without counters.
//  comp:   the user asked for a completion (FI_COMPLETION or no selective)
//  no_ctx: never report success (fi_inject*)
// Unsignaled send-queue slots are only reclaimed when a later signaled
// request completes: one in every signal_every is signaled, and hidden.
EVD_ALWAYS_INLINE void set_completion(ep_dp* d, struct ibv_send_wr& wr, bool comp, bool no_ctx,
                                      void* context) {
    if (comp && !no_ctx) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        wr.wr_id = reinterpret_cast<uintptr_t>(context);
        return;
    }
    wr.wr_id = no_ctx ? wr_id_suppressed() : reinterpret_cast<uintptr_t>(context);
    uint32_t n = d->unsignaled.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n % d->signal_every == 0) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        wr.wr_id = wr_id_suppressed();
    }
}

int qp_post_send(void* arg, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
    return post_errno(ibv_post_send(ep_qp_of(static_cast<ep*>(arg)), wr, bad));
}

int qp_post_recv(void* arg, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
    return post_errno(ibv_post_recv(ep_qp_of(static_cast<ep*>(arg)), wr, bad));
}

__attribute__((noinline)) post_batch<struct ibv_send_wr>* make_tx_batch(ep_dp* d) {
    return d->txb.get_or_make(d->tx_depth, d->max_inline);
}

// flags: FI_MORE holds wr in the endpoint's batch (post_batch.h), and
// FI_INJECT says an inline send's bytes are copied then (the caller may
// reuse its buffer at once); without it they are read at the flush. The
// flags themselves are passed, not what they say: they are in a register
// already, two decisions would cost every post without FI_MORE a few
// instructions. Without FI_MORE a held batch goes first, in one chain
// with wr.
EVD_ALWAYS_INLINE ssize_t post_send(ep* e, struct ibv_send_wr& wr, uint64_t flags) {
    if (!e->qp_ready.load(std::memory_order_acquire)) {
        if (e->terminal.load())
            EVD_WARN(FI_LOG_EP_DATA, "post: the endpoint's connection has ended (iWARP)\n");
        else
            EVD_WARN(FI_LOG_EP_DATA, "post: endpoint has no queue pair yet (fi_enable/fi_connect first)\n");
        return -FI_EOPBADSTATE;
    }
    int r;
    ep_dp* d = dp_of(e);
    post_batch<struct ibv_send_wr>* b = d->txb.get();
    const bool more = flags & FI_MORE;
    if (more && !b) b = make_tx_batch(d);
    if (b && (more || b->holding())) [[unlikely]] {
        r = b->submit(wr, more, qp_post_send, e,
                      flags & FI_INJECT ? held_data::copied : held_data::referenced);
    } else {
        struct ibv_send_wr* bad = nullptr;
        r = post_errno(ibv_post_send(ep_qp_of(e), &wr, &bad));
    }
    if (r == 0) return 0;
    if (r == ENOMEM || r == EAGAIN) return -FI_EAGAIN;  // send queue full
    EVD_WARN(FI_LOG_EP_DATA, "ibv_post_send: %s\n", strerror(r));
    return fi_err(r);
}

}  // namespace


bool ep_tx_completion(ep* e, uint64_t flags) {
    if (!(e->tx_flags & FI_SELECTIVE_COMPLETION)) return true;
    return flags & FI_COMPLETION;
}

namespace {

// ep_post_sq, inlined into this file's posts (their constants fold away)
EVD_ALWAYS_INLINE ssize_t post_sq(ep* e, struct ibv_send_wr& wr, tx_kind kind, bool comp,
                                  bool no_ctx, void* context, uint64_t flags) {
    ep_dp* d = dp_of(e);
    if (d->rs) {  // resumable: through the ledger (ep_resume.h)
        const uintptr_t sink = reinterpret_cast<uintptr_t>(e->dom->atomic_sink.get());
        return rs_post_send(*d->rs, wr, rs_op_kind(wr, sink), static_cast<uint8_t>(kind), !comp,
                            no_ctx, context,
                            [e](struct ibv_send_wr& w) { return post_send(e, w, 0); });
    }
    if (d->counted) {
        uint32_t slot = 0;
        if (ssize_t r = take_slot(d, wr, kind, !comp || no_ctx, context, slot)) return r;
        ssize_t r = post_send(e, wr, flags);
        if (r) d->route.slots[slot].busy.store(false, std::memory_order_release);
        return r;
    }
    set_completion(d, wr, comp, no_ctx, context);
    return post_send(e, wr, flags);
}

}  // namespace

ssize_t ep_post_sq(ep* e, struct ibv_send_wr& wr, tx_kind kind, bool comp, bool no_ctx,
                   void* context, bool more) {
    // held with FI_MORE, whatever inline data these carry is copied
    return post_sq(e, wr, kind, comp, no_ctx, context, more ? FI_MORE | FI_INJECT : 0);
}

ssize_t ep_fill_sges(const struct iovec* iov, void* const* desc, size_t count, bool inl,
                     struct ibv_sge* sge, size_t max_sge, int& nsge, size_t& total) {
    if (count > max_sge) {
        EVD_WARN(FI_LOG_EP_DATA, "post: %zu iovs (at most %zu)\n", count, max_sge);
        return -FI_EINVAL;
    }
    return fill_sges(iov, desc, count, inl, sge, nsge, total);
}

namespace {

// ep_rx_prepare, inlined into this file's receives
EVD_ALWAYS_INLINE ssize_t rx_prepare(ep* e, const struct iovec* iov, void* const* desc, size_t count,
                   struct ibv_sge* sge, size_t first, int& nsge) {
    if (e->srx_fid) {
        EVD_WARN(FI_LOG_EP_DATA, "fi_recv on an endpoint bound to a shared receive context: "
                                 "post to the fi_srx_context instead\n");
        return -FI_EOPBADSTATE;
    }
    if (!e->qp_ready.load(std::memory_order_acquire)) {
        EVD_WARN(FI_LOG_EP_DATA, "fi_recv: %s\n",
                 e->terminal.load() ? "the endpoint's connection has ended (iWARP)"
                                    : e->ekind->not_enabled);
        return -FI_EOPBADSTATE;
    }
    size_t total = 0;
    if (count > kMaxIov - first) {
        EVD_WARN(FI_LOG_EP_DATA, "post: %zu iovs (at most %zu)\n", count, kMaxIov - first);
        return -FI_EINVAL;
    }
    return fill_sges(iov, desc, count, false, sge + first, nsge, total);
}

}  // namespace

ssize_t ep_rx_prepare(ep* e, const struct iovec* iov, void* const* desc, size_t count,
                      struct ibv_sge* sge, size_t first, int& nsge) {
    return rx_prepare(e, iov, desc, count, sge, first, nsge);
}

ssize_t ep_rx_post_failed(int r, const char* what) {
    if (r == ENOMEM || r == EAGAIN) return -FI_EAGAIN;
    EVD_WARN(FI_LOG_EP_DATA, "%s: %s\n", what, strerror(r));
    return fi_err(r);
}

size_t ep_max_inline(ep* e) { return dp_of(e)->max_inline; }

namespace {

size_t iov_total(const struct iovec* iov, size_t count) {
    if (!__builtin_constant_p(count) && count == 1 && iov) [[likely]] return iov[0].iov_len;
    size_t t = 0;
    for (size_t i = 0; i < count && iov; ++i) t += iov[i].iov_len;
    return t;
}

size_t max_inline(ep* e) { return dp_of(e)->max_inline; }

int imm_of(uint64_t data, uint32_t& imm) {
    if (data > UINT32_MAX) {
        EVD_WARN(FI_LOG_EP_DATA, "remote CQ data 0x%llx exceeds cq_data_size (4 bytes)\n",
                 static_cast<unsigned long long>(data));
        return -FI_EINVAL;
    }
    imm = htonl(static_cast<uint32_t>(data));
    return 0;
}

// One send-queue operation: SEND/WRITE/READ, with or without immediate data.
//  inject: FI_INJECT semantics (inline copy, must fit); no_ctx: fi_inject*.
EVD_ALWAYS_INLINE ssize_t do_sq(ep* e, enum ibv_wr_opcode op, const struct iovec* iov, void* const* desc,
              size_t count, uint64_t raddr, uint64_t rkey, bool has_imm, uint64_t data,
              void* context, uint64_t flags, bool no_ctx) {
    // Cleared up to the last union (memory-window binds and TSO, which an
    // RC send, write or read never reads): 88 bytes of stores instead of
    // 128 (a 16-word `rep stos` was a sixth of an fi_write's instructions).
    struct ibv_send_wr wr;
    std::memset(&wr, 0, offsetof(struct ibv_send_wr, bind_mw));
    struct ibv_sge sge[kMaxIov];
    size_t total = iov_total(iov, count);
    size_t inl_max = max_inline(e);
    bool inject = flags & FI_INJECT;
    if (inject && (total > inl_max || op == IBV_WR_RDMA_READ)) {
        EVD_WARN(FI_LOG_EP_DATA, "inject of %zu bytes: the endpoint's inject size is %zu\n", total,
                 inl_max);
        return -FI_EINVAL;
    }
    // small transfers go inline even without FI_INJECT: no lkey lookup on
    // the device, lower latency
    bool inl = op != IBV_WR_RDMA_READ && total && total <= inl_max;
    int nsge = 0;
    size_t t = 0;
    if (ssize_t r = fill_sges(iov, desc, count, inl, sge, nsge, t)) return r;
    wr.sg_list = nsge ? sge : nullptr;
    wr.num_sge = nsge;
    if (inl) wr.send_flags |= IBV_SEND_INLINE;
    if (flags & FI_FENCE) wr.send_flags |= IBV_SEND_FENCE;
    if (op == IBV_WR_SEND && has_imm) op = IBV_WR_SEND_WITH_IMM;
    if (op == IBV_WR_RDMA_WRITE && has_imm) op = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.opcode = op;
    if (has_imm) {
        if (e->dom->dev->iwarp) {
            EVD_WARN(FI_LOG_EP_DATA, "remote CQ data on %s: iWARP carries no immediate data "
                     "(cq_data_size is 0)\n", e->dom->dev->name.c_str());
            return -FI_EOPNOTSUPP;
        }
        if (int r = imm_of(data, wr.imm_data)) return r;
    }
    if (op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM) {
        if (rkey > UINT32_MAX) {
            EVD_WARN(FI_LOG_EP_DATA, "RMA key 0x%llx is not an evd key (keys are 32-bit rkeys)\n",
                     static_cast<unsigned long long>(rkey));
            return -FI_EINVAL;
        }
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = static_cast<uint32_t>(rkey);
    }
    const tx_kind kind = op == IBV_WR_RDMA_READ ? tx_kind::read
                         : (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM)
                             ? tx_kind::write
                             : tx_kind::send;
    // held with FI_MORE, an inject's inline data is copied (its buffer is
    // the caller's again on return); any other send's stays in the
    // caller's buffer, which is not the caller's until the completion
    return post_sq(e, wr, kind, !no_ctx && ep_tx_completion(e, flags), no_ctx, context, flags);
}

// The receive batch a post goes through (FI_MORE, or a batch held), or
// nullptr: posted at once. Inline: the common answer (no FI_MORE, no batch
// ever made) is two loads; the batch is made out of line.
__attribute__((noinline)) post_batch<struct ibv_recv_wr>* make_rx_batch(ep_dp* d) {
    return d->rxb.get_or_make(d->rx_depth, 0);
}

EVD_ALWAYS_INLINE post_batch<struct ibv_recv_wr>* batch_for_rx(ep* e, bool more) {
    ep_dp* d = dp_of(e);
    post_batch<struct ibv_recv_wr>* b = d->rxb.get();
    if (!b) return more ? make_rx_batch(d) : nullptr;
    return more || b->holding() ? b : nullptr;
}

// A receive on a resumable endpoint, through its ledger; out of line, so
// that the plain receive keeps its locals in registers. r: the post's errno
// (0 when it was not posted or succeeded).
__attribute__((noinline)) ssize_t post_recv_resumable(ep* e, ep_resume& rs,
                                                      struct ibv_recv_wr& wr, int& r) {
    struct ibv_recv_wr* bad = nullptr;
    return rs_post_recv(rs, wr, wr.wr_id, [&](struct ibv_recv_wr& w) {
        r = post_errno(ibv_post_recv(ep_qp_of(e), &w, &bad));
        return r ? ssize_t{-FI_EAGAIN} : ssize_t{0};  // the ledger takes it back
    });
}

EVD_ALWAYS_INLINE ssize_t do_rq(ep* e, const struct iovec* iov, void* const* desc, size_t count,
                                void* context, uint64_t flags) {
    struct ibv_sge sge[kMaxIov];
    int nsge = 0;
    if (ssize_t r = rx_prepare(e, iov, desc, count, sge, 0, nsge)) return r;
    // Once the connection ended (fi_shutdown, the peer's disconnect:
    // qp_mark_receives), the QP is on its way to the error state, and a
    // receive posted then may never be flushed: it would never complete.
    // Refused instead, as a post after the end is on iWARP.
    if (e->rq_closed.load(std::memory_order_acquire)) {
        EVD_WARN(FI_LOG_EP_DATA, "fi_recv: the endpoint's connection has ended; the receive "
                 "is not posted\n");
        return -FI_EOPBADSTATE;
    }
    struct ibv_recv_wr wr {};
    wr.sg_list = nsge ? sge : nullptr;
    wr.num_sge = nsge;
    wr.wr_id = ep_rx_wr_id(e, flags, context);
    int r = 0;
    if (ep_dp* d = dp_of(e); d->rs) {  // resumable: through the ledger (ep_resume.h)
        if (const ssize_t ret = post_recv_resumable(e, *d->rs, wr, r); ret && !r)
            return ret;  // refused before the post: full, or cannot be kept
    } else if (post_batch<struct ibv_recv_wr>* b = batch_for_rx(e, flags & FI_MORE)) {
        r = b->submit(wr, flags & FI_MORE, qp_post_recv, e);
    } else {
        struct ibv_recv_wr* bad = nullptr;
        r = post_errno(ibv_post_recv(ep_qp_of(e), &wr, &bad));
    }
    if (r == 0) {
        // The marker went in between the check above and this post: this
        // receive may never be flushed, so the QP is not kept for reuse
        // (ep.h).
        if (e->rq_marked.load()) e->rq_after_marker.store(true, std::memory_order_relaxed);
        return 0;
    }
    return ep_rx_post_failed(r, "ibv_post_recv");
}

// ---------------------------------------------------------------- fi_msg
ssize_t ep_recv(struct fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {buf, len};
    return do_rq(e, &iov, &desc, 1, context, e->op_flags_rx);
}

ssize_t ep_recvv(struct fid_ep* f, const struct iovec* iov, void** desc, size_t count, fi_addr_t,
                 void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    return do_rq(e, iov, desc, count, context, e->op_flags_rx);
}

ssize_t ep_recvmsg(struct fid_ep* f, const struct fi_msg* msg, uint64_t flags) {
    ep* e = ep_of(f);
    if (!e || !msg) return -FI_EINVAL;
    return do_rq(e, msg->msg_iov, msg->desc, msg->iov_count, msg->context, flags);
}

ssize_t ep_send(struct fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t,
                void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_SEND, &iov, &desc, 1, 0, 0, false, 0, context, e->op_flags_tx, false);
}

ssize_t ep_sendv(struct fid_ep* f, const struct iovec* iov, void** desc, size_t count, fi_addr_t,
                 void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    return do_sq(e, IBV_WR_SEND, iov, desc, count, 0, 0, false, 0, context, e->op_flags_tx, false);
}

ssize_t ep_sendmsg(struct fid_ep* f, const struct fi_msg* msg, uint64_t flags) {
    ep* e = ep_of(f);
    if (!e || !msg) return -FI_EINVAL;
    return do_sq(e, IBV_WR_SEND, msg->msg_iov, msg->desc, msg->iov_count, 0, 0,
                 flags & FI_REMOTE_CQ_DATA, msg->data, msg->context, flags, false);
}

ssize_t ep_inject(struct fid_ep* f, const void* buf, size_t len, fi_addr_t) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_SEND, &iov, nullptr, 1, 0, 0, false, 0, nullptr, FI_INJECT, true);
}

ssize_t ep_senddata(struct fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                    fi_addr_t, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_SEND, &iov, &desc, 1, 0, 0, true, data, context, e->op_flags_tx, false);
}

ssize_t ep_injectdata(struct fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_SEND, &iov, nullptr, 1, 0, 0, true, data, nullptr, FI_INJECT, true);
}

// ---------------------------------------------------------------- fi_rma
ssize_t ep_read(struct fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t, uint64_t addr,
                uint64_t key, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {buf, len};
    return do_sq(e, IBV_WR_RDMA_READ, &iov, &desc, 1, addr, key, false, 0, context,
                 e->op_flags_tx, false);
}

ssize_t ep_readv(struct fid_ep* f, const struct iovec* iov, void** desc, size_t count, fi_addr_t,
                 uint64_t addr, uint64_t key, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    return do_sq(e, IBV_WR_RDMA_READ, iov, desc, count, addr, key, false, 0, context,
                 e->op_flags_tx, false);
}

int check_rma_msg(const struct fi_msg_rma* msg) {
    if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov) {
        EVD_WARN(FI_LOG_EP_DATA, "fi_readmsg/fi_writemsg: exactly one rma_iov is supported\n");
        return -FI_EINVAL;
    }
    return 0;
}

ssize_t ep_readmsg(struct fid_ep* f, const struct fi_msg_rma* msg, uint64_t flags) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    if (int r = check_rma_msg(msg)) return r;
    return do_sq(e, IBV_WR_RDMA_READ, msg->msg_iov, msg->desc, msg->iov_count, msg->rma_iov[0].addr,
                 msg->rma_iov[0].key, false, 0, msg->context, flags, false);
}

ssize_t ep_write(struct fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t,
                 uint64_t addr, uint64_t key, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_RDMA_WRITE, &iov, &desc, 1, addr, key, false, 0, context,
                 e->op_flags_tx, false);
}

ssize_t ep_writev(struct fid_ep* f, const struct iovec* iov, void** desc, size_t count, fi_addr_t,
                  uint64_t addr, uint64_t key, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    return do_sq(e, IBV_WR_RDMA_WRITE, iov, desc, count, addr, key, false, 0, context,
                 e->op_flags_tx, false);
}

ssize_t ep_writemsg(struct fid_ep* f, const struct fi_msg_rma* msg, uint64_t flags) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    if (int r = check_rma_msg(msg)) return r;
    return do_sq(e, IBV_WR_RDMA_WRITE, msg->msg_iov, msg->desc, msg->iov_count,
                 msg->rma_iov[0].addr, msg->rma_iov[0].key, flags & FI_REMOTE_CQ_DATA, msg->data,
                 msg->context, flags, false);
}

ssize_t ep_inject_write(struct fid_ep* f, const void* buf, size_t len, fi_addr_t, uint64_t addr,
                        uint64_t key) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_RDMA_WRITE, &iov, nullptr, 1, addr, key, false, 0, nullptr, FI_INJECT,
                 true);
}

ssize_t ep_writedata(struct fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                     fi_addr_t, uint64_t addr, uint64_t key, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_RDMA_WRITE, &iov, &desc, 1, addr, key, true, data, context,
                 e->op_flags_tx, false);
}

ssize_t ep_inject_writedata(struct fid_ep* f, const void* buf, size_t len, uint64_t data,
                            fi_addr_t, uint64_t addr, uint64_t key) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct iovec iov = {const_cast<void*>(buf), len};
    return do_sq(e, IBV_WR_RDMA_WRITE, &iov, nullptr, 1, addr, key, true, data, nullptr, FI_INJECT,
                 true);
}

// Ops tables (defined at the end of the file).
extern struct fi_ops_msg ep_msg_ops;
extern struct fi_ops_rma ep_rma_ops;

}  // namespace

int ep_data_init(ep* e) {
    e->fid.msg = &ep_msg_ops;
    e->fid.rma = &ep_rma_ops;
    e->fid.atomic = &ep_atomic_ops;  // ep_atomic.cpp
    e->dp.reset(new (std::nothrow) ep_dp);
    ep_dp* d = e->dp.get();
    if (!d) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: no memory for the endpoint's data-path state\n");
        return -FI_ENOMEM;
    }
    if (e->info && e->info->tx_attr) {
        size_t inj = e->info->tx_attr->inject_size;
        d->max_inline = inj;
        size_t depth = e->info->tx_attr->size;
        d->signal_every = static_cast<uint32_t>(std::max<size_t>(1, depth / 2));
        d->tx_depth = std::clamp<size_t>(depth, 1, kBatchMax);
        if (e->info->rx_attr)
            d->rx_depth = std::clamp<size_t>(e->info->rx_attr->size, 1, kBatchMax);
    }
    return 0;
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops_msg ep_msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = ep_recv,
    .recvv = ep_recvv,
    .recvmsg = ep_recvmsg,
    .send = ep_send,
    .sendv = ep_sendv,
    .sendmsg = ep_sendmsg,
    .inject = ep_inject,
    .senddata = ep_senddata,
    .injectdata = ep_injectdata,
};

struct fi_ops_rma ep_rma_ops = {
    .size = sizeof(struct fi_ops_rma),
    .read = ep_read,
    .readv = ep_readv,
    .readmsg = ep_readmsg,
    .write = ep_write,
    .writev = ep_writev,
    .writemsg = ep_writemsg,
    .inject = ep_inject_write,
    .writedata = ep_writedata,
    .injectdata = ep_inject_writedata,
};

}  // namespace

}  // namespace evd
