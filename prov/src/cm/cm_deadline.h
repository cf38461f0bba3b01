// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Connection-setup deadlines: an endpoint that sent its connect request
// (rdma_connect) or its accept (rdma_accept) and is not connected within
// FI_EVD_CONNECT_TIMEOUT ms ends with one terminal error, FI_ETIMEDOUT.
//
// Why: the kernel's connection manager retransmits a lost request for a
// minute or more before it reports the peer unreachable, and on a path that
// failed while the request was in flight (a link flap at connection time)
// the retransmissions can go unanswered even after the path is back. An
// application that connects on demand (ofi_rxm: on the first send to a
// peer, again after a connection ended) would wait all that time; MPI over
// it hangs. Ending the attempt lets it connect again with a fresh request.
//
// One timerfd per rdma_cm channel (cm.h), an EQ source of the channel's EQ,
// armed at the earliest deadline, so fi_eq_sread wakes for it. Lock order:
// cm_chan::mu -> cm_chan::dl_mu -> ep::mu.
#pragma once

#include "cm/cm.h"
#include "msg/ep.h"

namespace evd {

// At cm_chan creation/destruction: the timer and its EQ source.
int cm_deadline_open(cm_chan* chan);
void cm_deadline_close(cm_chan* chan);
// Room in chan's deadline list for n endpoints (cm.cpp: one per reference
// the channel has), so that setting a deadline never allocates: a
// deadline is set from an rdma_cm event's handler or a due step, where an
// allocation that failed would lose the event. -FI_ENOMEM when the room
// cannot be made. Takes cm_chan::dl_mu.
int cm_deadline_reserve(cm_chan* chan, size_t n);
// e sent its connect request or accept on c: it must be connected by now +
// FI_EVD_CONNECT_TIMEOUT (nothing when the timeout is 0). Any thread, with or
// without cm_chan::mu.
void cm_deadline_set(cm_chan* chan, msg_ep* e);
// e (connected) posted a progress probe: probe_due(e) runs `ms` from now.
// Any thread, with or without cm_chan::mu.
void cm_deadline_set_probe(cm_chan* chan, msg_ep* e, int ms);
// e's outage (msg/ep_outage.h) takes its next step `ms` from now (at least 1):
// ep_outage_tick(e). It replaces a probe's deadline (an outage makes the
// probe moot); a probe or setup deadline set later does not replace it.
// Any thread, with or without cm_chan::mu.
void cm_deadline_set_outage(cm_chan* chan, msg_ep* e, int ms);
// e's resumable connection (msg/ep_keepalive.h) looks at its path `ms` from
// now: ep_keepalive_due(e). Any other kind replaces it; it replaces only a
// setup deadline (it is set once connected). Any thread, with or without
// cm_chan::mu.
void cm_deadline_set_keepalive(cm_chan* chan, msg_ep* e, int ms);
// e is closing: no deadline. With cm_chan::mu held or not.
void cm_deadline_clear(cm_chan* chan, msg_ep* e);
// e is connected or ended: no setup deadline (a probe's or an outage's stays).
void cm_deadline_clear_setup(cm_chan* chan, msg_ep* e);

// Provided by ep_cm.cpp: e's setup ran out of time (called under
// cm_chan::mu, e still open): its one terminal error, FI_ETIMEDOUT.
void ep_setup_timed_out(msg_ep* e);

}  // namespace evd
