// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The keepalive of a resumable connection (ep_keepalive.h).
#include "msg/ep_keepalive.h"

#include <cerrno>
#include <cstring>

#include "cm/cm_deadline.h"
#include "cm/probe.h"
#include "msg/ep_dp.h"
#include "msg/ep_resume.h"

namespace evd {

void ep_keepalive_start(msg_ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs || !rs->keepalive_ms || !e->chan) return;
    cm_deadline_set_keepalive(e->chan, e, static_cast<int>(rs->keepalive_ms));
}

void ep_keepalive_due(msg_ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs || !rs->keepalive_ms || e->terminal.load()) return;
    if (static_cast<ep_state>(e->state.load()) != ep_state::connected) return;
    int err = 0;
    uint32_t qpn = 0;
    {
        evd::lock_guard g(rs->mu);
        // an outage times itself; a connection that ended needs nothing
        if (!rs->armed || rs->held || rs->ended) return;
        // posts read the QP under rs->mu (ep_resume.h): it is the current one
        struct ibv_qp* qp = ep_qp_of(e);
        if (qp && !rs->ka_out && rs->tx.outstanding() == 0) {
            err = post_zero_write(qp, rs_keepalive_wr_id());
            if (!err) rs->ka_out = true;
            qpn = qp->qp_num;
        }
    }
    // A post the QP refused: a QP in error fails by its own completions,
    // and a full queue is work that proves the path by itself.
    if (err)
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: no keepalive on QP %u: %s\n", static_cast<void*>(e), qpn,
                 strerror(err));
    cm_deadline_set_keepalive(e->chan, e, static_cast<int>(rs->keepalive_ms));
}

}  // namespace evd
