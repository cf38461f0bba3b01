// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Progress probes: when a port becomes active again, every connected
// endpoint on it proves that its connection still moves, or ends.
//
// Why: a reliable connection that had work in flight while its link was
// down either recovers by itself once the link returns (its retransmission
// gets through) or fails when its retries run out; both reach the
// application. On rxe (Linux 6.1) a third outcome was measured: the QP stays
// in RTS, its requester never sends again, and nothing ever completes or
// fails (docs/link-failures.md). ofi_rxm and MPI above it then wait forever
// on a connection that will never carry another byte.
//
// So at IBV_EVENT_PORT_ACTIVE evd posts one signaled zero-length RDMA write
// (which touches no memory and consumes no receive at the peer) behind the
// endpoint's queued work and arms a deadline on its rdma_cm channel's timer:
// FI_EVD_PROBE_TIMEOUT ms plus the QP's local ack timeout, time for its
// retransmission timer to fire once and the retransmission to get through. At the deadline the endpoint's transmit
// CQ is pulled (into its backlog, in order, for the application's next read)
// until the probe's completion is found. Found: nothing happens. Not found:
// the connection made no progress since the link returned, and the endpoint
// ends with its one terminal error, FI_ETIMEDOUT, and its QP is moved to the
// error state so every queued request completes as flushed. A probe that
// fails is a failed request evd posted: the endpoint's terminal event, as
// for any hidden request (cq.cpp, admit). fi_evd(7), LINK AND PORT FAILURES.
#pragma once

#include "device/devctx.h"
#include "msg/ep.h"

namespace evd {

// At IBV_EVENT_PORT_ACTIVE of `port` on d, under d->reg_mu: posts the probes
// and arms their deadlines.
void probe_port_active(devctx* d, uint8_t port) EVD_REQUIRES(d->reg_mu);

// The deadline of e's probe (cm_deadline.cpp, under e->chan->mu, e open).
void probe_due(msg_ep* e);

// Posts one signaled zero-length RDMA write on qp with wr_id (the probe's,
// or a resumable connection's keepalive, msg/ep_keepalive.h): it touches no
// memory and consumes no receive at the peer. 0, or an errno (ENOMEM: the
// send queue is full).
int post_zero_write(struct ibv_qp* qp, uint64_t wr_id);

}  // namespace evd
