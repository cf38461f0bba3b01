// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Progress probes (probe.h).
#include "cm/probe.h"

#include <cerrno>
#include <cstring>

#include "cm/cm.h"
#include "cm/cm_deadline.h"
#include "cq/cq.h"
#include "domain.h"
#include "msg/ep_keepalive.h"
#include "msg/ep_outage.h"
#include "msg/qp_flush.h"

namespace evd {

namespace {

// The QP's local ack timeout (4.096 us * 2^timeout), in ms: after the link
// returns, a request that was in flight is retransmitted within one. 0 when
// the QP has none (it then never retransmits).
int ack_timeout_ms(struct ibv_qp* qp) {
    struct ibv_qp_attr a {};
    struct ibv_qp_init_attr init {};
    if (ibv_query_qp(qp, &a, IBV_QP_TIMEOUT, &init) || a.timeout == 0 || a.timeout > 31) return 0;
    const uint64_t ns = 4096ull << a.timeout;
    const uint64_t ms = ns / 1000000 + 1;
    return ms > 60000 ? 60000 : static_cast<int>(ms);
}

}  // namespace

int post_zero_write(struct ibv_qp* qp, uint64_t wr_id) {
    struct ibv_send_wr wr {};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_WRITE;  // zero bytes: no address or key is checked
    wr.send_flags = IBV_SEND_SIGNALED;
    struct ibv_send_wr* bad = nullptr;
    return post_errno(ibv_post_send(qp, &wr, &bad));
}

void probe_port_active(devctx* d, uint8_t port) {
    const int base = get_params().probe_timeout_ms;
    if (base <= 0) return;
    for (auto& [key, t] : d->qps) {
        if (!t.fid || t.fid->fclass != FI_CLASS_EP) continue;
        msg_ep* e = ep_msg(static_cast<ep*>(t.owner));
        if (!e) continue;  // a datagram endpoint: no connection to probe
        if (e->dom->port_num != port || e->terminal.load() || !e->chan || !e->tx_cq) continue;
        if (static_cast<ep_state>(e->state.load()) != ep_state::connected) continue;
        if (e->in_outage.load()) {  // its QP failed already: the outage tries again now
            ep_outage_port_active(e);
            continue;
        }
        // one probe at a time: a port that flaps again before the deadline
        // keeps the probe already in the queue
        if (e->probing.exchange(true)) continue;
        auto* qp = const_cast<struct ibv_qp*>(static_cast<const struct ibv_qp*>(key));
        if (int r = post_zero_write(qp, wr_id_probe())) {
            e->probing.store(false);
            // A full send queue is work in flight that will complete or fail
            // by itself if the transport is alive; the probe is then skipped.
            EVD_INFO(FI_LOG_EP_CTRL, "port %u of %s active: no progress probe on QP %u: %s\n",
                     static_cast<unsigned>(port), d->name.c_str(), qp->qp_num, strerror(r));
            continue;
        }
        const int ms = base + ack_timeout_ms(qp);
        cm_deadline_set_probe(e->chan, e, ms);
        EVD_DBG(FI_LOG_EP_CTRL, "port %u of %s active: progress probe on QP %u, due in %d ms\n",
                static_cast<unsigned>(port), d->name.c_str(), qp->qp_num, ms);
    }
}

void probe_due(msg_ep* e) {
    if (!e->probing.exchange(false)) return;
    if (!ep_qp_of(e) || !e->tx_cq || e->terminal.load()) return;
    if (static_cast<ep_state>(e->state.load()) != ep_state::connected) return;
    const uint32_t qpn = ep_qp_of(e)->qp_num;
    const int got = cq_pull_probe(e->tx_cq, qpn);
    if (got == 1) {
        EVD_DBG(FI_LOG_EP_CTRL, "ep %p: progress probe on QP %u completed\n",
                static_cast<void*>(e), qpn);
        ep_keepalive_start(e);  // the probe's deadline had taken its place
        return;
    }
    if (got < 0 || e->terminal.load()) return;  // the pull delivered its end, or cannot tell
    if (ep_outage_stalled(e)) {  // resumable: a stalled QP is an outage, not yet an end
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: QP %u made no progress since its port returned: held "
                 "as an outage (resumable)\n", static_cast<void*>(e), qpn);
        return;
    }
    EVD_WARN(FI_LOG_EP_CTRL,
             "ep %p: QP %u made no progress since its port returned (its progress probe did "
             "not complete, FI_EVD_PROBE_TIMEOUT): ended with FI_ETIMEDOUT\n",
             static_cast<void*>(e), qpn);
    ep_terminal_error(e, FI_ETIMEDOUT, -ETIMEDOUT, "no progress after the port returned");
    if (int rc = qp_to_error(ep_qp_of(e)))
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: QP %u to the error state: %s\n", static_cast<void*>(e),
                 qpn, strerror(rc));
}

}  // namespace evd
