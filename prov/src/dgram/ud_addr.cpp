// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// FI_ADDR_IB_UD names: text form, parsing, GID <-> IP address (ud_addr.h).
#include "dgram/ud_addr.h"

#include <arpa/inet.h>
#include <inttypes.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace evd {

size_t ud_straddr(const ud_name& n, char* buf, size_t len) noexcept {
    char gid[INET6_ADDRSTRLEN] = "";
    if (!inet_ntop(AF_INET6, n.gid, gid, sizeof gid)) std::strcpy(gid, "?");
    int r = std::snprintf(buf, len, "%s%s:%" PRIx32 "/%" PRIx16 "/%" PRIx16 "/%" PRIx8,
                          kUdAddrPrefix, gid, n.qpn, n.lid, n.pkey, n.sl);
    return r < 0 ? 0 : static_cast<size_t>(r);
}

namespace {

// A hex number of at most `max` from s up to `end` (exclusive).
bool hex_field(const char* s, const char* end, uint64_t max, uint64_t* v) {
    if (s == end || end - s > 16) return false;
    uint64_t x = 0;
    for (const char* p = s; p < end; ++p) {
        const char c = *p;
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return false;
        x = x * 16 + static_cast<uint64_t>(d);
        if (x > max) return false;
    }
    *v = x;
    return true;
}

}  // namespace

bool ud_parse(const char* text, ud_name* out, std::string* why) {
    auto fail = [&](const char* w) {
        if (why) *why = w;
        return false;
    };
    if (!text || !out) return fail("no text");
    const size_t plen = std::strlen(kUdAddrPrefix);
    if (std::strncmp(text, kUdAddrPrefix, plen) != 0) return fail("not fi_addr_ib_ud://");
    const char* s = text + plen;
    // the GID is an IPv6 address, itself full of ':': the QPN follows the
    // last ':' before the first '/'
    const char* slash = std::strchr(s, '/');
    if (!slash) return fail("no '/' after the QP number");
    const char* colon = nullptr;
    for (const char* p = s; p < slash; ++p)
        if (*p == ':') colon = p;
    if (!colon || colon == s) return fail("no GID:QPN");
    std::string g(s, static_cast<size_t>(colon - s));
    ud_name n{};
    if (inet_pton(AF_INET6, g.c_str(), n.gid) != 1) return fail("the GID is not an IPv6 address");
    uint64_t v = 0;
    if (!hex_field(colon + 1, slash, 0xffffff, &v)) return fail("bad QP number (24-bit hex)");
    n.qpn = static_cast<uint32_t>(v);
    const char* f[3] = {slash + 1, nullptr, nullptr};
    for (int i = 1; i < 3; ++i) {
        const char* e = std::strchr(f[i - 1], '/');
        if (!e) return fail("expected GID:QPN/LID/PKEY/SL");
        f[i] = e + 1;
    }
    if (!hex_field(f[0], f[1] - 1, 0xffff, &v)) return fail("bad LID (16-bit hex)");
    n.lid = static_cast<uint16_t>(v);
    if (!hex_field(f[1], f[2] - 1, 0xffff, &v)) return fail("bad P_Key (16-bit hex)");
    n.pkey = static_cast<uint16_t>(v);
    if (!hex_field(f[2], f[2] + std::strlen(f[2]), 0xff, &v)) return fail("bad SL (8-bit hex)");
    n.sl = static_cast<uint8_t>(v);
    *out = n;
    return true;
}

bool gid_is_v4_mapped(const uint8_t gid[16], struct in_addr* v4) noexcept {
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(gid, pre, sizeof pre) != 0) return false;
    if (v4) std::memcpy(&v4->s_addr, gid + 12, 4);
    return true;
}

void gid_to_sockaddr(const uint8_t gid[16], uint16_t port, struct sockaddr_storage* ss,
                     socklen_t* len) noexcept {
    std::memset(ss, 0, sizeof *ss);
    struct in_addr v4;
    if (gid_is_v4_mapped(gid, &v4)) {
        auto* sin = reinterpret_cast<struct sockaddr_in*>(ss);
        sin->sin_family = AF_INET;
        sin->sin_addr = v4;
        sin->sin_port = htons(port);
        *len = sizeof *sin;
        return;
    }
    auto* sin6 = reinterpret_cast<struct sockaddr_in6*>(ss);
    sin6->sin6_family = AF_INET6;
    std::memcpy(&sin6->sin6_addr, gid, 16);
    sin6->sin6_port = htons(port);
    *len = sizeof *sin6;
}

bool sockaddr_to_gid(const struct sockaddr* sa, uint8_t gid[16]) noexcept {
    if (!sa) return false;
    if (sa->sa_family == AF_INET) {
        std::memset(gid, 0, 16);
        gid[10] = gid[11] = 0xff;
        std::memcpy(gid + 12, &reinterpret_cast<const struct sockaddr_in*>(sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        std::memcpy(gid, &reinterpret_cast<const struct sockaddr_in6*>(sa)->sin6_addr, 16);
        return true;
    }
    return false;
}

}  // namespace evd
