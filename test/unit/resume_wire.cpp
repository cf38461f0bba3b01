// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The resume messages on the wire (prov/src/resume/resume_wire.*): every
// kind packs and reads back the same, each malformed message is refused
// with its reason (a table), the offer is found after the user's data of an
// accept, and tokens compare. test/fuzz/cm_data.cpp fuzzes the same reader.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cm/cm.h"
#include "resume/resume_wire.h"

namespace resume_wire_test {

using evd::resume::kResumeMsgLen;
using evd::resume::resume_kind;
using evd::resume::resume_msg;
using evd::resume::token_t;
using evd::resume::wire_error;

token_t some_token() {
    token_t t{};
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint8_t>(0xa0 + i);
    return t;
}

resume_msg msg_of(resume_kind k) {
    resume_msg m;
    m.kind = k;
    if (k == resume_kind::offer || k == resume_kind::request) m.token = some_token();
    if (k != resume_kind::offer) m.generation = 0x01020304;
    if (k == resume_kind::request || k == resume_kind::accept) m.count = 0x1122334455667788ull;
    if (k == resume_kind::refuse) m.reason = 3;
    return m;
}

TEST(ResumeWire, EveryKindPacksAndReadsBackTheSame) {
    for (resume_kind k : {resume_kind::offer, resume_kind::request, resume_kind::accept,
                          resume_kind::refuse}) {
        const resume_msg m = msg_of(k);
        uint8_t buf[56] = {};  // an IB connect request's room, padded
        ASSERT_TRUE(evd::resume::resume_pack(m, buf, sizeof buf)) << static_cast<int>(k);
        EXPECT_TRUE(evd::resume::looks_like_resume(buf, sizeof buf));
        resume_msg r;
        ASSERT_EQ(evd::resume::resume_unpack(buf, sizeof buf, &r), wire_error::none);
        EXPECT_EQ(r.kind, m.kind);
        EXPECT_EQ(r.token, m.token);
        EXPECT_EQ(r.generation, m.generation);
        EXPECT_EQ(r.count, m.count);
        EXPECT_EQ(r.reason, m.reason);
    }
}

TEST(ResumeWire, IntegersTravelInNetworkOrder) {
    uint8_t buf[kResumeMsgLen];
    ASSERT_TRUE(evd::resume::resume_pack(msg_of(resume_kind::request), buf, sizeof buf));
    const uint8_t generation[] = {1, 2, 3, 4};
    const uint8_t count[] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
    EXPECT_EQ(std::memcmp(buf + 20, generation, 4), 0);
    EXPECT_EQ(std::memcmp(buf + 24, count, 8), 0);
}

TEST(ResumeWire, MalformedMessagesAreRefusedWithTheirReason) {
    uint8_t good[kResumeMsgLen];
    ASSERT_TRUE(evd::resume::resume_pack(msg_of(resume_kind::request), good, sizeof good));
    struct row {
        const char* what;
        size_t at;      // byte to change (kResumeMsgLen: shorten instead)
        uint8_t value;
        wire_error want;
    } rows[] = {
        {"one byte short", kResumeMsgLen, 0, wire_error::short_message},
        {"wrong magic", 0, 'x', wire_error::not_resume},
        {"a connection header (version 1)", 2, evd::kCmVersion, wire_error::not_resume},
        {"kind 0", 3, 0, wire_error::bad_kind},
        {"kind 5", 3, 5, wire_error::bad_kind},
        {"a request with a reason", 35, 1, wire_error::stray_field},
        {"an accept with a token", 3, static_cast<uint8_t>(resume_kind::accept),
         wire_error::stray_field},
    };
    for (const row& r : rows) {
        std::vector<uint8_t> b(good, good + kResumeMsgLen);
        if (r.at == kResumeMsgLen) b.pop_back();
        else b[r.at] = r.value;
        resume_msg m;
        m.count = 42;
        EXPECT_EQ(evd::resume::resume_unpack(b.data(), b.size(), &m), r.want) << r.what;
        EXPECT_EQ(m.count, 42u) << r.what << ": nothing is written on refusal";
    }
    // a request whose token is zero
    resume_msg z = msg_of(resume_kind::request);
    z.token = {};
    uint8_t buf[kResumeMsgLen];
    EXPECT_FALSE(evd::resume::resume_pack(z, buf, sizeof buf)) << "the packer refuses it too";
    std::memcpy(buf, good, sizeof buf);
    std::memset(buf + 4, 0, evd::resume::kTokenLen);
    resume_msg m;
    EXPECT_EQ(evd::resume::resume_unpack(buf, sizeof buf, &m), wire_error::zero_token);
    EXPECT_EQ(evd::resume::resume_unpack(nullptr, 64, &m), wire_error::short_message);
    EXPECT_FALSE(evd::resume::resume_pack(msg_of(resume_kind::offer), buf, kResumeMsgLen - 1));
}

TEST(ResumeWire, TheOfferFollowsTheUsersDataInAnAccept) {
    // an IB accept's room: evd's header, 10 bytes of the user's, the offer,
    // zero padding
    uint8_t rep[196] = {};
    const char user[] = "0123456789";
    const int n = evd::cm_pack(rep, sizeof rep, user, 10);
    ASSERT_EQ(n, 14);
    ASSERT_TRUE(evd::resume::resume_pack(msg_of(resume_kind::offer), rep + n, sizeof rep - n));
    resume_msg m;
    ASSERT_EQ(evd::resume::resume_offer_in(rep, sizeof rep, &m), wire_error::none);
    EXPECT_EQ(m.token, some_token());
    // the user's data is unchanged for the application
    const uint8_t* data = nullptr;
    size_t len = 0;
    ASSERT_EQ(evd::cm_unpack(rep, sizeof rep, &data, &len), 0);
    EXPECT_EQ(len, 10u);
    // no offer: padding, or an accept that ends early
    uint8_t plain[196] = {};
    ASSERT_EQ(evd::cm_pack(plain, sizeof plain, user, 10), 14);
    EXPECT_EQ(evd::resume::resume_offer_in(plain, sizeof plain, &m), wire_error::not_resume);
    EXPECT_EQ(evd::resume::resume_offer_in(plain, 14, &m), wire_error::not_resume);
    // a request where an offer belongs is not an offer
    ASSERT_TRUE(evd::resume::resume_pack(msg_of(resume_kind::request), rep + n, sizeof rep - n));
    EXPECT_EQ(evd::resume::resume_offer_in(rep, sizeof rep, &m), wire_error::bad_kind);
}

TEST(ResumeWire, TokensCompareWhole) {
    token_t a = some_token(), b = some_token();
    EXPECT_TRUE(evd::resume::token_equal(a, b));
    b[15] ^= 1;
    EXPECT_FALSE(evd::resume::token_equal(a, b));
    b = a;
    b[0] ^= 0x80;
    EXPECT_FALSE(evd::resume::token_equal(a, b));
}

TEST(ResumeWire, EveryReasonAndErrorHasAName) {
    const uint32_t last = static_cast<uint32_t>(evd::resume::resume_refusal::busy);
    for (uint32_t r = 1; r <= last; ++r)
        EXPECT_STRNE(evd::resume::resume_refusal_name(r), "unknown reason") << r;
    EXPECT_STREQ(evd::resume::resume_refusal_name(0), "unknown reason");
    EXPECT_STREQ(evd::resume::resume_refusal_name(last + 1), "unknown reason");
    for (int e = 0; e <= static_cast<int>(wire_error::zero_token); ++e)
        EXPECT_STRNE(evd::resume::wire_error_name(static_cast<wire_error>(e)), "unknown") << e;
}

}  // namespace resume_wire_test
