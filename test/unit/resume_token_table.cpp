// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// A listener's table of resumable connections (resume/token_table.h): a
// resume request attaches only to the connection it names, from that
// connection's peer, for a newer generation; every other request is
// refused, counted by reason, and changes nothing.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>

#include "resume/token_table.h"

namespace resume_token_table_test {

using evd::resume::peer_ip;
using evd::resume::peer_ip_of;
using evd::resume::resume_refusal;
using evd::resume::token_t;
using evd::resume::token_table;

token_t tok(uint8_t seed) {
    token_t t;
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint8_t>(seed * 31 + i + 1);
    return t;
}

peer_ip v4(const char* a, uint16_t port = 4000) {
    struct sockaddr_in s {};
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    inet_pton(AF_INET, a, &s.sin_addr);
    return peer_ip_of(reinterpret_cast<struct sockaddr*>(&s), sizeof s);
}

int conn_a, conn_b;  // the connections' owners (their addresses only)

TEST(ResumeTokenTable, ARequestAttachesOnlyToTheConnectionItNamesFromItsPeer) {
    token_table t(8);
    ASSERT_TRUE(t.add(tok(1), &conn_a, v4("192.0.2.2")));
    ASSERT_TRUE(t.add(tok(2), &conn_b, v4("192.0.2.3")));
    // the peer resumes: a new id, so a new port, same address
    auto d = t.check(tok(1), v4("192.0.2.2", 5555), 1);
    ASSERT_TRUE(d.ok);
    EXPECT_EQ(d.owner, &conn_a);
    t.accepted(&conn_a, 1);
    EXPECT_TRUE(t.check(tok(2), v4("192.0.2.3"), 1).ok) << "the other one is untouched";
    EXPECT_EQ(t.refused_total(), 0u);
}

// Each hostile request: refused for its reason, counted, and the named
// connection still resumes from its own peer afterwards.
TEST(ResumeTokenTable, ForgedReplayedMisaddressedAndClosedRequestsAreRefusedAndChangeNothing) {
    token_table t(8);
    ASSERT_TRUE(t.add(tok(1), &conn_a, v4("192.0.2.2")));
    ASSERT_TRUE(t.check(tok(1), v4("192.0.2.2"), 1).ok);
    t.accepted(&conn_a, 1);
    token_t near = tok(1);
    near[15] ^= 1;
    struct row {
        const char* what;
        token_t token;
        peer_ip from;
        uint32_t generation;
        resume_refusal why;
    } rows[] = {
        {"a forged token", tok(9), v4("192.0.2.2"), 2, resume_refusal::unknown_token},
        {"a token one bit off", near, v4("192.0.2.2"), 2, resume_refusal::unknown_token},
        {"the right token from another address", tok(1), v4("192.0.2.9"), 2,
         resume_refusal::wrong_peer},
        {"a replay of the accepted request", tok(1), v4("192.0.2.2"), 1,
         resume_refusal::stale_generation},
        {"an older generation", tok(1), v4("192.0.2.2"), 0, resume_refusal::stale_generation},
    };
    uint64_t n = 0;
    for (const row& r : rows) {
        auto d = t.check(r.token, r.from, r.generation);
        EXPECT_FALSE(d.ok) << r.what;
        EXPECT_EQ(d.owner, nullptr) << r.what;
        EXPECT_EQ(d.why, r.why) << r.what;
        EXPECT_EQ(t.refused_total(), ++n) << r.what;
    }
    EXPECT_EQ(t.refused(resume_refusal::unknown_token), 2u);
    EXPECT_EQ(t.refused(resume_refusal::wrong_peer), 1u);
    EXPECT_EQ(t.refused(resume_refusal::stale_generation), 2u);
    // nothing changed: the real peer's next generation still attaches
    auto d = t.check(tok(1), v4("192.0.2.2"), 2);
    EXPECT_TRUE(d.ok);
    EXPECT_EQ(d.owner, &conn_a);
    // what a refusal tells the requester: never that a token exists
    EXPECT_EQ(evd::resume::wire_refusal(resume_refusal::wrong_peer), resume_refusal::unknown_token);
    EXPECT_EQ(evd::resume::wire_refusal(resume_refusal::stale_generation),
              resume_refusal::stale_generation);
    // refusals the listener decides itself are counted too
    t.count(resume_refusal::malformed);
    EXPECT_EQ(t.refused(resume_refusal::malformed), 1u);
    t.count(static_cast<resume_refusal>(99));  // out of range: not counted anywhere
    EXPECT_EQ(t.refused_total(), n + 1);
    // a connection that ended, then one that closed
    t.end(&conn_a);
    EXPECT_EQ(t.check(tok(1), v4("192.0.2.2"), 3).why, resume_refusal::not_resumable);
    t.remove(&conn_a);
    EXPECT_EQ(t.check(tok(1), v4("192.0.2.2"), 3).why, resume_refusal::unknown_token);
    EXPECT_EQ(t.size(), 0u);
}

TEST(ResumeTokenTable, WhatCannotBeAConnectionIsNotAdded) {
    token_table t(2);
    EXPECT_FALSE(t.add(token_t{}, &conn_a, v4("192.0.2.2"))) << "an all-zero token is no token";
    EXPECT_FALSE(t.add(tok(1), &conn_a, peer_ip{})) << "no peer address";
    EXPECT_FALSE(t.add(tok(1), nullptr, v4("192.0.2.2")));
    ASSERT_TRUE(t.add(tok(1), &conn_a, v4("192.0.2.2")));
    EXPECT_FALSE(t.add(tok(1), &conn_b, v4("192.0.2.3"))) << "a token already held";
    ASSERT_TRUE(t.add(tok(2), &conn_b, v4("192.0.2.3")));
    EXPECT_FALSE(t.add(tok(3), &conn_b, v4("192.0.2.4"))) << "full";
    EXPECT_EQ(t.size(), 2u);
    // a closed connection's entry is free again
    t.remove(&conn_a);
    EXPECT_TRUE(t.add(tok(3), &conn_a, v4("192.0.2.4")));
    EXPECT_EQ(t.check(tok(1), v4("192.0.2.2"), 1).why, resume_refusal::unknown_token);
    EXPECT_TRUE(t.check(tok(3), v4("192.0.2.4"), 1).ok);
}

TEST(ResumeTokenTable, PeerAddressesCompareWithoutPortsAndMappedV4IsV4) {
    EXPECT_EQ(v4("192.0.2.2", 1), v4("192.0.2.2", 2));
    EXPECT_NE(v4("192.0.2.2"), v4("192.0.2.3"));
    struct sockaddr_in6 m {};
    m.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::ffff:192.0.2.2", &m.sin6_addr);
    EXPECT_EQ(peer_ip_of(reinterpret_cast<struct sockaddr*>(&m), sizeof m), v4("192.0.2.2"));
    struct sockaddr_in6 six {};
    six.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::2", &six.sin6_addr);
    const peer_ip p6 = peer_ip_of(reinterpret_cast<struct sockaddr*>(&six), sizeof six);
    EXPECT_EQ(p6.family, AF_INET6);
    EXPECT_NE(p6, v4("192.0.2.2"));
    // short or unknown: no address
    struct sockaddr_in s {};
    s.sin_family = AF_INET;
    EXPECT_EQ(peer_ip_of(reinterpret_cast<struct sockaddr*>(&s), 4).family, AF_UNSPEC);
    EXPECT_EQ(peer_ip_of(nullptr, 0).family, AF_UNSPEC);
    struct sockaddr other {};
    other.sa_family = AF_UNIX;
    EXPECT_EQ(peer_ip_of(&other, sizeof other).family, AF_UNSPEC);
}

}  // namespace resume_token_table_test
