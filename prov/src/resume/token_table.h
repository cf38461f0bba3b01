// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The listener's half of a resume's security (docs/resume.md, "The
// exchange", step 3, and "Security"): the open resumable connections a
// listener accepted, each by the token it offered, the peer address it was
// made with and the generation it runs on; and the decision on a resume
// request, which may only ever attach to the connection it names, from the
// peer that connection was made with, for a generation newer than the one
// it runs on. A refused request changes nothing, and is counted by reason.
//
// Pure: no rdma-core call, no lock (the listener serialises calls). The
// constructor allocates every entry; nothing after it allocates or throws.
// A request is matched against every entry, whole token against whole
// token (token_equal), so how long the answer takes does not depend on how
// much of a guess was right.
//
// What protects a connection is the token's secrecy: the peer address is a
// check of consistency (a resuming side binds the address it had; an
// address can be forged on IB, where rdma_cm's header carries it). And the
// refusal a forger is told is always "unknown token" (wire_refusal): that a
// token exists, or from where, is counted and logged here, not told.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <memory>

#include "resume/resume_wire.h"

namespace evd::resume {

// A peer's IP address, without the port: a resuming side's new rdma_cm id
// has a new source port, never a new address. An IPv4-mapped IPv6 address
// is its IPv4 address.
struct peer_ip {
    sa_family_t family = AF_UNSPEC;  // AF_INET, AF_INET6; AF_UNSPEC: none
    std::array<uint8_t, 16> addr{};
    bool operator==(const peer_ip&) const = default;
};
// The address of sa (AF_INET or AF_INET6); AF_UNSPEC for anything else or
// a length too short for its family.
peer_ip peer_ip_of(const struct sockaddr* sa, size_t len) noexcept;

class token_table {
  public:
    // max: the most connections it holds (a listener's open resumable
    // connections); add() refuses more. Throws std::bad_alloc.
    explicit token_table(size_t max);

    // A connection was accepted with token t, from peer p, on generation 0.
    // False when the table is full, t is all zero, t is already held (the
    // caller draws another) or p is no address.
    bool add(const token_t& t, void* owner, const peer_ip& p) noexcept;
    // owner's connection ended but the endpoint is still open: a request
    // for it is refused as not resumable.
    void end(const void* owner) noexcept;
    // owner closed: its token is forgotten (a request names an unknown one).
    void remove(const void* owner) noexcept;

    struct decision {
        void* owner = nullptr;  // the connection the request may attach to
        resume_refusal why = resume_refusal::unknown_token;
        bool ok = false;
    };
    // A resume request naming t, from peer `from`, for `generation`: the
    // connection it may attach to, or why not (counted). Changes nothing
    // else: accepted() moves the connection on once it is attached.
    decision check(const token_t& t, const peer_ip& from, uint32_t generation) noexcept;
    // The request check() allowed was carried out: owner now runs on
    // `generation`, and an older or equal one is stale from now on.
    void accepted(const void* owner, uint32_t generation) noexcept;

    size_t size() const noexcept { return used_; }
    // Refusals counted by reason (check(), and count() for the ones the
    // listener decides itself: malformed, the accounting's verdict).
    void count(resume_refusal why) noexcept;
    uint64_t refused(resume_refusal why) const noexcept;
    uint64_t refused_total() const noexcept;

  private:
    struct entry {
        token_t token{};
        void* owner = nullptr;  // null: a free entry
        peer_ip peer;
        uint32_t generation = 0;
        bool ended = false;
    };
    entry* find_owner(const void* owner) noexcept;
    std::unique_ptr<entry[]> entries_;
    size_t max_;
    size_t used_ = 0;
    std::array<uint64_t, 7> refused_{};  // by resume_refusal value, 1..6
};

// What a refusal tells the requester: unknown_token for wrong_peer (a
// forger learns nothing of the token's existence), the reason otherwise.
resume_refusal wire_refusal(resume_refusal why) noexcept;

}  // namespace evd::resume
