// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The CQ object's state, shared by the files that implement it and by
// nothing else: open, close and the ops tables (cq.cpp), the read path and
// its error ring (cq_read.cpp), blocking reads, arming and fi_trywait
// (cq_wait.cpp), and the routing of QPs and counters with the pulls of the
// closing flush and of progress probes (cq_route.cpp).
//
// fi_cq_read polls the ibv_cq straight into the user's format. A work
// completion in error stops the read: it and whatever was polled after it in
// the same batch wait in a ring (raw ibv_wc) so ordering is kept; read
// answers -FI_EAVAIL while an error is at the head, readerr pops it.
// Counter progress (cntr.cpp) also pulls completions into that ring, so it
// is allocated at fi_cq_open with the CQ's size plus one batch; fi_cq_read
// returns what the ring holds before polling the ibv_cq again.
// Every completion polled, by whoever polls it, is accounted once on its
// endpoint's counters (cq_read.cpp, acct(); cntr.h).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/fi_domain.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cq/cq.h"
#include "domain.h"
#include "eq/wait.h"
#include "evd.h"
#include "futex.h"
#include "lock.h"
#include "owners.h"

namespace evd {

struct cntr_route;
struct ep;
struct ud_ep;

constexpr size_t kBatch = kCqPollBatch;  // ibv_wc polled per ibv_poll_cq call (stack array)

struct cq : object_head<struct fid_cq, kind::cq> {
    refcount refs;      // endpoints bound
    domain* dom = nullptr;
    enum fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
    size_t entry_size = sizeof(struct fi_cq_entry);
    enum fi_wait_obj wait_obj = FI_WAIT_NONE;
    bool err_data_size_field = true;  // api >= 1.5: fi_cq_err_entry has err_data_size

    comp_channel_ptr chan;
    ibv_cq_ptr ibcq;  // after chan: destroyed first; cq_close releases it itself
    fd_owner signal_fd;             // eventfd written by fi_cq_signal
    std::atomic<bool> yield_signal{false};  // fi_cq_signal on an FI_WAIT_YIELD CQ
    fd_owner wait_fd;               // epoll over chan->fd and signal_fd (FI_GETWAIT)
    mutex chan_mu;                // serializes draining the comp channel

    qlock mu;  // the one lock of the read path: ring + routes + ibv_poll_cq
    // Backlog of polled, already counted completions, in order: one batch
    // stopped by an error, and whatever counter progress pulled before the
    // user read the CQ. ibcq->cqe + kBatch entries, allocated at fi_cq_open.
    std::unique_ptr<struct ibv_wc[]> ring EVD_GUARDED_BY(mu);
    size_t ring_cap = 0;
    size_t ring_head EVD_GUARDED_BY(mu) = 0;
    size_t ring_count EVD_GUARDED_BY(mu) = 0;
    // QP numbers whose flush marker was polled and not yet claimed by the
    // closing endpoint waiting for it (cq_pull_marker).
    std::vector<uint32_t> markers EVD_GUARDED_BY(mu);
    // The same for progress probes that completed (cq_pull_probe).
    std::vector<uint32_t> probes EVD_GUARDED_BY(mu);
    fd_owner backlog_fd;  // eventfd: counter progress filled the backlog (sread)
    bool internal = false;  // an endpoint's private CQ (counter-only direction)

    struct route_ent {
        uint32_t qpn;
        cntr_route* r;
    };
    std::vector<route_ent> routes EVD_GUARDED_BY(mu);  // endpoints with counters or resumable
    // Completions the resumable endpoints attached here may leave unread at
    // once (every request of theirs is signaled: their queue depths), on top
    // of the size the CQ was opened with (base_cqe); the ibv_cq is grown to
    // hold both (cq_attach_qp), never shrunk.
    size_t rs_depth EVD_GUARDED_BY(mu) = 0;
    size_t base_cqe = 0;
    bool resize_warned EVD_GUARDED_BY(mu) = false;  // once per CQ
    // Datagram endpoints whose receives complete here (under mu): their
    // completions drop the receive header and may name the sender.
    std::vector<std::pair<uint32_t, ud_ep*>> ud EVD_GUARDED_BY(mu);

    wait_set* wset = nullptr;  // FI_WAIT_SET: the (FD) set this CQ joined
    wait_member wmember;

    mutex reg_mu;  // QP number -> endpoint, for terminal errors
    std::vector<std::pair<uint32_t, ep*>> qps EVD_GUARDED_BY(reg_mu);
};

// Every caller is in the CQ's own tables (cq_ops, cq_fi_ops) or was handed c.
inline cq* cq_of(struct fid_cq* f) { return self_of<cq>(f); }

// An error completion that ends its QP's endpoint, noted under c->mu and
// delivered once it is dropped (cq_deliver_fatal).
struct fatal_note {
    uint32_t qp_num;
    int status;
};

// ---- the read path (cq_read.cpp)
// Appends wc to the backlog ring (never overflows: see cq_read.cpp).
void cq_ring_push(cq* c, const struct ibv_wc& wc) EVD_REQUIRES(c->mu);
// Makes room for `more` entries, keeping their order (the closing flush).
void cq_ring_reserve(cq* c, size_t more) EVD_REQUIRES(c->mu);
// Wakes a reader waiting on the CQ: completions were pulled into the backlog
// by someone other than fi_cq_read (counter progress, the closing flush).
void cq_signal_backlog(cq* c);
// Every completion polled from the ibv_cq goes through here once, under
// c->mu: it is counted (acct) and false means nobody is shown it (a slot of
// an endpoint that is gone, a hidden success, a hidden request flushed).
// Errors that leave the QP in error are noted for the endpoint's terminal
// event, delivered by the caller once c->mu is dropped (deliver_fatal).
//
// A request the application gave no context for (fi_inject*, the hidden
// signaled send of selective completion, a counted request it asked no
// completion for) is never shown, not even in error: a CQ error entry whose
// op_context nobody gave is what ofi_rxm and MPI dereference and crash on.
// Such a failure reaches the application as its endpoint's terminal event,
// and through the flush errors of every later request that has a context.
bool cq_admit(cq* c, struct ibv_wc& wc, fatal_note* notes, size_t& nnotes) EVD_REQUIRES(c->mu);
// Ends the endpoints the notes name with their terminal error (c->mu dropped).
void cq_deliver_fatal(cq* c, const fatal_note* notes, size_t n);
// fi_cq_read(from) on c: the ring first, then the ibv_cq.
ssize_t cq_do_read(cq* c, void* buf, size_t count, fi_addr_t* src_addr);
// fi_cq_read of one entry into buf (not NULL), as cq_do_read(c, buf, 1,
// nullptr) answers it: the read of a loop that takes one completion at a
// time (fabtests' pingpong, an application waiting for one request; ofi_rxm
// reads 32 at once and goes the general way). On a plain CQ (no counters,
// resumable or datagram endpoints, nothing in the ring) one poll of one,
// and a success with the user's id or nothing goes back at once; anything
// else goes the general way. Throws nothing.
ssize_t cq_read_one(cq* c, void* buf) noexcept;
ssize_t cq_read(struct fid_cq* f, void* buf, size_t count);
ssize_t cq_readfrom(struct fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr);
ssize_t cq_readerr(struct fid_cq* f, struct fi_cq_err_entry* buf, uint64_t flags);

// ---- blocking (cq_wait.cpp)
// Non-blocking: consumes every pending completion-channel event.
void cq_drain_channel(cq* c);
ssize_t cq_sread(struct fid_cq* f, void* buf, size_t count, const void* cond, int timeout);
ssize_t cq_sreadfrom(struct fid_cq* f, void* buf, size_t count, fi_addr_t* src_addr,
                     const void* cond, int timeout);
int cq_signal(struct fid_cq* f);

}  // namespace evd
