// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Completion queues (fi_cq(3), cq.cpp).
//
// How endpoints use them (ep_msg.cpp):
//  * fi_ep_bind(ep, cq_fid, flags): resolve with cq_from_fid(); the ibv_cq to
//    hand to ibv_create_qp() is cq_ibv(). Hold cq_bind_ref() while bound.
//  * After ibv_create_qp() succeeded, call cq_attach_qp() on each bound CQ so
//    that a fatal completion error read from that CQ can be turned into the
//    endpoint's terminal event (ep_terminal_error()); call cq_detach_qp()
//    before the QP is destroyed. cq_detach_qp() waits for a CQ reader that is
//    inside ep_terminal_error() for that endpoint (cq::reg_mu); it may be
//    called under the endpoint's own lock (fi_close's retire_qp does) only
//    because ep_terminal_error() takes no endpoint lock (an atomic claim and
//    an EQ post): keep it so (docs/locking.md). For a resumable endpoint's QP
//    it also pulls the CQ, ends the endpoints that pull finds failed (the
//    same ep_terminal_error, so the same rule) and completes what the
//    endpoint's ledgers still hold as cancelled (msg/ep_resume.h, rs_cancel).
#pragma once

#include <infiniband/verbs.h>

#include "cq/wr_ids.h"
#include "evd.h"

namespace evd {

struct cq;
struct ep;

// domain op fi_cq_open
int cq_open(struct fid_domain* dom, struct fi_cq_attr* attr, struct fid_cq** cq, void* context);
// A CQ private to one endpoint (counter-only direction): opened with a
// completion channel, freed when the last endpoint reference is dropped.
int cq_open_internal(struct fid_domain* dom, size_t size, cq** out);

// nullptr when f is not an evd CQ.
cq* cq_from_fid(struct fid* f);
// The verbs CQ that completions of a bound QP go to (send_cq / recv_cq).
struct ibv_cq* cq_ibv(cq* c);
// The domain the CQ was opened on (an EP may only bind CQs of its domain).
struct fid_domain* cq_domain(cq* c);
// Keep fi_close(cq) answering -FI_EBUSY while an endpoint is bound to it.
void cq_bind_ref(cq* c);
void cq_bind_unref(cq* c);
// Route fatal completion errors of QP `qp_num` to `owner` (see above).
int cq_attach_qp(cq* c, uint32_t qp_num, ep* owner);
void cq_detach_qp(cq* c, uint32_t qp_num);
// A resumable endpoint's outage ends without resuming (msg/ep_outage.h):
// what the ibv_cq holds is pulled into the backlog, then what the ledgers
// of this CQ's direction(s) still hold completes behind it as cancelled,
// as cq_detach_qp does, but QP `qp_num` stays attached (its late
// completions are dropped: they name nothing the ledgers hold). Under the
// endpoint's lock, the same rule as cq_detach_qp.
void cq_cancel_resumable(cq* c, uint32_t qp_num);
// A resumable endpoint's QP leaves c while its connection goes on (the
// exchange moved it onto a new QP, or an attempt's QP is let go): what the
// ibv_cq holds is pulled, the QP is forgotten, the ledgers keep what they
// hold. Under the endpoint's lock, as cq_detach_qp.
void cq_detach_qp_keep(cq* c, uint32_t qp_num);
// The exchange resumed a connection of QP qp_num's endpoint: the send
// operations its verdict found done leave the ledger, in order, completing
// in c as successes (shown unless hidden, counted). Under the endpoint's
// lock.
void cq_retire_resumed(cq* c, uint32_t qp_num);
// fi_trywait support: arms the CQ's completion channel and answers 0 when the
// wait fd may be waited on, -FI_EAGAIN when completions are already pending,
// -FI_EINVAL when the CQ has no wait fd.
int cq_trywait(cq* c);

// Completions one ibv_poll_cq call takes at most (the read path's batch):
// besides the CQ's own entries, that many can be polled and not yet read.
inline constexpr size_t kCqPollBatch = 32;

// ------------------------------------------------------------ completion ids
// wr_id of work requests whose successful completion must not reach the user
// (the periodic signaled send of selective completion, fi_inject*). One of
// the provider's own ids (wr_ids.h), so it never equals a user context.
inline uint64_t wr_id_suppressed() noexcept { return wr_id_of(wr_ids.suppressed); }
// wr_id of the marker an endpoint posts behind its queued work when it closes
// (qp_flush.h): never shown, never counted, only noticed.
inline uint64_t wr_id_flush_marker() noexcept { return wr_id_of(wr_ids.flush_marker); }
// wr_id of the progress probe posted on a connection when its port returns
// (probe.h): a success is only noticed, a failure ends the endpoint.
inline uint64_t wr_id_probe() noexcept { return wr_id_of(wr_ids.probe); }

// ------------------------------------------------------------ closing flush
// One step of waiting for the flush marker of QP `qp_num` (qp_flush.h): pulls
// what the ibv_cq holds into c's backlog, where the next fi_cq_read finds it,
// and answers 1 once the marker was polled (by this call or by any reader
// since the marker was posted), 0 while it was not, -FI_EIO when ibv_poll_cq
// fails. The backlog grows as needed: this runs at fi_close, not per message.
int cq_pull_marker(cq* c, uint32_t qp_num);
// The same for the progress probe of QP `qp_num` (probe.h): 1 once it
// completed successfully, 0 while it has not, -FI_EIO.
int cq_pull_probe(cq* c, uint32_t qp_num);

// ------------------------------------------------------------ ibv_wc_status
// The translation ibv_wc_status -> fi errno: DATA, one row per status, in
// wc_table.cpp. Covered by test/unit/wc_table.cpp and printed in fi_evd(7).
struct wc_row {
    int status;            // enum ibv_wc_status
    const char* name;      // "IBV_WC_REM_ACCESS_ERR"
    int fi_errno;          // positive FI_E* reported in fi_cq_err_entry::err
    bool qp_fatal;         // the QP is in error: the endpoint's terminal event
    const char* meaning;   // what fi_cq_strerror adds to ibv_wc_status_str()
};
extern const wc_row wc_table[];
extern const size_t wc_table_len;
const wc_row* wc_lookup(int status) noexcept;  // nullptr for unknown statuses
int wc_fi_errno(int status) noexcept;          // FI_EOTHER for unknown statuses
// Completion flags (FI_SEND|FI_MSG, ...) of a successful work completion
// (inline: the read path runs it once per completion).
inline uint64_t wc_flags(const struct ibv_wc& wc) noexcept {
    switch (wc.opcode) {
    case IBV_WC_SEND: return FI_SEND | FI_MSG;
    case IBV_WC_RDMA_WRITE: return FI_RMA | FI_WRITE;
    case IBV_WC_RDMA_READ: return FI_RMA | FI_READ;
    // fetch-and-add serves both base and fetching atomics: FI_ATOMIC alone
    case IBV_WC_COMP_SWAP:
    case IBV_WC_FETCH_ADD: return FI_ATOMIC;
    case IBV_WC_RECV:
        return FI_RECV | FI_MSG | ((wc.wc_flags & IBV_WC_WITH_IMM) ? FI_REMOTE_CQ_DATA : 0);
    case IBV_WC_RECV_RDMA_WITH_IMM: return FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
    default: return 0;
    }
}
// fi_cq_strerror's text for a completion status (prov_errno): the verbs
// name, what it means and the libfabric error it is reported as. Written
// into buf (len bytes) when given, else into a thread-local buffer.
const char* wc_error_text(int prov_errno, char* buf, size_t len);

// ------------------------------------------------------------ counters' view
// Pulls pending completions of q into its backlog (fi_cq_read returns them
// later, in order), accounting each on its counters (cntr.h). Returns how
// many were pulled, or a negative FI_E* code.
int cq_progress(cq* q);
// Arms q's completion channel (drain + ibv_req_notify_cq); returns its fd, or
// -1 when q has no channel (opened with FI_WAIT_NONE).
int cq_arm(cq* q);
int cq_chan_fd(cq* q);

}  // namespace evd
