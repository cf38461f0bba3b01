// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The closing flush (qp_flush.h).
#include "qp_flush.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "cq.h"

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
int post_marker(struct ibv_qp* qp) {
    struct ibv_send_wr wr {};
    wr.wr_id = wr_id_flush_marker();
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    struct ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
}

}  // namespace

int qp_to_error(struct ibv_qp* qp) {
    struct ibv_qp_attr a {};
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

void qp_flush(ep* e) {
    struct ibv_qp* qp = e->qp.get();
    if (!qp || !e->tx_cq || get_params().flush_timeout_ms <= 0) return;
    struct ibv_qp_attr attr {};
    struct ibv_qp_init_attr init {};
    if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init)) {
        EVD_INFO(FI_LOG_EP_CTRL, "fi_close: ibv_query_qp(%u): %s; not flushed\n", qp->qp_num,
                 strerror(errno));
        return;
    }
    if (!can_hold_sends(attr.qp_state)) return;
    if (attr.qp_state != IBV_QPS_ERR) {
        if (int r = qp_to_error(qp)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_close: QP %u to error: %s; its queued work is lost\n",
                     qp->qp_num, strerror(r));
            return;
        }
    }
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(get_params().flush_timeout_ms);
    bool posted = false;
    for (;;) {
        if (!posted) {
            int r = post_marker(qp);
            if (r == 0) {
                posted = true;
            } else if (r != ENOMEM && r != EAGAIN) {
                EVD_WARN(FI_LOG_EP_CTRL, "fi_close: flush marker on QP %u: %s; not flushed\n",
                         qp->qp_num, strerror(r));
                return;
            }
        }
        int got = cq_pull_marker(e->tx_cq, qp->qp_num);
        if (got < 0) return;
        if (got > 0 && posted) {
            EVD_DBG(FI_LOG_EP_CTRL, "fi_close: QP %u flushed\n", qp->qp_num);
            return;
        }
        if (clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EVD_WARN(FI_LOG_EP_CTRL,
             "fi_close: QP %u: its flush did not complete in %d ms (FI_EVD_FLUSH_TIMEOUT); "
             "work still queued on it is discarded without a completion\n",
             qp->qp_num, get_params().flush_timeout_ms);
}

}  // namespace evd
