// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The outage of a resumable connection (docs/resume.md, step 2; fi_evd(7),
// RESUMABLE CONNECTIONS): what an FI_EP_MSG endpoint whose domain resumes
// connections (FI_EVD_RESUME_TIMEOUT) does from the moment its QP fails for a
// reason the failure table calls transient until the connection is joined
// again or the outage ends.
//
//  * Held back (ep_resume.h, rs_complete): the failed completion and every
//    failed one after it stay in the ledgers; nothing of the failure reaches
//    the CQ or the EQ. The application may go on posting: the ledger takes
//    each operation, queued (-FI_EAGAIN once it is full).
//  * Drained (ep_outage_tick, on the rdma_cm channel's timer): the QP is
//    moved to the error state and flush markers go behind its queues; once
//    they came out (or every receive on the wire came back flushed, or
//    FI_EVD_FLUSH_TIMEOUT passed) the ledgers apply qp_failed: what was on
//    the wire is in doubt, the flushed receives are queued again, and this
//    side's count of the peer's messages is final.
//  * Then the session (resume/session.h) says what comes next: the active
//    side tries to join the peer again (ep_exchange.h) at once, then on
//    PORT_ACTIVE or a backoff; the passive side waits for the peer's
//    request. A resumed connection runs on its new QP; its outage is over
//    once that QP completes something.
//  * Ended (the deadline, a failure that is not transient, the connection
//    ending for another reason): what the ledgers hold completes in its CQ
//    as cancelled (FI_ECANCELED), in order, with its context, counted; then
//    the one terminal record: err as the first failure would have given it
//    without resumption, prov_errno FI_EVD_PERR(FI_EVD_PERR_RESUME, reason)
//    and err_data a struct fi_evd_resume_err (rdma/fi_ext_evd.h). Posts are
//    refused from then on (-FI_EOPBADSTATE).
#pragma once

#include "cm/cm.h"
#include "lock.h"
#include "msg/ep.h"
#include "resume/session.h"

namespace evd {

// A fatal note for e's QP (cq_deliver_fatal, under cq::reg_mu; no endpoint
// lock): true when e is resumable and the failure is held back (its outage
// begins, or is under way); the outage's next step is then due on e's
// channel at once. False: e ends as without resumption.
bool ep_outage_noted(ep* e, int status);

// The outage's next step (cm_deadline.cpp, under e->chan->mu, e open): an
// id to destroy once that lock is dropped.
cm_id_ptr ep_outage_tick(msg_ep* e) EVD_EXCLUDES(e->mu);

// Carries out the session's steps st (the drain, an attempt, an accept, a
// refusal, the end) and arms the next tick. An id to destroy.
cm_id_ptr ep_outage_steps(msg_ep* e, resume::session_step st, uint64_t now)
    EVD_REQUIRES(e->mu);
// The clock the session runs on (monotonic milliseconds).
uint64_t ep_outage_now_ms();

// ESTABLISHED of a connection resumable both ways (ep_exchange.cpp): the
// endpoint is armed, its session made for its side (active: it called
// fi_connect).
void ep_outage_arm(msg_ep* e, bool active) EVD_REQUIRES(e->mu);
// A failure is held from now on (a passive side whose QP had not failed
// when its peer's request came): as if its QP had failed.
void ep_outage_hold(msg_ep* e) EVD_REQUIRES(e->mu);

// The connection ends (fi_shutdown, the peer's disconnect, an rdma_cm error,
// any terminal claim): no failure starts an outage any more. Any thread, no
// lock needed but the ones of the caller's path (ep_resume::mu is a leaf).
void ep_outage_disarm(ep* e);

// The connection ends during an outage (the peer disconnected, the device
// went): what the ledgers hold completes as cancelled now, ahead of the
// caller's terminal event. Nothing when no outage is under way. An id to
// destroy (an attempt's).
cm_id_ptr ep_outage_end(msg_ep* e) EVD_REQUIRES(e->mu);

// fi_close (ep_close.cpp), first: no failure starts an outage, none under
// way takes another step; what the ledgers hold completes as cancelled when
// the QP leaves its CQs (cq_detach_qp), and the session ends with no record.
void ep_outage_close(ep* e);

// An rdma_cm error event on e's connected id: true when e is resumable and
// armed and the failure table calls the event ignored (not the QP's own
// failure), so it ends nothing.
bool ep_outage_ignores_cm(msg_ep* e, int event);

// PORT_ACTIVE on e's port during its outage (probe.cpp, under the device's
// reg_mu): its next step comes at once, and an active side waiting tries.
void ep_outage_port_active(msg_ep* e);

// A resumable endpoint's progress probe did not complete (probe.h): its QP
// is stalled, a failure of the path. True when that starts an outage (or
// one is under way); false: the endpoint ends as without resumption.
bool ep_outage_stalled(msg_ep* e);

}  // namespace evd
