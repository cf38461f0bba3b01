// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Helpers shared by the integration suites that run on rxe in the VM:
// environment, the VM guard, and fi_getinfo for the listener (rxe0) and for a
// client bound to rxe1 that connects to rxe0.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "../unit/common.h"

namespace rxetest {

inline const char* env_or(const char* name, const char* def) {
    const char* v = std::getenv(name);
    return v && *v ? v : def;
}

inline bool in_vm() { return std::getenv("EVD_VM_ADDR0") != nullptr; }

#define REQUIRE_VM()                                                           \
    do {                                                                       \
        if (!rxetest::in_vm()) GTEST_SKIP() << "needs the rxe VM (test/vm/run-in-vm)"; \
    } while (0)

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

// A listener's info: rxe0 (EVD_VM_ADDR0) as the source.
inline struct fi_info* server_info(const std::string& port, bool shared_rx = false) {
    evdtest::use_build_tree_provider();
    struct fi_info* h = make_hints(shared_rx);
    struct fi_info* info = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"), port.c_str(),
                         FI_SOURCE, h, &info);
    fi_freeinfo(h);
    EXPECT_EQ(ret, 0) << fi_strerror(-ret);
    return ret ? nullptr : info;
}

// A client's info: source rxe1 (EVD_VM_ADDR1), destination `dest` (default rxe0).
inline struct fi_info* client_info(const std::string& port, const char* dest = nullptr,
                                   bool shared_rx = false) {
    evdtest::use_build_tree_provider();
    struct fi_info* h = make_hints(shared_rx);
    auto* sin = static_cast<struct sockaddr_in*>(calloc(1, sizeof(struct sockaddr_in)));
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, env_or("EVD_VM_ADDR1", "192.0.2.2"), &sin->sin_addr);
    h->addr_format = FI_SOCKADDR_IN;
    h->src_addr = sin;
    h->src_addrlen = sizeof(*sin);
    struct fi_info* info = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), dest ? dest : env_or("EVD_VM_ADDR0", "192.0.2.1"),
                         port.c_str(), 0, h, &info);
    fi_freeinfo(h);
    EXPECT_EQ(ret, 0) << fi_strerror(-ret);
    return ret ? nullptr : info;
}

}  // namespace rxetest
