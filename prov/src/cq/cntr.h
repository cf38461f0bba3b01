// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Completion counters (fi_cntr(3), cntr.cpp; the counting itself happens
// where work completions are polled, in cq.cpp).
//
// How counters, CQs and endpoints work together (cntr.cpp, cq.cpp, ep_data.cpp):
//  * fi_ep_bind(ep, cntr, flags) fills ep->send_cntr/recv_cntr/read_cntr/
//    write_cntr (ep_data_bind) before fi_enable and holds cntr_bind_ref().
//  * At fi_enable (ep_data_enable) an endpoint with a counter builds its
//    cntr_route: the counters per operation kind and a table of send-queue
//    slots. Every send-queue work request of such an endpoint is signaled and
//    carries wr_id = tx_slot_wr_id(i): the slot keeps the user context, the
//    operation kind and whether the CQ must hide its success. Receive-side
//    completions of that QP are the ones whose wr_id is not a slot id.
//  * cq_attach_qp() registers the route with the CQ (under the CQ's read lock)
//    and makes the CQ a source of the route's counters; cq_detach_qp() undoes
//    both before the endpoint frees the route.
//  * Whoever polls a work completion from an ibv_cq (fi_cq_read, counter
//    progress) accounts it exactly once: cntr_inc()/cntr_inc_err().
#pragma once

#include <atomic>
#include <cstdint>

#include "cq/wr_ids.h"
#include "evd.h"

namespace evd {

struct cntr;
struct cq;
struct ep_resume;

// ------------------------------------------------------------ send-queue slots
enum class tx_kind : uint8_t { send = 0, read, write };

// Written by the poster, read by whoever polls the completion: the device is
// what orders the two, so the fields are (relaxed) atomics.
struct tx_slot {
    std::atomic<void*> context{nullptr};  // the user's context (reported by the CQ)
    std::atomic<tx_kind> kind{tx_kind::send};
    std::atomic<bool> hidden{false};      // success not shown in the CQ (selective, inject)
    std::atomic<bool> busy{false};
};

// Slot ids: the provider's own (wr_ids.h), at most kMaxTxSlots of them, never
// a user context.
inline uint64_t tx_slot_wr_id(uint32_t i) noexcept { return wr_id_of(wr_ids.tx_slots[0]) + i; }
inline bool is_tx_slot_wr_id(uint64_t wr_id) noexcept {
    return wr_id - wr_id_of(wr_ids.tx_slots[0]) < kMaxTxSlots;
}
inline uint32_t tx_slot_index(uint64_t wr_id) noexcept {
    return static_cast<uint32_t>(wr_id - wr_id_of(wr_ids.tx_slots[0]));
}

// What the CQ looks up by a completion's QP number (cq_state.h, routes): the
// counters per operation kind and the send-queue slots of an endpoint with
// counters, and, for a resumable endpoint, its ledgers (rs), which then hold
// the contexts and counter kinds themselves.
struct cntr_route {
    cntr* send = nullptr;
    cntr* recv = nullptr;
    cntr* read = nullptr;
    cntr* write = nullptr;
    tx_slot* slots = nullptr;  // nslots entries (owned by the endpoint)
    uint32_t nslots = 0;
    std::atomic<uint32_t> next{0};
    // A resumable endpoint (msg/ep_resume.h): every completion of its QP is
    // placed in its ledgers, which hold the contexts and counter kinds (its
    // send queue uses no tx_slot). Owned by the endpoint.
    ep_resume* rs = nullptr;
};

// The counter of r a completion counts on: the receive counter for a
// receive, else the one of the send-queue operation's kind (may be null).
inline cntr* route_cntr(const cntr_route& r, tx_kind kind, bool recv) noexcept {
    if (recv) return r.recv;
    return kind == tx_kind::send ? r.send : kind == tx_kind::read ? r.read : r.write;
}

// ------------------------------------------------------------ counter object
// domain op fi_cntr_open
int cntr_open(struct fid_domain* dom, struct fi_cntr_attr* attr, struct fid_cntr** cntr,
              void* context);
cntr* cntr_from_fid(struct fid* f);  // nullptr unless f is an evd counter
struct fid_domain* cntr_domain(cntr* c);
void cntr_bind_ref(cntr* c);
void cntr_bind_unref(cntr* c);
// Threads blocked in fi_cntr_wait on c now (tests wait for it instead of
// sleeping).
int cntr_waiters(cntr* c) noexcept;
// One successful / failed operation (never blocks, allocates nothing).
void cntr_inc(cntr* c) noexcept;
void cntr_inc_err(cntr* c) noexcept;
// The CQ `q` may hold completions counted by c: fi_cntr_read/wait poll it.
// Counted: attaching the same CQ twice needs two deletes.
int cntr_add_source(cntr* c, cq* q);
void cntr_del_source(cntr* c, cq* q);

}  // namespace evd
