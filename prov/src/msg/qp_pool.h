// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// QP reuse: the queue pair of an endpoint closed after a clean disconnect is
// kept, reset, and given to a later endpoint of the same domain with the same
// CQs, SRQ and sizes, so a connection does not pay for creating and
// destroying a QP (on rxe about a third of a connection cycle).
//
// A kept QP passes through two states:
//  * waiting: its endpoint was closed; the QP is in the error state and its
//    flush came out in full (qp_flush.h: every work request it held has
//    completed in the CQs), and it waits until the peer can no longer address
//    it: the rdma_cm id lingers (linger.h) until RDMA_CM_EVENT_TIMEWAIT_EXIT,
//    and then qp_pool_release() makes it idle.
//  * idle: ready for qp_pool_take(), which moves it to RESET (emptying both
//    its queues) for the endpoint that takes it. Not at TIMEWAIT_EXIT: that
//    is read inside the application's EQ reads, and a RESET can take
//    milliseconds.
// A waiting QP whose TIMEWAIT_EXIT does not come within FI_EVD_QP_POOL_TIMEWAIT
// ms (the id was destroyed, the device went, rdma_cm lost the event) is
// destroyed, never reused. Endpoints on a shared receive context keep no QP
// (a receive the QP took from the SRQ may complete after the close). Closing a CQ, an SRX or the domain a kept QP uses
// destroys it first (a QP holds its CQs and SRQ), and so does the device's
// removal. fi_evd(7), QP REUSE.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "owners.h"

struct fi_evd_qp_pool_stats;

namespace evd {

struct domain;

// What a QP must share with the endpoint that takes it: the PD, both CQs,
// the SRQ, and the sizes it was asked for (not the ones the device rounded
// them up to).
struct qp_key {
    struct ibv_pd* pd = nullptr;
    struct ibv_cq* send_cq = nullptr;
    struct ibv_cq* recv_cq = nullptr;
    struct ibv_srq* srq = nullptr;
    struct ibv_qp_cap cap {};
    int sq_sig_all = 0;
};
bool operator==(const qp_key& a, const qp_key& b);

// The key of the QP ibv_create_qp(pd, a) would make.
qp_key qp_key_of(struct ibv_pd* pd, const struct ibv_qp_init_attr& a);

// An idle QP of d that matches k, moved to RESET now, or null (then the
// caller creates one; also when the RESET failed and the QP was destroyed).
// Counted in d's statistics either way.
ibv_qp_ptr qp_pool_take(domain* d, const qp_key& k);

// fi_close of an endpoint whose QP is flushed and whose connection ended
// cleanly: the pool keeps qp (waiting) and returns a token for
// qp_pool_release/qp_pool_drop; 0 when it does not keep it (pool off or full,
// no memory), and then qp was destroyed.
uint64_t qp_pool_retire(domain* d, const qp_key& k, ibv_qp_ptr qp);
// An endpoint's QP that is destroyed at close instead of kept (counted).
void qp_pool_discarded(domain* d);

// RDMA_CM_EVENT_TIMEWAIT_EXIT for the QP of token: idle (takeable). Nothing
// if it is gone (purged, expired). Callable under cm_chan::mu; makes no
// verbs call.
void qp_pool_release(uint64_t token);
// The QP of token will never see its TIMEWAIT_EXIT: destroyed.
void qp_pool_drop(uint64_t token);

// The object is about to be destroyed: every kept QP using it is destroyed
// first.
void qp_pool_purge_cq(struct ibv_cq* cq);
void qp_pool_purge_srq(struct ibv_srq* srq);
void qp_pool_purge_pd(struct ibv_pd* pd);
void qp_pool_purge_context(struct ibv_context* ctx);

// fi_control(FI_EVD_QP_POOL_STATS).
void qp_pool_stats(domain* d, struct fi_evd_qp_pool_stats* st);

}  // namespace evd
