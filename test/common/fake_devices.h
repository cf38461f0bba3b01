// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Made-up devices for the pure fi_getinfo code (build_infos): shared by the
// hint-rule tests and the hints fuzz target.
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <vector>

#include "info/info.h"

namespace evdtest {

// A RoCE device (IPv4 and IPv6 addresses, SRQs, atomics), an InfiniBand one
// (AF_IB only) and an iWARP one (IPv4, no atomics): between them every
// addr_format and every protocol evd accepts has an answer.
inline std::vector<evd::dev_desc> fake_devices() {
    evd::dev_desc roce;
    roce.name = "roce0";
    roce.transport = IBV_TRANSPORT_IB;
    roce.link_layer = IBV_LINK_LAYER_ETHERNET;
    roce.port_state = IBV_PORT_ACTIVE;
    roce.max_qp = roce.max_cq = roce.max_mr = 1000;
    roce.max_qp_wr = 4096;
    roce.max_sge = 8;
    roce.max_srq = 16;
    roce.max_msg_sz = 1u << 30;
    roce.max_inline = 64;
    roce.atomic_cap = IBV_ATOMIC_HCA;  // as rxe
    roce.max_inline_ud = 512;           // as rxe
    roce.max_ah = 32767;
    roce.active_mtu = 1024;             // rxe on a 1500-byte Ethernet link
    sockaddr_in s4{};
    s4.sin_family = AF_INET;
    inet_pton(AF_INET, "192.0.2.1", &s4.sin_addr);
    sockaddr_in6 s6{};
    s6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
    roce.addrs.resize(2);
    roce.addrs[0].set(reinterpret_cast<sockaddr*>(&s4), sizeof s4);
    roce.addrs[1].set(reinterpret_cast<sockaddr*>(&s6), sizeof s6);
    evd::dev_desc ib = roce;
    ib.name = "ib0";
    ib.link_layer = IBV_LINK_LAYER_INFINIBAND;
    ib.addrs.clear();
    evd::dev_desc iw = roce;
    iw.name = "iw0";
    iw.transport = IBV_TRANSPORT_IWARP;
    iw.atomic_cap = IBV_ATOMIC_NONE;  // as siw
    iw.addrs.resize(1);
    return {roce, ib, iw};
}

}  // namespace evdtest
