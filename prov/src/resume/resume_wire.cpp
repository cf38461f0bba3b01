// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The resume messages in rdma_cm private data (resume_wire.h).
#include "resume/resume_wire.h"

#include <cstring>

#include "cm/cm.h"

namespace evd::resume {

namespace {

void put32(uint8_t* p, uint32_t v) {
    for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
void put64(uint8_t* p, uint64_t v) {
    for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
uint32_t get32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
    return v;
}
uint64_t get64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
    return v;
}

bool token_zero(const token_t& t) {
    uint8_t any = 0;
    for (uint8_t b : t) any |= b;
    return any == 0;
}

// What a well-formed message of kind k looks like beyond its header.
wire_error check_fields(const resume_msg& m) {
    const bool has_token = m.kind == resume_kind::offer || m.kind == resume_kind::request;
    const bool has_generation = m.kind != resume_kind::offer;
    const bool has_count = m.kind == resume_kind::request || m.kind == resume_kind::accept;
    const bool has_reason = m.kind == resume_kind::refuse;
    if (!has_token && !token_zero(m.token)) return wire_error::stray_field;
    if (has_token && token_zero(m.token)) return wire_error::zero_token;
    if ((!has_generation && m.generation) || (!has_count && m.count) || (!has_reason && m.reason))
        return wire_error::stray_field;
    return wire_error::none;
}

bool known_kind(uint8_t k) {
    return k >= static_cast<uint8_t>(resume_kind::offer) &&
           k <= static_cast<uint8_t>(resume_kind::refuse);
}

}  // namespace

const char* resume_refusal_name(uint32_t reason) noexcept {
    switch (static_cast<resume_refusal>(reason)) {
    case resume_refusal::unknown_token: return "no connection has that token";
    case resume_refusal::wrong_peer: return "the request came from another address";
    case resume_refusal::stale_generation: return "the generation is not newer";
    case resume_refusal::not_resumable: return "the connection cannot be resumed";
    case resume_refusal::verdict_ends: return "the accounting ended the connection";
    case resume_refusal::malformed: return "the request was malformed";
    case resume_refusal::busy: return "it could not take the attempt now";
    }
    return "unknown reason";
}

const char* wire_error_name(wire_error e) noexcept {
    switch (e) {
    case wire_error::none: return "none";
    case wire_error::short_message: return "shorter than a resume message";
    case wire_error::not_resume: return "not a resume message";
    case wire_error::bad_kind: return "unknown kind";
    case wire_error::stray_field: return "a field its kind does not use is set";
    case wire_error::zero_token: return "its token is zero";
    }
    return "unknown";
}

bool looks_like_resume(const void* pd, size_t len) noexcept {
    if (!pd || len < 3) return false;
    const auto* b = static_cast<const uint8_t*>(pd);
    return b[0] == kCmMagic0 && b[1] == kCmMagic1 && b[2] == kResumeVersion;
}

bool resume_pack(const resume_msg& m, uint8_t* out, size_t cap) noexcept {
    if (!out || cap < kResumeMsgLen || !known_kind(static_cast<uint8_t>(m.kind)) ||
        check_fields(m) != wire_error::none)
        return false;
    out[0] = kCmMagic0;
    out[1] = kCmMagic1;
    out[2] = kResumeVersion;
    out[3] = static_cast<uint8_t>(m.kind);
    std::memcpy(out + 4, m.token.data(), kTokenLen);
    put32(out + 20, m.generation);
    put64(out + 24, m.count);
    put32(out + 32, m.reason);
    return true;
}

wire_error resume_unpack(const void* pd, size_t len, resume_msg* m) noexcept {
    if (!pd || len < kResumeMsgLen) return wire_error::short_message;
    if (!looks_like_resume(pd, len)) return wire_error::not_resume;
    const auto* b = static_cast<const uint8_t*>(pd);
    if (!known_kind(b[3])) return wire_error::bad_kind;
    resume_msg r;
    r.kind = static_cast<resume_kind>(b[3]);
    std::memcpy(r.token.data(), b + 4, kTokenLen);
    r.generation = get32(b + 20);
    r.count = get64(b + 24);
    r.reason = get32(b + 32);
    if (wire_error e = check_fields(r); e != wire_error::none) return e;
    *m = r;
    return wire_error::none;
}

wire_error resume_offer_in(const void* pd, size_t len, resume_msg* m) noexcept {
    const uint8_t* user = nullptr;
    size_t user_len = 0;
    if (cm_unpack(pd, len, &user, &user_len) != 0) return wire_error::not_resume;
    const size_t at = kCmHdrLen + user_len;  // cm_unpack checked it is inside len
    resume_msg r;
    const wire_error e = resume_unpack(static_cast<const uint8_t*>(pd) + at, len - at, &r);
    if (e != wire_error::none) return e == wire_error::short_message ? wire_error::not_resume : e;
    if (r.kind != resume_kind::offer) return wire_error::bad_kind;
    *m = r;
    return wire_error::none;
}

bool token_equal(const token_t& a, const token_t& b) noexcept {
    uint8_t diff = 0;
    for (size_t i = 0; i < kTokenLen; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace evd::resume
