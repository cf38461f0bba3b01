// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// A listener's open resumable connections and the decision on a resume
// request (token_table.h).
#include "resume/token_table.h"

#include <netinet/in.h>

#include <cstring>

namespace evd::resume {

peer_ip peer_ip_of(const struct sockaddr* sa, size_t len) noexcept {
    peer_ip p;
    if (!sa) return p;
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const auto* in = reinterpret_cast<const struct sockaddr_in*>(sa);
        p.family = AF_INET;
        std::memcpy(p.addr.data(), &in->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(sa);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            p.family = AF_INET;
            std::memcpy(p.addr.data(), in6->sin6_addr.s6_addr + 12, 4);
        } else {
            p.family = AF_INET6;
            std::memcpy(p.addr.data(), in6->sin6_addr.s6_addr, 16);
        }
    }
    return p;
}

size_t token_table::hash::operator()(const token_t& t) const noexcept {
    // The token is random: any 8 of its bytes spread as well as a hash.
    uint64_t h;
    std::memcpy(&h, t.data(), sizeof h);
    return static_cast<size_t>(h);
}

bool token_table::add(const token_t& t, void* owner, const peer_ip& p) {
    static const token_t zero{};
    if (by_token_.size() >= max_ || token_equal(t, zero) || p.family == AF_UNSPEC || !owner)
        return false;
    return by_token_.emplace(t, entry{owner, p, 0, false}).second;
}

token_table::entry* token_table::find_owner(const void* owner) noexcept {
    for (auto& [t, e] : by_token_)
        if (e.owner == owner) return &e;
    return nullptr;
}

void token_table::end(const void* owner) noexcept {
    if (entry* e = find_owner(owner)) e->ended = true;
}

void token_table::remove(const void* owner) noexcept {
    for (auto it = by_token_.begin(); it != by_token_.end(); ++it)
        if (it->second.owner == owner) {
            by_token_.erase(it);
            return;
        }
}

token_table::decision token_table::check(const token_t& t, const peer_ip& from,
                                         uint32_t generation) noexcept {
    decision d;
    auto it = by_token_.find(t);
    // the hash found a candidate; the whole token decides, in constant time
    if (it == by_token_.end() || !token_equal(it->first, t)) {
        d.why = resume_refusal::unknown_token;
    } else if (!(it->second.peer == from)) {
        d.why = resume_refusal::wrong_peer;
    } else if (it->second.ended) {
        d.why = resume_refusal::not_resumable;
    } else if (generation <= it->second.generation) {
        d.why = resume_refusal::stale_generation;
    } else {
        d.owner = it->second.owner;
        d.ok = true;
        return d;
    }
    ++refused_[static_cast<size_t>(d.why) % refused_.size()];
    return d;
}

void token_table::accepted(const void* owner, uint32_t generation) noexcept {
    if (entry* e = find_owner(owner); e && generation > e->generation) e->generation = generation;
}

uint64_t token_table::refused(resume_refusal why) const noexcept {
    return refused_[static_cast<size_t>(why) % refused_.size()];
}

uint64_t token_table::refused_total() const noexcept {
    uint64_t n = 0;
    for (uint64_t v : refused_) n += v;
    return n;
}

}  // namespace evd::resume
