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
int mr_ibv_access(uint64_t fi_access, bool iwarp = false, bool atomics = false) noexcept;

extern struct fi_ops_mr mr_ops;  // the domain's fid_domain::mr table

}  // namespace evd
