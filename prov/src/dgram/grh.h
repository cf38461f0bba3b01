// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The 40 bytes a UD receive gets before its payload (the Global Route
// Header space, ibv_post_recv(3)): which GID sent the datagram. Pure;
// covered by test/unit/grh.cpp.
//
// What the device writes there depends on the wire:
//  * InfiniBand with a GRH, and RoCE v1: the GRH itself, shaped like an
//    IPv6 header; the source GID is bytes 8..23.
//  * RoCE v2 over IPv6: the packet's IPv6 header; the source address is
//    bytes 8..23, which is the sender's GID.
//  * RoCE v2 over IPv4: 20 bytes left as they were (drivers zero them or
//    leave them), then the packet's IPv4 header in bytes 20..39; the source
//    address is bytes 32..35, and the sender's GID is its IPv4-mapped form.
// The IPv4 case is told apart by an IPv4 header (version 4, header length
// 5 words) at byte 20 where an IPv6-shaped header has its version 6 at
// byte 0.
#pragma once

#include <cstdint>

namespace evd {

inline constexpr unsigned kGrhLen = 40;

// The sender's GID from a received header; false when the bytes are
// neither an IPv6-shaped header nor an IPv4 one (no GRH was delivered: an
// InfiniBand datagram without IBV_WC_GRH).
bool grh_source_gid(const uint8_t hdr[kGrhLen], uint8_t gid[16]) noexcept;

}  // namespace evd
