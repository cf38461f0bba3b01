// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// FI_ADDR_IB_UD names (prov/src/dgram/ud_addr.cpp): the byte layout libfabric's
// verbs provider uses, its text form both ways, and GID <-> IP address.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "dgram/ud_addr.h"

using namespace evd;

namespace {

ud_name sample() {
    ud_name n{};
    inet_pton(AF_INET6, "::ffff:192.0.2.1", n.gid);
    n.qpn = 0x11;
    n.lid = 0;
    n.pkey = 0xffff;
    n.service = 9228;
    n.sl = 0;
    return n;
}

}  // namespace

TEST(UdAddr, LayoutIsVerbs) {
    ud_name n = sample();
    uint8_t raw[32];
    std::memcpy(raw, &n, sizeof raw);
    uint32_t qpn;
    std::memcpy(&qpn, raw + 16, 4);
    EXPECT_EQ(qpn, 0x11u);
    uint16_t pkey, service;
    std::memcpy(&pkey, raw + 22, 2);
    std::memcpy(&service, raw + 24, 2);
    EXPECT_EQ(pkey, 0xffff);
    EXPECT_EQ(service, 9228);
    EXPECT_EQ(raw[10], 0xff);
    EXPECT_EQ(raw[12], 192);
    for (int i = 27; i < 32; ++i) EXPECT_EQ(raw[i], 0) << i;
}

TEST(UdAddr, TextFormRoundTrips) {
    ud_name n = sample();
    char buf[128];
    size_t need = ud_straddr(n, buf, sizeof buf);
    EXPECT_STREQ(buf, "fi_addr_ib_ud://::ffff:192.0.2.1:11/0/ffff/0");
    EXPECT_EQ(need, std::strlen(buf));
    ud_name back{};
    std::string why;
    ASSERT_TRUE(ud_parse(buf, &back, &why)) << why;
    EXPECT_EQ(0, std::memcmp(back.gid, n.gid, 16));
    EXPECT_EQ(back.qpn, n.qpn);
    EXPECT_EQ(back.lid, n.lid);
    EXPECT_EQ(back.pkey, n.pkey);
    EXPECT_EQ(back.sl, n.sl);
    EXPECT_EQ(back.service, 0) << "the text does not carry the service";

    ud_name ib{};
    inet_pton(AF_INET6, "fe80::a:b:c:d", ib.gid);
    ib.qpn = 0xabcdef;
    ib.lid = 0x1f;
    ib.pkey = 0x8001;
    ib.sl = 3;
    ud_straddr(ib, buf, sizeof buf);
    EXPECT_STREQ(buf, "fi_addr_ib_ud://fe80::a:b:c:d:abcdef/1f/8001/3");
    ASSERT_TRUE(ud_parse(buf, &back, &why)) << why;
    EXPECT_EQ(back.qpn, 0xabcdefu);
    EXPECT_EQ(back.lid, 0x1f);
    EXPECT_EQ(back.pkey, 0x8001);
    EXPECT_EQ(back.sl, 3);
}

TEST(UdAddr, ShortBufferIsCutAndSaysWhatItNeeds) {
    ud_name n = sample();
    char buf[20];
    size_t need = ud_straddr(n, buf, sizeof buf);
    EXPECT_EQ(std::strlen(buf), sizeof buf - 1);
    EXPECT_EQ(need, std::strlen("fi_addr_ib_ud://::ffff:192.0.2.1:11/0/ffff/0"));
}

// Untrusted text (fi_av_insertsym, a node string in fi_getinfo): every
// malformed form is refused with a reason, nothing is read past the text.
TEST(UdAddr, MalformedTextIsRefused) {
    const char* bad[] = {
        "",
        "fi_addr_ib_ud://",
        "fi_sockaddr_in://192.0.2.1:1",
        "fi_addr_ib_ud://::1:11",                // no '/'
        "fi_addr_ib_ud://:11/0/ffff/0",          // no GID
        "fi_addr_ib_ud://zz::1:11/0/ffff/0",     // not IPv6
        "fi_addr_ib_ud://::1:1000000/0/ffff/0",  // QPN > 24 bits
        "fi_addr_ib_ud://::1:11/10000/ffff/0",   // LID > 16 bits
        "fi_addr_ib_ud://::1:11/0/ffff",         // no SL
        "fi_addr_ib_ud://::1:11/0/ffff/100",     // SL > 8 bits
        "fi_addr_ib_ud://::1:11/0/ffff/0/",      // trailing field
        "fi_addr_ib_ud://::1:/0/ffff/0",         // empty QPN
        "fi_addr_ib_ud://::1:11//ffff/0",        // empty LID
        "fi_addr_ib_ud://::1:1x/0/ffff/0",       // not hex
    };
    for (const char* t : bad) {
        ud_name n{};
        std::string why;
        EXPECT_FALSE(ud_parse(t, &n, &why)) << t;
        EXPECT_FALSE(why.empty()) << t;
    }
    std::string why;
    EXPECT_FALSE(ud_parse(nullptr, nullptr, &why));
}

TEST(UdAddr, GidAndIpAddressBothWays) {
    struct sockaddr_in sin {};
    sin.sin_family = AF_INET;
    inet_pton(AF_INET, "198.51.100.2", &sin.sin_addr);
    uint8_t gid[16];
    ASSERT_TRUE(sockaddr_to_gid(reinterpret_cast<struct sockaddr*>(&sin), gid));
    struct in_addr v4;
    ASSERT_TRUE(gid_is_v4_mapped(gid, &v4));
    EXPECT_EQ(v4.s_addr, sin.sin_addr.s_addr);
    struct sockaddr_storage ss;
    socklen_t len = 0;
    gid_to_sockaddr(gid, 7000, &ss, &len);
    ASSERT_EQ(ss.ss_family, AF_INET);
    EXPECT_EQ(len, sizeof(struct sockaddr_in));
    auto* out = reinterpret_cast<struct sockaddr_in*>(&ss);
    EXPECT_EQ(out->sin_addr.s_addr, sin.sin_addr.s_addr);
    EXPECT_EQ(ntohs(out->sin_port), 7000);

    struct sockaddr_in6 sin6 {};
    sin6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::5", &sin6.sin6_addr);
    ASSERT_TRUE(sockaddr_to_gid(reinterpret_cast<struct sockaddr*>(&sin6), gid));
    EXPECT_FALSE(gid_is_v4_mapped(gid, nullptr));
    gid_to_sockaddr(gid, 1, &ss, &len);
    ASSERT_EQ(ss.ss_family, AF_INET6);
    EXPECT_EQ(0, std::memcmp(&reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_addr,
                             &sin6.sin6_addr, 16));
    struct sockaddr other {};
    other.sa_family = AF_UNIX;
    EXPECT_FALSE(sockaddr_to_gid(&other, gid));
}
