// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Memory registration (fi_mr(3), mr.cpp).
//
// mr_mode (as advertised): FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
// FI_MR_PROV_KEY. fi_mr_key() is the ibv_mr rkey, fi_mr_desc() is the evd
// mr object itself (the post paths read its lkey); RMA addresses are virtual
// addresses.
#pragma once

#include <infiniband/verbs.h>

#include "evd.h"
#include "owners.h"

namespace evd {

struct domain;
struct mr_entry;

struct mr : object_head<struct fid_mr, kind::mr> {
    uint32_t lkey = 0;  // copy of ibmr->lkey for the post paths
    domain* dom = nullptr;
    // The registration: a cache entry shared with other fi_mr objects
    // (mr_cache.h; fi_close drops this object's use of it), or one of its own.
    mr_entry* ent = nullptr;
    ibv_mr_ptr ibmr;  // deregistered by fi_close (release_with), which reports a failure
};

// lkey of a descriptor returned by fi_mr_desc() (hot path, not validated).
inline uint32_t mr_desc_lkey(void* desc) noexcept { return static_cast<const mr*>(desc)->lkey; }

// fi_mr access flags -> ibv_access_flags (exposed for tests); iwarp: the
// domain's device is an iWARP one (fi_evd(7), "iWARP"); atomics: it has
// atomic operations (FI_REMOTE_WRITE then also grants remote atomics).
// Inline: the registration-cache hit computes it.
inline int mr_ibv_access(uint64_t a, bool iwarp = false, bool atomics = false) noexcept {
    int acc = 0;
    if (a & FI_REMOTE_READ) acc |= IBV_ACCESS_REMOTE_READ;
    // the device writes into the buffer: incoming RMA writes, received
    // messages, data fetched by fi_read
    if (a & FI_REMOTE_WRITE) acc |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    // an atomic changes the target: fi_mr(3) grants it with FI_REMOTE_WRITE
    // (only asked of devices that have atomics: atomic_table.h)
    if (atomics && (a & FI_REMOTE_WRITE)) acc |= IBV_ACCESS_REMOTE_ATOMIC;
    if (a & (FI_RECV | FI_READ)) acc |= IBV_ACCESS_LOCAL_WRITE;
    // iWARP (RFC 5040) returns RDMA READ data as tagged writes into the
    // sink buffer, which must therefore allow remote writes
    if (iwarp && (a & FI_READ)) acc |= IBV_ACCESS_REMOTE_WRITE;
    // no access bits at all: the buffer may be used for anything local
    if (!(a & (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
        acc |= IBV_ACCESS_LOCAL_WRITE;
    return acc;
}

// The access bits fi_mr_reg knows are bits 8-13 of its access: each set of
// them is one of 64, and a domain keeps mr_ibv_access of all 64 (domain.h,
// mr_access) for the registration-cache hit.
inline constexpr uint64_t kMrAccessBits =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
inline constexpr unsigned kMrAccessShift = 8;
inline constexpr size_t kMrAccessSets = 64;
static_assert(kMrAccessBits == (kMrAccessSets - 1) << kMrAccessShift);
inline size_t mr_access_set(uint64_t fi_access) noexcept {
    return (fi_access & kMrAccessBits) >> kMrAccessShift;
}

extern struct fi_ops_mr mr_ops;  // the domain's fid_domain::mr table

}  // namespace evd
