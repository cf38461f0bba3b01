// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The address vector of datagram endpoints (fi_av(3), av.cpp).
//
// Addresses are FI_ADDR_IB_UD names (ud_addr.h). Inserting one makes the
// address handle (ibv_ah) a UD send needs, on the domain's PD and port; the
// fi_addr_t is the entry's index, for FI_AV_MAP and FI_AV_TABLE alike
// (indices 0, 1, 2, ... in insertion order, never reused after a remove, so
// a TABLE keeps its meaning and a stale MAP address is caught).
//
// Readers never lock: the data path finds an entry by index with two loads
// (chunks never move once made), and the CQ finds the fi_addr_t of a
// receive's source (FI_SOURCE) in a hash index published by pointer.
// Inserts and removes take the AV's mutex.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <vector>

#include "dgram/ud_addr.h"
#include "evd.h"
#include "lock.h"
#include "owners.h"

namespace evd {

struct domain;

struct av_entry {
    ud_name name{};
    ibv_ah_ptr ah;
    std::atomic<bool> live{false};
};

// The source index: open addressing over (GID, QPN) -> entry index + 1,
// 0 = empty, kTomb = removed. Replaced (never resized in place) when it
// fills; old ones are kept until the AV closes, for readers still in them.
struct av_index {
    static constexpr uint32_t kTomb = UINT32_MAX;
    size_t cap = 0;  // a power of two
    std::unique_ptr<std::atomic<uint32_t>[]> slot;
    size_t used = 0;  // non-empty slots, tombstones included (writers only)
};

struct av : object_head<struct fid_av, kind::av> {
    static constexpr size_t kChunk = 256;        // entries per chunk
    static constexpr size_t kMaxChunks = 16384;  // 4 Mi entries
    refcount refs;  // endpoints bound to it
    domain* dom = nullptr;
    enum fi_av_type type = FI_AV_MAP;
    std::unique_ptr<std::atomic<av_entry*>[]> chunks;  // kMaxChunks, filled on demand
    std::atomic<size_t> next{0};                       // entries made so far
    std::atomic<av_index*> index{nullptr};
    // every index made (the last is current), and the chunks
    std::vector<std::unique_ptr<av_index>> indexes EVD_GUARDED_BY(mu);
    std::vector<std::unique_ptr<av_entry[]>> owned EVD_GUARDED_BY(mu);
    mutex mu;                                        // inserts and removes
    size_t live_count EVD_GUARDED_BY(mu) = 0;        // entries with an AH
};

// domain op fi_av_open
int av_open(struct fid_domain* dom, struct fi_av_attr* attr, struct fid_av** av, void* context);
av* av_from_fid(struct fid* f);  // nullptr unless f is an evd AV

// The live entry of addr, or nullptr (never inserted, removed, or not an
// index). Lock-free; the entry stays valid until it is removed.
inline const av_entry* av_entry_of(const av* a, fi_addr_t addr) noexcept {
    if (addr >= a->next.load(std::memory_order_acquire)) return nullptr;
    const av_entry* c = a->chunks[addr / av::kChunk].load(std::memory_order_acquire);
    if (!c) return nullptr;
    const av_entry* e = &c[addr % av::kChunk];
    return e->live.load(std::memory_order_acquire) ? e : nullptr;
}

// The fi_addr_t of the live entry named (gid, qpn), or FI_ADDR_NOTAVAIL.
// Lock-free (the CQ calls it for FI_SOURCE).
fi_addr_t av_find(const av* a, const uint8_t gid[16], uint32_t qpn) noexcept;

}  // namespace evd
