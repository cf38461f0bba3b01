// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// An MSG endpoint's data-path state (ep->dp), shared by the data path
// (ep_data.cpp: send signalling) and the endpoint's counters
// (ep_counters.cpp: the slots that route a send-queue completion to its
// counter) and its resumable half (ep_resume.h). Made by ep_data_init, dropped by ep_data_close.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cq/cntr.h"
#include "msg/ep_resume.h"
#include "msg/post_batch.h"

namespace evd {

struct ep_dp {
    size_t max_inline = 0;
    uint32_t signal_every = 1;  // unsignaled sends between forced signals
    std::atomic<uint32_t> unsignaled{0};
    // Requests posted with FI_MORE (post_batch.h), at most tx_depth and
    // rx_depth of them (the queues' depths, at most kBatchMax). Resumable
    // endpoints post each request at once (their ledger keeps the QP's
    // order under its own lock).
    batch_slot<struct ibv_send_wr> txb;
    batch_slot<struct ibv_recv_wr> rxb;
    size_t tx_depth = 1, rx_depth = 1;
    // Counters (cntr.h): set at fi_enable when a counter is bound, then every
    // send-queue work request is signaled and carries a slot id.
    std::unique_ptr<tx_slot[]> slots;
    cntr_route route;
    bool counted = false;
    // Resumable connections (ep_resume.h): made at fi_enable when the
    // domain resumes; then route.rs points at it and the CQ routes every
    // completion of the QP through it.
    std::unique_ptr<ep_resume> rs;
};

// e's resumable half, or nullptr (not resumable, or its data path is gone).
// ep is complete wherever this is called (msg/ep.h).
template <class Ep>
inline ep_resume* ep_rs_of(Ep* e) {
    ep_dp* d = e ? e->dp.get() : nullptr;
    return d ? d->rs.get() : nullptr;
}

}  // namespace evd
