// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The listener's half of a resume's security (docs/resume.md, "The
// exchange", step 3, and "Security"): the open resumable connections a
// listener accepted, each by the token it offered, the peer address it was
// made with and the generation it runs on; and the decision on a resume
// request, which may only ever attach to the connection it names, from the
// peer that connection was made with, for a generation newer than the one
// it runs on. A refused request changes nothing, and is counted by reason.
//
// Pure: no rdma-core call, no lock (the listener serialises calls). add()
// allocates (at fi_accept, not on the data path); check() allocates
// nothing.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <unordered_map>

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
    // connections); add() refuses more.
    explicit token_table(size_t max) : max_(max) {}

    // A connection was accepted with token t, from peer p, on generation 0.
    // False when the table is full, t is all zero, t is already held (the
    // caller draws another) or p is no address. Throws std::bad_alloc.
    bool add(const token_t& t, void* owner, const peer_ip& p);
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

    size_t size() const noexcept { return by_token_.size(); }
    uint64_t refused(resume_refusal why) const noexcept;
    uint64_t refused_total() const noexcept;

  private:
    struct hash {
        size_t operator()(const token_t& t) const noexcept;
    };
    struct entry {
        void* owner;
        peer_ip peer;
        uint32_t generation;
        bool ended;
    };
    entry* find_owner(const void* owner) noexcept;
    std::unordered_map<token_t, entry, hash> by_token_;
    size_t max_;
    std::array<uint64_t, 7> refused_{};  // by resume_refusal value
};

}  // namespace evd::resume
