// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The resume messages as they travel in rdma_cm private data
// (docs/resume.md, "The exchange" and "On the wire"). Untrusted bytes from
// the network: resume_unpack accepts only a message it can account for
// whole, and says why it refused one (test/fuzz/cm_data.cpp fuzzes it).
//
// Every kind has the same 36-byte layout, integers in network byte order:
//
//   0  'e' 'v'        the magic of evd's connection header (cm/cm.h)
//   2  0x52           kResumeVersion, not kCmVersion: an evd without
//                     resumption refuses the message as a header it does not
//                     know, and a connection request never reads as one
//   3  kind           resume_kind
//   4  token[16]      offer and request; zero otherwise
//   20 generation     request, accept, refuse; zero in an offer
//   24 count          request and accept: the sender's messages consumed
//   32 reason         refuse: a resume_refusal; zero otherwise
//
// Fields a kind does not use must be zero, so that a message means one
// thing. The transport may pad private data (IB CM pads a request to 56
// bytes): what follows the 36 bytes is not read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace evd::resume {

inline constexpr uint8_t kResumeVersion = 0x52;
inline constexpr size_t kResumeMsgLen = 36;
inline constexpr size_t kTokenLen = 16;
using token_t = std::array<uint8_t, kTokenLen>;

enum class resume_kind : uint8_t {
    offer = 1,    // in the accept of a new connection: the token
    request = 2,  // the connect request of a resume
    accept = 3,   // the accept of a resume
    refuse = 4,   // the reject of a resume
};

// Why a resume request was refused (the refuse message's reason, and what
// the refusing side counts and logs).
enum class resume_refusal : uint32_t {
    unknown_token = 1,     // no open connection of this listener has it
    wrong_peer = 2,        // it came from another address than the connection's
    stale_generation = 3,  // not newer than the connection's generation
    not_resumable = 4,     // the connection ended, is closing, or never offered
    verdict_ends = 5,      // the accounting ended the connection (tx_ledger verdict)
    malformed = 6,         // resume_unpack refused the bytes
    busy = 7,              // it could not take the attempt now (no memory, no QP): try again
};
const char* resume_refusal_name(uint32_t reason) noexcept;

struct resume_msg {
    resume_kind kind = resume_kind::offer;
    token_t token{};
    uint32_t generation = 0;
    uint64_t count = 0;
    uint32_t reason = 0;
};

// Why resume_unpack refused bytes (what the FI_WARN names).
enum class wire_error : uint8_t {
    none = 0,
    short_message,  // fewer than kResumeMsgLen bytes
    not_resume,     // no evd magic, or not kResumeVersion
    bad_kind,       // a kind this evd does not know
    stray_field,    // a field the kind does not use is not zero
    zero_token,     // an offer or request whose token is all zero
};
const char* wire_error_name(wire_error e) noexcept;

// Writes m into out (kResumeMsgLen bytes); false, writing nothing, when cap
// is too small or m is not a message resume_unpack would accept.
bool resume_pack(const resume_msg& m, uint8_t* out, size_t cap) noexcept;
// Reads a message from untrusted bytes; wire_error::none and *m filled, or
// the reason it was refused.
wire_error resume_unpack(const void* pd, size_t len, resume_msg* m) noexcept;
// Whether the bytes start like a resume message (magic and version): the
// listener's test before it reads a request as a resume or as a new
// connection.
bool looks_like_resume(const void* pd, size_t len) noexcept;

// The offer in the accept of a new connection: after evd's connection
// header and the user's data (cm_pack's output). wire_error::not_resume
// when the accept carries none (a peer that does not resume, or padding).
wire_error resume_offer_in(const void* pd, size_t len, resume_msg* m) noexcept;

// Compares tokens in time that does not depend on where they differ.
bool token_equal(const token_t& a, const token_t& b) noexcept;

}  // namespace evd::resume
