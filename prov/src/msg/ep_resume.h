// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The resumable half of an MSG endpoint's data path (docs/resume.md): on an
// endpoint whose domain resumes connections (FI_EVD_RESUME_TIMEOUT, or
// fi_control FI_EVD_RESUME_TIMEOUT_SET), every operation goes through the
// ledgers (resume/tx_ledger.h, rx_ledger.h) and the store of copies
// (resume/op_store.h) before it reaches the QP, and its completion comes back
// through them.
//
//  * Posting (ep_data.cpp): under mu, the operation is added to its ledger,
//    copied into its slot and posted from the copy, signaled, with wr_id =
//    rs_wr_id(slot): ledger order is the QP's order. A post that fails is
//    taken back. One lock per post, uncontended unless two threads post on
//    the same endpoint or a CQ reader is completing one of its operations.
//  * Completing (cq_read.cpp, under the CQ's mu): a completion of the
//    endpoint's QP is placed in its ledger (under mu), which gives back the
//    user's context (or the hidden marker) in wc.wr_id and the counter kind.
//  * An outage (msg/ep_outage.h): once the connection is established
//    (armed), the first failed completion whose status the failure table
//    calls transient holds the endpoint: that completion and every failed one
//    after it stay in the ledgers instead of reaching the CQ, and what the
//    application posts meanwhile is taken by the ledger, queued, not posted.
//    A failure that is not transient, or one on an endpoint not armed (it
//    never connected, or its connection ended), retires its operation as
//    failed, in order, with its own context, exactly as without resumption.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/fi_errno.h>
#include <sys/types.h>

#include <cstdint>

#include "cq/cq.h"  // wr_id_suppressed
#include "lock.h"
#include "resume/op_store.h"
#include "resume/rx_ledger.h"
#include "resume/session.h"
#include "resume/tx_ledger.h"

namespace evd {

struct ep;

// wr_id of a resumable endpoint's work requests: an address in a range of
// the provider's own (wr_ids.h), one per slot and queue, so no
// user context can equal one, and the CQ knows one even after the endpoint
// let go of its QP (it is then dropped). The slot is the ledger's slot_of:
// a completion belongs to the oldest operation on the wire, whose slot it
// must name.
// The last id of the range is the keepalive's (msg/ep_keepalive.h): a
// request evd posts outside the ledger, one at a time.
inline uint64_t rs_wr_id(uint32_t slot, bool recv) noexcept {
    return wr_id_of(wr_ids.rs[0]) + (recv ? kRsMaxSlots : 0) + slot;
}
inline uint64_t rs_keepalive_wr_id() noexcept { return wr_id_of(wr_ids.rs[2 * kRsMaxSlots]); }
inline bool is_rs_wr_id(uint64_t wr_id) noexcept {
    return wr_id - wr_id_of(wr_ids.rs[0]) < 2 * kRsMaxSlots + 1;
}

struct ep_resume {
    // Sizes from the endpoint's attributes (tx/rx size, at most
    // kRsMaxSlots; iov limits, inject size). Throws std::bad_alloc.
    ep_resume(uint32_t tx_size, uint32_t tx_sge, uint32_t max_inline, uint32_t rx_size,
              uint32_t rx_sge, uint32_t timeout_ms, uint32_t keepalive_ms);

    const uint32_t timeout_ms;  // FI_EVD_RESUME_TIMEOUT of its domain at fi_enable
    // How often an idle connection proves its path (msg/ep_keepalive.h); 0:
    // never (FI_EVD_RESUME_KEEPALIVE=0, or its QP has no room for one).
    const uint32_t keepalive_ms;
    // The device context and port of the endpoint's domain (set at fi_enable,
    // before the QP exists): whether the port is up when a request fails.
    struct ibv_context* verbs = nullptr;
    uint8_t port = 0;
    mutex mu;
    resume::tx_ledger tx EVD_GUARDED_BY(mu);
    resume::rx_ledger rx EVD_GUARDED_BY(mu);
    resume::op_store ops EVD_GUARDED_BY(mu);

    // --- the outage (msg/ep_outage.h). Set at ESTABLISHED, cleared when the
    // connection ends (fi_shutdown, the peer's disconnect, a terminal event):
    // only an armed endpoint holds a failure back.
    bool armed EVD_GUARDED_BY(mu) = false;
    // An outage is on: failed completions are held, posts are queued.
    bool held EVD_GUARDED_BY(mu) = false;
    // The outage ended without resuming (or the connection ended during
    // one): what the ledgers held was cancelled, and a post is refused
    // (-FI_EOPBADSTATE) rather than queued where nothing would take it.
    bool ended EVD_GUARDED_BY(mu) = false;
    // Failed completions held in this outage, per queue.
    uint64_t held_tx EVD_GUARDED_BY(mu) = 0;
    uint64_t held_rx EVD_GUARDED_BY(mu) = 0;
    // What failed first in this outage (an ibv_wc_status), for the record.
    int cause_status EVD_GUARDED_BY(mu) = 0;
    // The port came back during the outage (ep_outage_port_active).
    bool port_up EVD_GUARDED_BY(mu) = false;
    // A new QP completed something while its exchange was under way.
    bool early_progress EVD_GUARDED_BY(mu) = false;
    // The keepalive is on the current QP, not completed yet (msg/ep_keepalive.h).
    bool ka_out EVD_GUARDED_BY(mu) = false;
    // The connection's life (resume/session.h), made anew at ESTABLISHED.
    resume::session sess EVD_GUARDED_BY(mu){resume::side::active, {0}};
};

// What rs_complete did with a completion.
enum class rs_placed : uint8_t {
    shown,    // its operation left the ledger: wc names the user's context
    dropped,  // it names nothing the ledger can place (warned)
    held,     // a failure held back by the outage under way
    outage,   // a failure that starts an outage: held, and the endpoint is to be told
    fatal,    // evd's keepalive failed and nothing holds it: the endpoint ends
};

// Whether a failed request of status `status` found its port down: on
// Soft-RoCE a request that cannot be transmitted because its link is down
// fails at once with IBV_WC_LOC_QP_OP_ERR, which otherwise means a request
// the QP refused. Queries the port only for that status (a failure path,
// never a success); call without rs.mu.
bool rs_port_down(const ep_resume& rs, int status);
// A failed completion of status `status` (or a failed progress probe) on an
// endpoint with rs, under rs.mu: true when it is held back, with *began set
// when this one starts the outage: the endpoint is armed and the failure
// table calls the status transient, or it is IBV_WC_LOC_QP_OP_ERR with its
// port down (rs_port_down). A failure that is not held disarms: the
// connection ends, and what is flushed behind it starts nothing.
bool rs_hold_failure(ep_resume& rs, int status, bool port_down, bool* began)
    EVD_REQUIRES(rs.mu);

// fi_enable of an FI_EP_MSG endpoint whose domain resumes connections
// (domain::resume_timeout_ms > 0 then): makes its ep_resume, sized by its
// attributes, and points its counter route at it. 0, or -FI_ENOMEM.
int ep_resume_enable(ep* e);

// Completions the endpoint's queues may hold unread at once, for a CQ that
// takes its send (`send`) and/or receive (`recv`) completions: every request
// of a resumable endpoint is signaled, and its keepalive is one more.
uint32_t rs_depth(ep_resume& rs, bool send, bool recv) EVD_EXCLUDES(rs.mu);

// What the ledger takes a send-queue work request as (docs/resume.md,
// "Words"): from its opcode; a fetch-and-add whose old value lands in the
// domain's sink (base FI_SUM) is an atomic nobody waits for.
resume::op_kind rs_op_kind(const struct ibv_send_wr& wr, uintptr_t atomic_sink) noexcept;

// Posts wr through rs (see above) with post(wr), which returns 0 or a
// negative FI_E*: -FI_EAGAIN when the ledger is full, -FI_EINVAL (and a
// warning) when the operation cannot be kept.
// hidden: its success is not shown (no completion asked for); no_ctx: it has
// no context (fi_inject*), so its failure is not shown either (cq.h).
template <class Post>
ssize_t rs_post_send(ep_resume& rs, const struct ibv_send_wr& wr, resume::op_kind k,
                     uint8_t counter, bool hidden, bool no_ctx, void* context, Post&& post)
    EVD_EXCLUDES(rs.mu);
template <class Post>
ssize_t rs_post_recv(ep_resume& rs, const struct ibv_recv_wr& wr, uint64_t user_id, Post&& post)
    EVD_EXCLUDES(rs.mu);

// A completion of the endpoint's QP (the CQ's read path, under its mu; wc
// carries an rs_wr_id or, from a shared receive context, the user's): its
// operation leaves the ledger; wc.wr_id becomes what the user's completion
// reports, *counter the poster's counter kind (send queue) and *recv is set
// for a receive (shown). A receive of a shared receive context (its wr_id is
// the user's) is only counted. A failure the outage holds back stays in the
// ledger (held, outage: rs_hold_failure). dropped, with a warning, when the
// ledger cannot place it.
rs_placed rs_complete(ep_resume& rs, struct ibv_wc& wc, uint8_t* counter, bool* recv)
    EVD_EXCLUDES(rs.mu);

// The endpoint lets go of its QP (fi_close, cq_detach_qp under the CQ's
// mu, once what the CQ held was pulled): what the ledgers still hold (the
// send half when `send`, the receive half when `recv`) leaves in order, each
// as the completion emit(wc, counter, recv) is to admit: wc.wr_id the
// user's context or the hidden marker, status IBV_WC_WR_FLUSH_ERR, or
// success for an operation found done. This is how a device that never
// flushes (siw, for receives it was not asked to mark) loses nothing: each
// operation completes exactly once, from the device or from here; a
// completion the device makes later names no route and is dropped.
template <class Emit>
void rs_cancel(ep_resume& rs, bool send, bool recv, uint32_t qp_num, Emit&& emit)
    EVD_EXCLUDES(rs.mu);
// What a completion of op reports in wr_id: its context, or the hidden
// marker (cq.h) for a success nobody asked for and for any outcome of an
// operation without a context. As without resumption: a failure of an
// operation posted without FI_COMPLETION is shown with its context.
inline uint64_t rs_report_id(const resume::sq_op& op, bool ok) noexcept {
    return (ok ? op.hidden : op.no_ctx) ? wr_id_suppressed()
                                        : reinterpret_cast<uintptr_t>(op.context);
}
// The completion opcode of a send-queue operation found done.
enum ibv_wc_opcode rs_wc_opcode(enum ibv_wr_opcode op) noexcept;

template <class Emit>
void rs_cancel(ep_resume& rs, bool send, bool recv, uint32_t qp_num, Emit&& emit) {
    evd::lock_guard g(rs.mu);
    if (send)
        rs.tx.cancel_all([&](uint64_t seq, bool ok) {
            rs.mu.assert_held();  // called by the ledger, under the guard above
            const resume::sq_op& op = rs.ops.send(rs.tx.slot_of(seq));
            struct ibv_wc wc {};
            wc.wr_id = rs_report_id(op, ok);
            wc.status = ok ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR;
            wc.opcode = rs_wc_opcode(op.wr.opcode);
            wc.qp_num = qp_num;
            emit(wc, op.counter, false);
        });
    if (recv)
        rs.rx.cancel_all([&](uint64_t seq) {
            rs.mu.assert_held();
            struct ibv_wc wc {};
            wc.wr_id = rs.ops.recv(rs.rx.slot_of(seq)).user_id;
            wc.status = IBV_WC_WR_FLUSH_ERR;
            wc.opcode = IBV_WC_RECV;
            wc.qp_num = qp_num;
            emit(wc, uint8_t{0}, true);
        });
}

// The exchange resumed the connection (ep_exchange.cpp, through
// cq_retire_resumed under the CQ's mu): the send operations the verdict
// found done leave the ledger in order, each as the successful completion
// emit(wc, counter) is to report.
template <class Emit>
void rs_retire_done(ep_resume& rs, uint32_t qp_num, Emit&& emit) EVD_EXCLUDES(rs.mu) {
    evd::lock_guard g(rs.mu);
    rs.tx.retire_done([&](uint64_t seq, bool) {
        rs.mu.assert_held();  // called by the ledger, under the guard above
        const resume::sq_op& op = rs.ops.send(rs.tx.slot_of(seq));
        struct ibv_wc wc {};
        wc.wr_id = rs_report_id(op, true);
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = rs_wc_opcode(op.wr.opcode);
        wc.qp_num = qp_num;
        emit(wc, op.counter);
    });
}

// Posts what the ledgers queued on qp, in ledger order, receives first
// (the exchange: after the verdict, and the receives ahead of the connect or
// accept). Under rs.mu. 0, or the errno of the post that failed (what
// follows it stays queued).
int rs_post_queued(ep_resume& rs, struct ibv_qp* qp, bool sends) EVD_REQUIRES(rs.mu);

// Warnings of the post path (ep_resume.cpp), kept out of the templates.
ssize_t rs_refuse(resume::keep_error why, const char* what);
ssize_t rs_refuse_ended(const char* what);

template <class Post>
ssize_t rs_post_send(ep_resume& rs, const struct ibv_send_wr& wr, resume::op_kind k,
                     uint8_t counter, bool hidden, bool no_ctx, void* context, Post&& post) {
    evd::lock_guard g(rs.mu);
    if (rs.ended) return rs_refuse_ended("post");
    if (rs.tx.full()) return -FI_EAGAIN;
    // the slot the next seq takes: kept first, taken by the ledger once kept
    const uint32_t slot = rs.tx.slot_of(rs.tx.tail());
    uint64_t len = 0;  // the peer memory a read or write covers
    if (auto why = rs.ops.keep_send(slot, wr, context, counter, hidden, no_ctx, &len);
        why != resume::keep_error::none)
        return rs_refuse(why, "post");
    const uint64_t seq = rs.tx.add(k, {wr.wr.rdma.remote_addr, len});
    struct ibv_send_wr& w = rs.ops.send(slot).wr;
    w.wr_id = rs_wr_id(slot, false);
    w.send_flags |= IBV_SEND_SIGNALED;
    if (rs.held) return 0;  // an outage: queued, posted by the replay or cancelled at the end
    if (ssize_t r = post(w)) {
        rs.tx.take_back(seq);
        return r;
    }
    rs.tx.posted(seq);
    return 0;
}

template <class Post>
ssize_t rs_post_recv(ep_resume& rs, const struct ibv_recv_wr& wr, uint64_t user_id,
                     Post&& post) {
    evd::lock_guard g(rs.mu);
    if (rs.ended) return rs_refuse_ended("fi_recv");
    if (rs.rx.full()) return -FI_EAGAIN;
    const uint64_t seq = rs.rx.add();
    const uint32_t slot = rs.rx.slot_of(seq);
    if (auto why = rs.ops.keep_recv(slot, wr, user_id); why != resume::keep_error::none) {
        rs.rx.take_back(seq);
        return rs_refuse(why, "fi_recv");
    }
    struct ibv_recv_wr& w = rs.ops.recv(slot).wr;
    w.wr_id = rs_wr_id(slot, true);
    if (rs.held) return 0;  // an outage: queued, as a send is
    if (ssize_t r = post(w)) {
        rs.rx.take_back(seq);
        return r;
    }
    rs.rx.posted(seq);
    return 0;
}

}  // namespace evd
