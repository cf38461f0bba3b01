// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The closing flush (qp_flush.h).
#include "msg/qp_flush.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "cq/cq.h"

namespace evd {

namespace {

// Whether a QP in `st` can hold sends that a destroy would discard.
bool can_hold_sends(enum ibv_qp_state st) {
    switch (st) {
    case IBV_QPS_RTS:
    case IBV_QPS_SQD:
    case IBV_QPS_SQE:
    case IBV_QPS_ERR:
        return true;
    default:  // RESET, INIT, RTR: no send was ever accepted
        return false;
    }
}

// 0: posted; an errno otherwise (ENOMEM while the send queue is still full).
int post_marker(ep* e, struct ibv_qp* qp) {
    struct ibv_send_wr wr {};
    wr.wr_id = wr_id_flush_marker();
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (e->ekind->marker_dest)
        if (int rc = e->ekind->marker_dest(e, wr)) return rc;
    struct ibv_send_wr* bad = nullptr;
    return post_errno(ibv_post_send(qp, &wr, &bad));
}

// The same marker at the end of the receive queue (no buffer: it takes no
// data). 0: posted.
int post_recv_marker(struct ibv_qp* qp) {
    struct ibv_recv_wr wr {};
    wr.wr_id = wr_id_flush_marker();
    struct ibv_recv_wr* bad = nullptr;
    return post_errno(ibv_post_recv(qp, &wr, &bad));
}

// Queues the receive marker once per connection (see ep::rq_marked).
void mark_receives(ep* e) EVD_REQUIRES(e->mu) {
    struct ibv_qp* qp = e->qp.get();
    if (!qp || qp->srq || !e->rx_cq || e->rq_marked.load()) return;
    e->rq_marked.store(true);  // before the post: a receive behind the marker sees it
    if (int r = post_recv_marker(qp)) {
        EVD_INFO(FI_LOG_EP_CTRL, "receive flush marker on QP %u: %s\n", qp->qp_num, strerror(r));
        e->rq_marked.store(false);
    }
}

}  // namespace

int qp_to_error(struct ibv_qp* qp) {
    struct ibv_qp_attr a {};
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

void qp_mark_receives(msg_ep* e) EVD_REQUIRES(e->mu) {
    e->rq_closed.store(true, std::memory_order_release);  // with or without a pool
    // Only for a QP that can be kept, and only when rdma_disconnect is
    // about to move it to the error state (it does so for the id's QP):
    // the marker must never sit in a live receive queue.
    if (!get_params().qp_pool_size || !e->id || !e->qp || e->id->qp != e->qp.get()) return;
    mark_receives(e);
}

bool qp_flush(ep* e) {
    // fi_close, once dispatch no longer reaches e: only this thread changes
    // the QP now (and only after the flush)
    struct ibv_qp* qp = ep_qp_of(e);
    if (!qp || !e->tx_cq || get_params().flush_timeout_ms <= 0) return false;
    struct ibv_qp_attr attr {};
    struct ibv_qp_init_attr init {};
    if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init)) {
        EVD_INFO(FI_LOG_EP_CTRL, "fi_close: ibv_query_qp(%u): %s; not flushed\n", qp->qp_num,
                 strerror(errno));
        return false;
    }
    if (!can_hold_sends(attr.qp_state)) return false;
    // The receive queue is flushed apart from the send queue (on rxe by
    // another kernel task), so the send marker coming out says nothing about
    // the receives: a marker of their own goes behind them, posted while the
    // QP still takes receives (a receive posted to a QP already in error may
    // never be flushed). Should a message arrive for it meanwhile, the
    // marker completes in error all the same. An SRQ's receives belong to
    // no QP and are not flushed.
    // (When the connection ended first, the marker went in before the QP
    // left RTS: qp_mark_receives.)
    if (attr.qp_state != IBV_QPS_ERR) {
        evd::lock_guard lk(e->mu);
        mark_receives(e);
    }
    const bool rq_marker = e->rq_marked.load();
    if (attr.qp_state != IBV_QPS_ERR) {
        if (int r = qp_to_error(qp)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_close: QP %u to error: %s; its queued work is lost\n",
                     qp->qp_num, strerror(r));
            return false;
        }
    }
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(get_params().flush_timeout_ms);
    // Markers are told apart by QP number only: with one CQ for both queues
    // either may come out first, and both must.
    const bool one_cq = e->rx_cq == e->tx_cq;
    int tx_want = 0, rx_want = rq_marker ? 1 : 0;
    bool posted = false;
    for (;;) {
        if (!posted) {
            int r = post_marker(e, qp);
            if (r == 0) {
                posted = true;
                ++tx_want;
            } else if (r != ENOMEM && r != EAGAIN) {
                EVD_WARN(FI_LOG_EP_CTRL, "fi_close: flush marker on QP %u: %s; not flushed\n",
                         qp->qp_num, strerror(r));
                return false;
            }
        }
        // Pulled even before the send marker is posted: a full send queue
        // empties into the CQ.
        for (;;) {
            int got = cq_pull_marker(e->tx_cq, qp->qp_num);
            if (got < 0) return false;
            if (!got) break;
            if (tx_want) --tx_want;
            else if (one_cq && rx_want) --rx_want;
            if (!tx_want && !(one_cq && rx_want)) break;
        }
        if (!one_cq && rx_want) {
            int got = cq_pull_marker(e->rx_cq, qp->qp_num);
            if (got < 0) return false;
            if (got) --rx_want;
        }
        if (posted && !tx_want && !rx_want) {
            EVD_DBG(FI_LOG_EP_CTRL, "fi_close: QP %u flushed\n", qp->qp_num);
            // complete: every receive is ahead of the marker
            return qp->srq || (rq_marker && !e->rq_after_marker.load());
        }
        if (clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EVD_WARN(FI_LOG_EP_CTRL,
             "fi_close: QP %u: its flush did not complete in %d ms (FI_EVD_FLUSH_TIMEOUT); "
             "work still queued on it is discarded without a completion\n",
             qp->qp_num, get_params().flush_timeout_ms);
    return false;
}

}  // namespace evd
