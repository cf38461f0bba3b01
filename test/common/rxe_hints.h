// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The fi_getinfo hints of the rxe suites, without gtest: shared by the gtest
// suites (through rxe_util.h) and the stand-alone programs (evd_soak,
// evd_fault_scenario).
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstring>

namespace rxetest {

// MSG hints for evd with small queues and the registration modes evd needs.
inline struct fi_info* make_hints(bool shared_rx = false) {
    struct fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG;
    h->mode = ~0ULL;
    h->fabric_attr->prov_name = strdup("evd");
    h->tx_attr->size = 16;
    h->rx_attr->size = 16;
    if (shared_rx) h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    return h;
}

// Hints of the data and counter suites: MSG with RMA and remote CQ data,
// queues `depth` deep (the device maxima would make rxe allocate huge ones).
inline struct fi_info* rma_hints(size_t depth) {
    struct fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG | FI_RMA;
    h->mode = FI_CONTEXT | FI_RX_CQ_DATA;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->addr_format = FI_SOCKADDR_IN;
    h->fabric_attr->prov_name = strdup("evd");
    h->tx_attr->size = depth;
    h->rx_attr->size = depth;
    return h;
}

}  // namespace rxetest
