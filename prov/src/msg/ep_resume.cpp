// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The resumable half of an MSG endpoint's data path (ep_resume.h): what the
// ledger takes an operation as, and a completion placed in its ledger.
#include "msg/ep_resume.h"

#include <algorithm>
#include <memory>
#include <new>

#include "cq/cq.h"  // wr_id_suppressed
#include "device/devctx.h"
#include "domain.h"
#include "evd.h"
#include "msg/ep.h"
#include "msg/ep_dp.h"
#include "resume/failure_table.h"

namespace evd {

ep_resume::ep_resume(uint32_t tx_size, uint32_t tx_sge, uint32_t max_inline, uint32_t rx_size,
                     uint32_t rx_sge, uint32_t timeout, uint32_t keepalive)
    : timeout_ms(timeout),
      keepalive_ms(keepalive),
      tx(tx_size),
      rx(rx_size),
      ops(tx.slots(), tx_sge, max_inline, rx.slots(), rx_sge) {}

int ep_resume_enable(ep* e) {
    ep_dp* d = e->dp.get();
    const uint32_t ms = e->dom->resume_timeout_ms.load(std::memory_order_relaxed);
    if (!d || !ms || d->rs) return d || !ms ? 0 : -FI_ENOMEM;
    const struct fi_tx_attr* tx = e->info ? e->info->tx_attr : nullptr;
    const struct fi_rx_attr* rx = e->info ? e->info->rx_attr : nullptr;
    auto u32 = [](size_t v, size_t dflt) {
        return static_cast<uint32_t>(std::min<size_t>(v ? v : dflt, kRsMaxSlots));
    };
    const uint32_t txn = u32(tx ? tx->size : 0, 256), txs = u32(tx ? tx->iov_limit : 0, 1);
    // On a shared receive context the endpoint posts no receive of its own:
    // its receive half only counts the peer's messages.
    const bool shared = e->srx_fid != nullptr;
    const uint32_t rxn = shared ? 1 : u32(rx ? rx->size : 0, 256);
    const uint32_t rxs = shared ? 1 : u32(rx ? rx->iov_limit : 0, 1);
    const uint32_t inl = static_cast<uint32_t>(tx ? tx->inject_size : 0);
    // The keepalive needs one more slot on the send queue than the
    // application can fill (ep_qp_init_attr gives it): none when the
    // device's queues are no deeper than what the application asked for.
    const int ka_param = get_params().resume_keepalive_ms;
    uint32_t ka = ka_param < 0 ? std::max<uint32_t>(ms / 10, 100) : static_cast<uint32_t>(ka_param);
    const int max_wr = e->dom->dev->attr.orig_attr.max_qp_wr;
    if (ka && max_wr > 0 && txn >= static_cast<uint32_t>(max_wr)) {
        EVD_INFO(FI_LOG_EP_CTRL, "fi_enable: tx size %u is the device's most: no room for the "
                 "resumable connection's keepalive (FI_EVD_RESUME_KEEPALIVE)\n", txn);
        ka = 0;
    }
    try {
        d->rs = std::make_unique<ep_resume>(txn, txs, inl, rxn, rxs, ms, ka);
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: no memory for the resumable connection's ledgers\n");
        return -FI_ENOMEM;
    }
    d->route.rs = d->rs.get();
    d->rs->verbs = e->dom->dev->verbs;
    d->rs->port = e->dom->port_num;
    size_t kept = 0;
    {
        evd::lock_guard g(d->rs->mu);
        kept = d->rs->ops.bytes();
    }
    EVD_DBG(FI_LOG_EP_CTRL, "fi_enable: resumable (deadline %u ms, keepalive %u ms): %zu "
            "bytes of copies for %u sends (%u iovs, %u inline bytes) and %u receives (%u iovs)\n",
            ms, ka, kept, txn, txs, inl, rxn, rxs);
    return 0;
}

resume::op_kind rs_op_kind(const struct ibv_send_wr& wr, uintptr_t atomic_sink) noexcept {
    switch (wr.opcode) {
    case IBV_WR_RDMA_WRITE: return resume::op_kind::write;
    case IBV_WR_RDMA_READ: return resume::op_kind::read;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        // base fi_atomic(FI_SUM): the old value goes to the sink nobody reads
        if (atomic_sink && wr.num_sge == 1 && wr.sg_list[0].addr == atomic_sink)
            return resume::op_kind::atomic;
        return resume::op_kind::fetch_atomic;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return resume::op_kind::fetch_atomic;
    default:  // SEND, SEND_WITH_IMM, RDMA_WRITE_WITH_IMM: each consumes a receive
        return resume::op_kind::message;
    }
}

uint32_t rs_depth(ep_resume& rs, bool send, bool recv) {
    evd::lock_guard g(rs.mu);
    // the keepalive (msg/ep_keepalive.h) is one more request on the send queue
    const uint32_t ka = rs.keepalive_ms ? 1 : 0;
    return (send ? rs.tx.capacity() + ka : 0) + (recv ? rs.rx.capacity() : 0);
}

enum ibv_wc_opcode rs_wc_opcode(enum ibv_wr_opcode op) noexcept {
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default: return IBV_WC_SEND;
    }
}

ssize_t rs_refuse(resume::keep_error why, const char* what) {
    EVD_WARN(FI_LOG_EP_DATA, "%s: %s\n", what, resume::keep_error_text(why));
    return -FI_EINVAL;
}

ssize_t rs_refuse_ended(const char* what) {
    EVD_WARN(FI_LOG_EP_DATA, "%s: the resumable connection ended (its outage was not "
             "ridden through): not posted\n", what);
    return -FI_EOPBADSTATE;
}

int rs_post_queued(ep_resume& rs, struct ibv_qp* qp, bool sends) {
    uint64_t seq = 0;
    while (rs.rx.next_queued(seq)) {
        struct ibv_recv_wr* bad = nullptr;
        if (int r = post_errno(ibv_post_recv(qp, &rs.ops.recv(rs.rx.slot_of(seq)).wr, &bad)))
            return r;
        rs.rx.posted(seq);
    }
    if (!sends) return 0;
    while (rs.tx.next_queued(seq)) {
        struct ibv_send_wr* bad = nullptr;
        if (int r = post_errno(ibv_post_send(qp, &rs.ops.send(rs.tx.slot_of(seq)).wr, &bad)))
            return r;
        rs.tx.posted(seq);
    }
    return 0;
}

bool rs_port_down(const ep_resume& rs, int status) {
    return status == IBV_WC_LOC_QP_OP_ERR && rs.verbs && !port_active_now(rs.verbs, rs.port);
}

bool rs_hold_failure(ep_resume& rs, int status, bool port_down, bool* began) {
    *began = false;
    // held stays set once the outage ended: a late flush then names an
    // operation already cancelled from the ledger, and is dropped
    if (rs.held) return true;
    if (!rs.armed) return false;
    const bool transient =
        resume::failure_verdict_of(resume::failure_source::completion, status) ==
            resume::failure_verdict::transient ||
        (status == IBV_WC_LOC_QP_OP_ERR && port_down);
    if (!transient) {
        rs.armed = false;  // the connection ends here, as without resumption
        return false;
    }
    rs.held = true;
    rs.held_tx = rs.held_rx = 0;
    rs.cause_status = status;
    *began = true;
    return true;
}

namespace {

// The keepalive's completion (msg/ep_keepalive.h), under rs.mu. A success
// is progress like any other and is not shown; a failure is the path's, held
// back as any failed operation would be, or, when nothing holds it, the
// endpoint's end (a flush after the connection ended is nothing).
rs_placed rs_keepalive_done(ep_resume& rs, const struct ibv_wc& wc, bool port_down)
    EVD_REQUIRES(rs.mu) {
    rs.ka_out = false;
    if (wc.status == IBV_WC_SUCCESS) {
        if (rs.sess.state() == resume::session_state::exchanging) rs.early_progress = true;
        rs.sess.progress();
        return rs_placed::dropped;
    }
    if (bool began = false; rs_hold_failure(rs, wc.status, port_down, &began))
        return began ? rs_placed::outage : rs_placed::held;
    return wc.status == IBV_WC_WR_FLUSH_ERR ? rs_placed::dropped : rs_placed::fatal;
}

}  // namespace

rs_placed rs_complete(ep_resume& rs, struct ibv_wc& wc, uint8_t* counter, bool* recv) {
    const bool ok = wc.status == IBV_WC_SUCCESS;
    const bool port_down = !ok && rs_port_down(rs, wc.status);
    evd::lock_guard g(rs.mu);
    if (!is_rs_wr_id(wc.wr_id)) {
        // a receive of the shared receive context: the peer's message was
        // consumed by this connection all the same
        *recv = true;
        if (ok) rs.rx.count_shared();
        return rs_placed::shown;
    }
    if (wc.wr_id == rs_keepalive_wr_id()) return rs_keepalive_done(rs, wc, port_down);
    const uint64_t idx = wc.wr_id - wr_id_of(wr_ids.rs[0]);
    const uint32_t slot = static_cast<uint32_t>(idx & (kRsMaxSlots - 1));
    *recv = idx >= kRsMaxSlots;
    // An outage holds the failure back: the operation stays in its ledger
    // (on the wire, in doubt once the QP is drained), and nothing reaches
    // the application until the outage ends (msg/ep_outage.h).
    if (bool began = false; !ok && rs_hold_failure(rs, wc.status, port_down, &began)) {
        ++(*recv ? rs.held_rx : rs.held_tx);
        return began ? rs_placed::outage : rs_placed::held;
    }
    // a success on a resumed connection's QP ends its outage (session.h)
    if (ok) {
        if (rs.sess.state() == resume::session_state::exchanging) rs.early_progress = true;
        rs.sess.progress();
    }
    // RC completes each queue in order, and every request of a resumable
    // endpoint is signaled: the completion is the oldest operation's on the
    // wire.
    if (*recv) {
        uint64_t seq = rs.rx.head();
        if (rs.rx.slot_of(seq) != slot || !(ok ? rs.rx.consume(&seq) : rs.rx.fail_head(&seq))) {
            EVD_WARN(FI_LOG_CQ, "QP %u: a receive completion (slot %u) is not the oldest "
                     "receive on the wire; dropped\n", wc.qp_num, slot);
            return rs_placed::dropped;
        }
        wc.wr_id = rs.ops.recv(slot).user_id;
        return rs_placed::shown;
    }
    const uint64_t seq = rs.tx.head();
    bool mine = false, other = false;
    auto retire = [&](uint64_t s, bool done) {
        rs.mu.assert_held();  // called by the ledger, under the guard above
        if (s != seq) {
            other = true;  // a done operation behind it (only after a resume)
            return;
        }
        const resume::sq_op& op = rs.ops.send(slot);
        wc.wr_id = rs_report_id(op, done);
        *counter = op.counter;
        mine = true;
    };
    const bool placed = rs.tx.slot_of(seq) == slot &&
                        (ok ? rs.tx.complete_through(seq, retire) : rs.tx.fail_head(seq, retire));
    if (!placed || other) {
        EVD_WARN(FI_LOG_CQ, "QP %u: a send-queue completion (slot %u, %s) %s\n", wc.qp_num, slot,
                 ok ? "success" : "error",
                 placed ? "retired more than its own operation"
                        : "is not the oldest operation on the wire; dropped");
    }
    return placed && mine ? rs_placed::shown : rs_placed::dropped;
}

}  // namespace evd
