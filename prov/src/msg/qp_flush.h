// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The closing flush: the work an endpoint still had queued when it is closed
// completes in its CQ (FI_ECANCELED) instead of vanishing with its QP.
//
// Why: destroying a queue pair discards the work requests it holds, and
// nothing ever completes them. An application that closes an endpoint
// because the connection died (ofi_rxm does so at FI_SHUTDOWN or a terminal
// error, then reads its CQ once) still owns every operation it posted; if
// the QP was alive when the connection ended (rdma_cm reported it
// unreachable, the port went down and the application chose to close), those
// operations would never complete and whatever waits on them (an MPI
// request) waits forever. So before the QP is destroyed evd moves it to the
// error state, which flushes its queues, posts a marker behind the queued
// sends and pulls the CQ until the marker comes out: everything queued
// before it is then in the CQ, in order, for the application's next read.
// fi_evd(7), ENDPOINT CLOSE.
#pragma once

#include "msg/ep.h"

namespace evd {

// fi_close of e, before its QP leaves its CQs. Does nothing for a QP that
// never reached RTS (it cannot hold a send) or that the device no longer
// answers for; bounded by FI_EVD_FLUSH_TIMEOUT (ms). True when every work
// request the QP held is known to have completed: its send marker came out,
// and its receive marker too, with no receive posted behind it (unless its
// receives belong to an SRQ). Only such a QP may be kept (qp_pool.h).
bool qp_flush(ep* e) EVD_EXCLUDES(e->mu);

// Before rdma_disconnect moves e's QP to the error state while its
// connection ends: queues the receive flush marker behind the application's
// receives, so that fi_close can tell they have all been flushed and the QP
// may be kept (qp_pool.h). Only with QP reuse on, and only for the id's QP
// (which rdma_disconnect moves). Always closes e's receive queue to fi_recv
// (ep::rq_closed). e->mu held.
void qp_mark_receives(msg_ep* e) EVD_REQUIRES(e->mu);

// Moves qp to the error state, which flushes its queues; 0 or an errno. (The
// closing flush, fail-fast and the connect timeout all end a QP this way.)
int qp_to_error(struct ibv_qp* qp);

}  // namespace evd
