// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Route lookup for an address evd has to bind before it connects
// (route_source.cpp).
#pragma once

#include <sys/socket.h>

namespace evd {

// The source address (port 0) the kernel's routing would use to reach dst,
// found by connecting a UDP socket, which sends no packet. False for an
// address family other than IPv4/IPv6 or when there is no route.
bool route_source(const struct sockaddr* dst, struct sockaddr_storage* out);

}  // namespace evd
