// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// How datagram endpoints find each other by node and service: rdma_cm's
// Service ID Resolution (SIDR, RDMA_PS_UDP), ud_cm.cpp.
//
//  * An enabled datagram endpoint listens on its address's IP and service
//    (an ephemeral port when the service is 0) through the process's one
//    UD agent: a thread over one rdma_cm event channel that answers every
//    SIDR request with the endpoint's QP number and Q_Key. The thread only
//    answers peers; no event of the application is produced or advanced in
//    it (docs/design.md).
//  * fi_getinfo(node, service) for FI_EP_DGRAM, and fi_av_insertsvc, ask the
//    peer by SIDR (ud_resolve) and get its FI_ADDR_IB_UD name. Nobody
//    listening there is an answer, at once (as a connection request to a
//    port nobody listens on): no retry, so an RDM getinfo that ofi_rxd
//    passes to evd for a server of ofi_rxm's costs one round trip.
#pragma once

#include <sys/socket.h>

#include <cstdint>

#include "dgram/ud_addr.h"

namespace evd {

struct ud_listener;

// Starts answering SIDR requests to addr (IP and port; port 0: an
// ephemeral one) with qpn. Returns the listener and writes the port bound
// (host order) to *port; nullptr and *err (negative FI_E*) when it cannot.
ud_listener* ud_listen(const struct sockaddr* addr, uint32_t qpn, uint16_t* port, int* err);
// Stops answering; when it returns the agent no longer uses the listener.
void ud_unlisten(ud_listener* l);

// Resolves the datagram endpoint at dst (IP and port) from src (optional):
// its name, with `service` = dst's port. 0, or -FI_ENODATA when no
// datagram endpoint listens there or nothing answered within timeout_ms
// (each of address, route and SIDR), -FI_EHOSTUNREACH when no device
// reaches dst.
int ud_resolve(const struct sockaddr* src, const struct sockaddr* dst, int timeout_ms,
               ud_name* out);

// Stops the agent thread (provider cleanup).
void ud_agent_shutdown() noexcept;

}  // namespace evd
