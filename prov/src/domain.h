// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The domain object (fi_domain(3)): one RDMA device and port, its protection
// domain, and the EQ its device and port events go to (domain.cpp).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdlib>

#include "device/devctx.h"
#include "evd.h"
#include "fabric.h"
#include "lock.h"
#include "mr/mr.h"
#include "mr/mr_cache.h"
#include "owners.h"

namespace evd {

struct eq;

struct domain : object_head<struct fid_domain, kind::domain> {
    refcount refs;          // EPs, CQs, MRs, ... opened on it
    fabric* fab = nullptr;
    devctx* dev = nullptr;
    ibv_pd_ptr pd;
    struct fi_info* info = nullptr;   // fi_dupinfo of what was opened
    std::atomic<eq*> eq_bound{nullptr};  // fi_domain_bind(FI_EQ); domain-level events
    uint64_t eq_flags = 0;               // flags given at fi_domain_bind
    uint8_t port_num = 1;
    std::atomic<int> port_state{0};   // last seen ibv_port_state of port_num
    // Port snapshot kept by async.cpp from port events (fi_evd_port_state).
    std::atomic<int> port_last_event{-1};
    std::atomic<uint64_t> port_changes{0};
    std::atomic<uint64_t> port_change_ns{0};
    // PORT_ERR ends the domain's connected endpoints on port_num (fi_control
    // FI_EVD_FAIL_FAST_SET; starts as FI_EVD_FAIL_FAST). Read by async.cpp.
    std::atomic<bool> fail_fast{false};
    // Endpoints enabled from now on resume their connections, and give up
    // after this many ms; 0: they do not (fi_control
    // FI_EVD_RESUME_TIMEOUT_SET; starts as FI_EVD_RESUME_TIMEOUT;
    // msg/ep_resume.h).
    std::atomic<uint32_t> resume_timeout_ms{0};
    // The registration cache (mr_cache.h); null without one. Holds a
    // reference on the memory monitor.
    std::unique_ptr<mr_cache> mrc;
    // mr_ibv_access of every set of fi_mr access bits (mr.h, mr_access_set)
    // on this domain's device, filled with the cache: its hit looks it up.
    std::array<int, kMrAccessSets> mr_access{};
    // Where a base fi_atomic FI_SUM (a fetch-and-add whose old value nobody
    // wants) puts the old value: a page of its own (registering pins whole
    // pages, and fork-safe registration keeps them from a fork child: never
    // the domain's own memory), registered for local writes, on devices with
    // atomics (atomic_table.h). Concurrent adds overwrite it. Null when the
    // registration failed: base FI_SUM then answers -FI_ENOMEM.
    std::unique_ptr<uint64_t, call_deleter<::free>> atomic_sink;
    ibv_mr_ptr atomic_sink_mr;
    // QP reuse counters (qp_pool.h; fi_control FI_EVD_QP_POOL_STATS).
    struct {
        std::atomic<uint64_t> reused{0}, created{0}, retired{0}, discarded{0};
    } qpp;
};

int domain_open(struct fid_fabric* fab, struct fi_info* info, struct fid_domain** out,
                void* context);
domain* domain_from_fid(struct fid_domain* f);

}  // namespace evd
