// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The registration cache of a domain: fi_mr_reg of memory already
// registered reuses that registration instead of pinning the pages again.
//
// Why: ofi_rxm registers the application's buffer for every rendezvous
// message, and MPI reuses its buffers; a registration costs tens of
// microseconds to milliseconds on a real NIC (issue #12: 202 registrations
// for a 100-iteration ping-pong over evd;ofi_rxm, 3 over verbs;ofi_rxm).
//
// What is cached: page-aligned ranges of host memory that the memory
// monitor (mem_monitor.h) can watch, registered with local write, remote
// read and remote write (or, where the memory refuses that, read only: the
// access asked for then decides). A request hits an entry that contains it
// and whose access covers it. Entries never overlap: a miss registers the
// union of its range and the entries it overlaps, which leave the index
// (unused ones are deregistered, in-use ones live on for their users). An entry nobody uses stays registered, least recently used
// first out, within FI_EVD_MR_CACHE_MAX_COUNT entries and
// FI_EVD_MR_CACHE_MAX_SIZE bytes.
//
// Invalidation: the monitor reports munmap, mremap and madvise discards of
// cached ranges before the call returns; the entries they touch leave the
// index at once and are deregistered once unused, by the next call on the
// cache (never on the monitor's thread). A fork child caches nothing.
// Memory the monitor cannot watch (file mappings, ranges owned by another
// userfaultfd) is registered uncached, as without a cache.
//
// Lock: mem_lock() (one for every cache and the monitor). Under it nothing
// allocates, frees or calls rdma-core: the index is a vector whose capacity
// is reserved for max_count entries when the cache is made.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mem_monitor.h"
#include "owners.h"

struct fi_evd_mr_cache_stats;

namespace evd {

struct mr_entry {
    uintptr_t start = 0, end = 0;  // the registered pages
    int access = 0;                // ibv_access_flags of the registration
    ibv_mr_ptr ibmr;
    // Under mem_lock():
    int users = 0;            // fi_mr objects on it
    bool indexed = false;     // lookups find it
    mr_entry* lru_prev = nullptr;  // unused and indexed: the LRU list
    mr_entry* lru_next = nullptr;
    mr_entry* dead_next = nullptr;  // unused and not indexed: to deregister
};

struct mr_cache_limits {
    size_t max_count = 1024;  // entries
    size_t max_bytes = 0;     // registered bytes
};

class mr_cache {
public:
    // A cache for pd (its registrations go there). extra_access: access
    // bits every entry gets beyond local and remote read/write
    // (IBV_ACCESS_REMOTE_ATOMIC on a device with atomics, so that entries
    // with and without it never split the cache). Throws std::bad_alloc.
    mr_cache(struct ibv_pd* pd, mr_cache_limits lim, int extra_access = 0);
    ~mr_cache();  // every entry unused by then (the domain's MRs are closed)
    mr_cache(const mr_cache&) = delete;
    mr_cache& operator=(const mr_cache&) = delete;

    // The registration for [addr, addr + len) with at least `access`: a
    // cached entry (users + 1), a new one, or nullptr with *err = 0 when the
    // buffer is to be registered uncached by the caller (not watchable, a
    // fork child, the cache full of entries in use) or *err = the errno of a
    // failed registration.
    mr_entry* get(void* addr, size_t len, int access, int* err);
    // Drops a user of e (from get).
    void put(mr_entry* e);
    // The cache's counters (fi_control FI_EVD_MR_CACHE_STATS).
    void stats(struct fi_evd_mr_cache_stats* out);

private:
    static void on_invalidate(mem_listener* l, uintptr_t start, uintptr_t end);
    // Under mem_lock():
    mr_entry* find(uintptr_t start, uintptr_t end, int access);
    void unindex(size_t i);
    void retire(mr_entry* e);
    bool make_room(size_t bytes);
    void lru_push(mr_entry* e);
    void lru_unlink(mr_entry* e);
    // Outside it: deregisters and frees a list of retired entries; reap()
    // takes the list retire() built.
    static void free_dead(mr_entry* list);
    void reap();
    mr_entry* reg_new(uintptr_t start, uintptr_t end, int access, int* err);

    struct listener : mem_listener {
        mr_cache* cache = nullptr;
    } listener_;
    struct ibv_pd* pd_;
    mr_cache_limits lim_;
    int full_access_;  // what entries are registered with (see the constructor)
    pid_t pid_;
    // Under mem_lock():
    std::vector<mr_entry*> index_;  // sorted by start, non-overlapping
    size_t bytes_ = 0;
    mr_entry* lru_head_ = nullptr;  // oldest unused
    mr_entry* lru_tail_ = nullptr;
    mr_entry* dead_ = nullptr;
    uint64_t hits_ = 0, misses_ = 0, invalidated_ = 0, evicted_ = 0, uncached_ = 0,
             registered_ = 0;
};

}  // namespace evd
