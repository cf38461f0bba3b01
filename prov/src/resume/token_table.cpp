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

token_table::token_table(size_t max) : entries_(std::make_unique<entry[]>(max)), max_(max) {}

bool token_table::add(const token_t& t, void* owner, const peer_ip& p) noexcept {
    static const token_t zero{};
    if (used_ >= max_ || token_equal(t, zero) || p.family == AF_UNSPEC || !owner) return false;
    entry* free_one = nullptr;
    for (size_t i = 0; i < max_; ++i) {
        entry& e = entries_[i];
        if (e.owner && token_equal(e.token, t)) return false;  // held: draw another
        if (!e.owner && !free_one) free_one = &e;
    }
    *free_one = entry{t, owner, p, 0, false};
    ++used_;
    return true;
}

token_table::entry* token_table::find_owner(const void* owner) noexcept {
    for (size_t i = 0; i < max_; ++i)
        if (owner && entries_[i].owner == owner) return &entries_[i];
    return nullptr;
}

void token_table::end(const void* owner) noexcept {
    if (entry* e = find_owner(owner)) e->ended = true;
}

void token_table::remove(const void* owner) noexcept {
    if (entry* e = find_owner(owner)) {
        *e = entry{};
        --used_;
    }
}

token_table::decision token_table::check(const token_t& t, const peer_ip& from,
                                         uint32_t generation) noexcept {
    // every entry is compared, whole token against whole token, whatever
    // matched before
    entry* hit = nullptr;
    for (size_t i = 0; i < max_; ++i) {
        entry& e = entries_[i];
        const bool same = token_equal(e.token, t);
        if (same && e.owner) hit = &e;
    }
    decision d;
    if (!hit) {
        d.why = resume_refusal::unknown_token;
    } else if (!(hit->peer == from)) {
        d.why = resume_refusal::wrong_peer;
    } else if (hit->ended) {
        d.why = resume_refusal::not_resumable;
    } else if (generation <= hit->generation) {
        d.why = resume_refusal::stale_generation;
    } else {
        d.owner = hit->owner;
        d.ok = true;
        return d;
    }
    count(d.why);
    return d;
}

void token_table::count(resume_refusal why) noexcept {
    const auto i = static_cast<size_t>(why);
    if (i > 0 && i < refused_.size()) ++refused_[i];
}

void token_table::accepted(const void* owner, uint32_t generation) noexcept {
    if (entry* e = find_owner(owner); e && generation > e->generation) e->generation = generation;
}

uint64_t token_table::refused(resume_refusal why) const noexcept {
    const auto i = static_cast<size_t>(why);
    return i > 0 && i < refused_.size() ? refused_[i] : 0;
}

resume_refusal wire_refusal(resume_refusal why) noexcept {
    return why == resume_refusal::wrong_peer ? resume_refusal::unknown_token : why;
}

uint64_t token_table::refused_total() const noexcept {
    uint64_t n = 0;
    for (uint64_t v : refused_) n += v;
    return n;
}

}  // namespace evd::resume
