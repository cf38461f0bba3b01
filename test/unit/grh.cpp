// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The sender's GID from a UD receive's 40-byte header (prov/src/dgram/grh.cpp),
// for each header a device writes there, built byte by byte here.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "dgram/grh.h"

using evd::grh_source_gid;
using evd::kGrhLen;

namespace {

// An IPv6-shaped header (GRH / RoCE v2 IPv6) from src to dst.
void ipv6_header(uint8_t h[kGrhLen], const char* src, const char* dst) {
    std::memset(h, 0, kGrhLen);
    h[0] = 0x60;     // version 6
    h[6] = 0x1b;     // next header: IB BTH (GRH) / UDP for RoCE v2 (0x11)
    h[7] = 64;       // hop limit
    inet_pton(AF_INET6, src, h + 8);
    inet_pton(AF_INET6, dst, h + 24);
}

// RoCE v2 over IPv4: 20 bytes of `fill`, then the IPv4 header.
void ipv4_header(uint8_t h[kGrhLen], uint8_t fill, const char* src, const char* dst) {
    std::memset(h, fill, 20);
    uint8_t* ip = h + 20;
    std::memset(ip, 0, 20);
    ip[0] = 0x45;  // version 4, 5 words
    ip[8] = 64;    // TTL
    ip[9] = 17;    // UDP
    inet_pton(AF_INET, src, ip + 12);
    inet_pton(AF_INET, dst, ip + 16);
}

}  // namespace

TEST(Grh, RoceV2Ipv4GivesTheMappedGid) {
    for (uint8_t fill : {0x00, 0xa5}) {  // what drivers leave in the first 20 bytes
        uint8_t h[kGrhLen], gid[16], want[16] = {};
        ipv4_header(h, fill, "198.51.100.2", "198.51.100.1");
        ASSERT_TRUE(grh_source_gid(h, gid));
        inet_pton(AF_INET6, "::ffff:198.51.100.2", want);
        EXPECT_EQ(0, std::memcmp(gid, want, 16)) << int(fill);
    }
}

TEST(Grh, GrhAndIpv6GiveTheSourceGid) {
    uint8_t h[kGrhLen], gid[16], want[16];
    ipv6_header(h, "fe80::1:2:3:4", "fe80::9");
    ASSERT_TRUE(grh_source_gid(h, gid));
    inet_pton(AF_INET6, "fe80::1:2:3:4", want);
    EXPECT_EQ(0, std::memcmp(gid, want, 16));
    // an IPv6 header whose bytes at 20 happen to read 0x45 is still IPv6
    ipv6_header(h, "2001:db8::45:0", "2001:db8::1");
    h[20] = 0x45;
    ASSERT_TRUE(grh_source_gid(h, gid));
    EXPECT_EQ(gid[0], 0x20);
}

TEST(Grh, NoHeaderIsNoSource) {
    uint8_t h[kGrhLen] = {}, gid[16];
    EXPECT_FALSE(grh_source_gid(h, gid));
    std::memset(h, 0xff, sizeof h);
    EXPECT_FALSE(grh_source_gid(h, gid));
}
