// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Joining the peer again after an outage (docs/resume.md, "The exchange",
// step 3; fi_evd(7), RESUMABLE CONNECTIONS): the offer a resumable listener
// puts in its accept, the active side's attempts (a new rdma_cm id and QP,
// a resume request naming the token), the passive side's answer to a
// request its listener's token table allowed, and the move of the
// connection onto the new QP with the replay of what the peer did not
// consume. ep_outage.h drives it: the session (resume/session.h) says when.
//
// Scope: resumable both ways only when the accept carried an offer, which
// a listener makes only for an endpoint whose domain resumes, on an IB or
// RoCE device, bound to the listener's own EQ (its request then arrives on
// the endpoint's rdma_cm channel, as ofi_rxm binds them).
#pragma once

#include <rdma/rdma_cma.h>

#include "cm/cm.h"
#include "msg/ep.h"
#include "resume/resume_wire.h"

namespace evd {

// fi_accept (ep_msg.cpp): appends the offer to buf (evd's header and the
// user's data, *n bytes of cap) when e can be resumed; its token is in its
// listener's table from then on.
void ep_exchange_offer(msg_ep* e, uint8_t* buf, size_t* n, size_t cap) EVD_REQUIRES(e->mu);

// ESTABLISHED of e's own id (ep_cm.cpp): the active side takes the offer of
// the accept, both keep the connection's addresses. True when the
// connection is resumable both ways (then it is armed).
bool ep_exchange_established(msg_ep* e, const struct rdma_cm_event* ev, bool active)
    EVD_REQUIRES(e->mu);

// The session's connect step (active): a new id on e's channel, resolving
// the peer's address from e's own. False when it failed at once. *dead: an
// id of an earlier attempt, or this one's when it failed, to destroy.
bool ep_exchange_attempt(msg_ep* e, cm_id_ptr* dead) EVD_REQUIRES(e->mu);

// The session's accept step (passive) for the request e->rid holds:
// the verdict on the peer's count, a new QP with the queued receives, the
// accept with this side's count. Returns an id to destroy (a request
// refused), to be destroyed without cm_chan::mu.
cm_id_ptr ep_exchange_accept(msg_ep* e, uint64_t now) EVD_REQUIRES(e->mu);

// An rdma_cm event of e->rid (ep_cm_event, e->mu held): an id to destroy.
cm_id_ptr ep_exchange_cm_event(msg_ep* e, struct rdma_cm_event* ev, const cm_action& a)
    EVD_REQUIRES(e->mu);

// A resume request that e's listener's token table allowed (pep.cpp, under
// the channel's lock): e takes id, or refuses it. An id to destroy.
cm_id_ptr ep_exchange_request(msg_ep* e, cm_id_ptr id, const resume::resume_msg& m)
    EVD_EXCLUDES(e->mu);

// The outage ended without resuming: the attempt's QP goes, its id is
// returned to be destroyed (a pending request is refused first); the
// token is no longer resumable.
cm_id_ptr ep_exchange_abandon(msg_ep* e) EVD_REQUIRES(e->mu);

// The request e->rid holds is refused with `why` and let go (its QP too):
// the id to destroy.
cm_id_ptr ep_exchange_refuse_pending(msg_ep* e, resume::resume_refusal why) EVD_REQUIRES(e->mu);

// fi_close (ep_close.cpp, no dispatch reaches e any more): the token leaves
// the listener's table, the attempt's id and QP go.
void ep_exchange_close(msg_ep* e) EVD_EXCLUDES(e->mu);

// Refuses a resume request on id with `why` in a refuse message (the
// generation it named); logged by the caller.
void ep_exchange_refuse(struct rdma_cm_id* id, uint32_t generation,
                        resume::resume_refusal why);

}  // namespace evd
