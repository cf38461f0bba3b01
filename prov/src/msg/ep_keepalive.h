// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The keepalive of a resumable connection (docs/resume.md, "An idle side";
// fi_evd(7), RESUMABLE CONNECTIONS): every FI_EVD_RESUME_KEEPALIVE ms an
// armed endpoint with nothing on its send queue posts one signaled
// zero-length RDMA write, which touches no memory and consumes no receive at
// the peer.
//
// Why: a QP only learns that its path failed from a request it sent. Of the
// two sides of a connection across a partition longer than the transport's
// retries, the one with a request on the wire fails and the other, idle
// (an MPI rank waiting in a receive), does not. Only the active side joins
// the peer again, so when it is the idle one the passive side waits out its
// deadline and the connection ends although the path came back (measured:
// a 30 s partition on the two-node bed, test/README.md). With the keepalive
// an idle side fails too, within the keepalive's period plus the retries,
// and the outage runs on both sides. It also finds a peer that died while
// this side was idle, which without it is never found.
//
// The keepalive is not in the ledger (nothing is replayed or cancelled for
// it); its wr_id is rs_keepalive_wr_id(), its completion is placed by
// rs_complete: a success is progress, a failure is held as any failed
// operation's. At most one is on the QP at a time, in a send-queue slot the
// application cannot fill (ep_qp_init_attr). Timed on the rdma_cm channel's
// timer (cm_deadline.h), at the lowest rank: a probe or an outage step
// replaces it, and the keepalive starts again once they are over.
#pragma once

#include "msg/ep.h"

namespace evd {

// The connection is armed or resumed (ep_outage.cpp, ep_exchange.cpp): the
// keepalive's first look comes one period from now. Nothing when e has no
// keepalive. Any lock but ep_resume::mu (takes cm_chan::dl_mu, a leaf).
void ep_keepalive_start(msg_ep* e);

// The keepalive's period came (cm_deadline.cpp, under e->chan->mu, e open):
// posts one when the endpoint is armed, not in an outage, and nothing is on
// its send queue; then the next look, while the connection stays armed.
void ep_keepalive_due(msg_ep* e);

}  // namespace evd
