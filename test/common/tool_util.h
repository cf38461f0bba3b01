// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Helpers of the project's command-line tools (link_bench, node_peer): a
// libfabric call that fails during setup ends the run, naming the call and
// the error; the hints of a plain FI_EP_MSG endpoint.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace evdtool {

inline const char* prog = "evd";  // set by main: the tool's name

[[noreturn]] inline void die(const char* what, int ret) {
    std::printf("%s: %s: %s (%d)\n", prog, what, fi_strerror(-ret), ret);
    std::exit(1);
}

// Hints for FI_EP_MSG endpoints of provider prov sending and receiving
// messages, with queues of depth entries (free with fi_freeinfo).
inline struct fi_info* msg_hints(const char* prov, size_t depth) {
    struct fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->addr_format = FI_SOCKADDR_IN;
    h->fabric_attr->prov_name = strdup(prov);
    h->tx_attr->size = depth;
    h->rx_attr->size = depth;
    return h;
}

// Waits `us` microseconds without entering a provider or the kernel
// (steady_clock reads the vDSO): the count benchmarks' pause between counted
// calls (op_cost, rxm_cost).
inline void spin(long us) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    while (std::chrono::steady_clock::now() < end) {
    }
}

}  // namespace evdtool

#define FI_CHECK(call)                              \
    do {                                            \
        int r_ = static_cast<int>(call);            \
        if (r_ < 0) evdtool::die(#call, r_);        \
    } while (0)
