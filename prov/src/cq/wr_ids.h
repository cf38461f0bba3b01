// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The provider's own wr_ids: addresses inside one object of the provider's
// (wr_id_space, never read or written), so that no user context can equal
// one and the CQ tells a completion that is the user's from one of evd's
// with a single compare of its id against that object's range.
//
// What lives there: the hidden success (fi_inject*, the periodic signaled
// send: wr_id_suppressed, cq.h), the closing flush marker and the progress
// probe (cq.h), the send-queue slot ids of endpoints with counters (cntr.h)
// and the ledger ids of resumable endpoints (ep_resume.h).
#pragma once

#include <cstdint>

namespace evd {

// Largest slot table of one endpoint (the ids reserved for slot ids).
inline constexpr uint32_t kMaxTxSlots = 1u << 16;
// A resumable endpoint's ledger slots per queue: above any max_qp_wr.
inline constexpr uint32_t kRsMaxSlots = 1u << 20;

struct wr_id_space {
    uint8_t suppressed;
    uint8_t flush_marker;
    uint8_t probe;
    uint8_t tx_slots[kMaxTxSlots];
    uint8_t rs[2 * kRsMaxSlots + 1];  // send slots, receive slots, the keepalive's
};

extern wr_id_space wr_ids __attribute__((visibility("hidden")));

inline uintptr_t wr_id_of(const uint8_t& b) noexcept { return reinterpret_cast<uintptr_t>(&b); }

// One of evd's ids (any of the above), not a user's context.
inline bool is_evd_wr_id(uint64_t wr_id) noexcept {
    return wr_id - reinterpret_cast<uintptr_t>(&wr_ids) < sizeof(wr_id_space);
}

}  // namespace evd
