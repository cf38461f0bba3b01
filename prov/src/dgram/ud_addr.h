// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The address of a datagram (UD) endpoint, FI_ADDR_IB_UD: the 32-byte name
// libfabric's verbs provider uses for its FI_EP_DGRAM endpoints, so that a
// user who knows verbs finds the same bytes and the same text form
// ("fi_addr_ib_ud://GID:QPN/LID/PKEY/SL", numbers in hex). Pure: no device
// access; covered by test/unit/ud_addr.cpp.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace evd {

// Byte layout (host byte order for the numbers, as verbs writes them):
//   0..15  GID (network order, as in the port's GID table)
//  16..19  QP number
//  20..21  LID (InfiniBand; 0 on RoCE)
//  22..23  P_Key
//  24..25  service (the port the name was resolved through; 0 if none)
//  26      service level
//  27..31  zero
struct ud_name {
    uint8_t gid[16];
    uint32_t qpn;
    uint16_t lid;
    uint16_t pkey;
    uint16_t service;
    uint8_t sl;
    uint8_t pad[5];
};
static_assert(sizeof(ud_name) == 32, "FI_ADDR_IB_UD names are 32 bytes");
static_assert(offsetof(ud_name, qpn) == 16 && offsetof(ud_name, lid) == 20 &&
                  offsetof(ud_name, pkey) == 22 && offsetof(ud_name, service) == 24 &&
                  offsetof(ud_name, sl) == 26,
              "the layout of libfabric's verbs DGRAM names");

inline constexpr size_t kUdNameLen = sizeof(ud_name);
inline constexpr const char* kUdAddrPrefix = "fi_addr_ib_ud://";

// The text form of n into buf (len bytes, NUL-terminated, cut to fit);
// returns the length the whole text needs, as snprintf does.
size_t ud_straddr(const ud_name& n, char* buf, size_t len) noexcept;

// Parses the text form (prefix included); false, with *why set, when it is
// not one. Fields it does not carry (service) are 0.
bool ud_parse(const char* text, ud_name* out, std::string* why);

// A GID that carries an IPv4 address (RoCE v2 on an IPv4 interface):
// ::ffff:a.b.c.d. Its address is written to *v4 (network order).
bool gid_is_v4_mapped(const uint8_t gid[16], struct in_addr* v4) noexcept;

// The IP address a RoCE GID stands for, as a sockaddr with port `port`
// (host order): IPv4-mapped GIDs give AF_INET, others AF_INET6.
void gid_to_sockaddr(const uint8_t gid[16], uint16_t port, struct sockaddr_storage* ss,
                     socklen_t* len) noexcept;

// The GID of an IP address (the inverse, for AF_INET and AF_INET6); false
// for other families.
bool sockaddr_to_gid(const struct sockaddr* sa, uint8_t gid[16]) noexcept;

}  // namespace evd
