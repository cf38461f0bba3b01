// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Lingering disconnects: the rdma_cm id of an endpoint closed while its
// connection was up outlives the endpoint until the peer has been told.
//
// Why: destroying a connected id makes the kernel send one DREQ and forget
// the connection. When that DREQ is lost (the port is down, as it is right
// after a link failure ended the endpoint), the peer keeps a connection that
// is dead on this side; an idle peer never notices, and ofi_rxm there rejects
// every reconnection from this process as "already connected". So fi_close
// hands such an id to a linger record instead: the QP is destroyed at once,
// the id sends its DREQ (rdma_disconnect: the kernel's CM retransmits it until
// answered) as soon as its port is active (now, or at IBV_EVENT_PORT_ACTIVE),
// and is destroyed when rdma_cm reports the disconnect done, the device gone,
// or the EQ closing. fi_evd(7), LINK AND PORT FAILURES.
//
// The record also waits out the time-wait of a connection whose QP the
// domain keeps for reuse (qp_pool.h): then the id lives on after the
// disconnect (DREQ/DREP) until RDMA_CM_EVENT_TIMEWAIT_EXIT says the peer can
// no longer address the QP, which is then reset for the next endpoint. Any
// other end (an error, the device's removal, the EQ closing, no
// TIMEWAIT_EXIT within FI_EVD_QP_POOL_TIMEWAIT ms of the disconnect) destroys
// the kept QP instead.
//
// Lock order: linger_mu -> cm_chan::mu. Nothing here is called with the
// device registry lock held.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>

#include "cm/cm.h"
#include "evd.h"
#include "msg/ep.h"

namespace evd {

struct devctx;
struct ep;
struct msg_ep;
struct eq;
struct linger;

// What becomes of a closing endpoint's QP (qp_pool.h).
enum class qp_verdict {
    destroy,     // not kept
    keep_wait,   // kept; the linger record waits for TIMEWAIT_EXIT
    keep_now,    // kept and reusable at once (the time-wait already ended)
};

// fi_close of e, before its QP is destroyed (e's id is still on e->chan):
// when e's connection is up, or when its QP is kept (`keepable`: e's own
// view, and rdma_cm's under the channel lock: the connection ended or ends
// by a clean disconnect; *verdict says) and must wait out the time-wait with
// its port active, moves its id to a new linger record (the id's events go
// to the record from now on) and returns it; nullptr otherwise (then the
// caller destroys the id as usual). Also frees records that ended.
linger* linger_begin(msg_ep* e, bool keepable, qp_verdict* verdict);
// After the QP is gone (destroyed, or kept under `token`, 0 for none): the
// record takes e's id and channel reference (the caller forgets the
// reference), sends the DREQ now if one is due and the port is active, and
// from then on ends the kept QP's wait (qp_pool_release or qp_pool_drop).
void linger_arm(linger* l, cm_id_ptr id, uint64_t token);
// rdma_cm event for a lingering id, whose context is `owner` (cm.cpp
// dispatch, cm_chan::mu held). Returns the id to destroy once the event is
// acknowledged, or nothing.
cm_id_ptr linger_cm_event(cm_owner* owner, struct rdma_cm_event* ev, const cm_action& a);
// A connection request's id (pep.cpp) refused while its port is down: a
// record takes the id and the caller's reference on chan, holds the id and
// destroys it once the port is active (the kernel sends the REJ then, without
// the application's data). False when no record could be made: the caller
// keeps both and rejects now.
bool linger_hold_request(cm_id_ptr& id, cm_chan* chan);
// IBV_EVENT_PORT_ACTIVE of port `port` on d (async.cpp): DREQs that waited
// for the port are sent.
void linger_port_active(devctx* d, uint8_t port);
// fi_close of EQ q: every id lingering on q's channel is destroyed now.
void linger_end_eq(eq* q);
// Records not yet freed (tests, logs).
size_t linger_count();

}  // namespace evd
