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
// Locks: the cache's own mu_, and mem_lock() (the monitor's, one for the
// process), taken before mu_ when both are. A hit takes mu_ alone: no
// process-wide lock, no system call (a fork is seen through a counter that
// pthread_atfork moves, not getpid) and no allocation (the fi_mr object is
// built in the memory of one closed before, kept here). A miss takes both
// to read the monitor's event count and to index its entry. The monitor
// holds every cache's mu_ while it reads and applies events, so a lookup
// made after munmap returned waits for, and then sees, the invalidation.
// Under either lock nothing allocates, frees or calls rdma-core: the index
// is a vector whose capacity is reserved for max_count entries when the
// cache is made.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mr/mem_monitor.h"
#include "owners.h"

struct fi_evd_mr_cache_stats;

namespace evd {

struct mr_entry {
    uintptr_t start = 0, end = 0;  // the registered pages
    int access = 0;                // ibv_access_flags of the registration
    ibv_mr_ptr ibmr;
    // Under its cache's mu_ (not annotated: the analysis cannot tie an
    // entry to its cache; every function of the cache that touches them
    // requires mu_).
    int users = 1;         // fi_mr objects on it; born with its first
    bool indexed = false;  // lookups find it
    // unused and indexed: the LRU list
    mr_entry* lru_prev = nullptr;
    mr_entry* lru_next = nullptr;
    // unused and not indexed: to deregister
    mr_entry* dead_next = nullptr;
};

struct mr_cache_limits {
    size_t max_count = 1024;  // entries
    size_t max_bytes = 0;     // registered bytes
};

// Forks of this process so far, as its child sees them: moved by the child
// handler pthread_atfork runs in every fork child (mr_cache.cpp), so that a
// cache knows it is in a child without calling getpid on every
// registration. g_atfork false: the handler could not be registered (then
// getpid decides).
inline std::atomic<unsigned> g_forks{0};
inline bool g_atfork = false;

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
    // failed registration. With an entry, *spare is the memory of a closed
    // fi_mr object to build the new one in (taken under the same lock), or
    // nullptr when none is kept.
    mr_entry* get(void* addr, size_t len, int access, int* err, void** spare);
    // The hit alone, for fi_mr_reg's first step: the entry last found or
    // registered holds [addr, addr + len) with `access`, and a closed
    // object's memory is kept. Then as get (users + 1, *spare); otherwise
    // nullptr and nothing changed (get decides).
    mr_entry* try_hit(uintptr_t a, size_t len, int access, void** spare) EVD_EXCLUDES(mu_) {
        if (forked()) return nullptr;
        evd::lock_guard lk(mu_);
        mr_entry* e = last_;
        // retired entries waiting (dead_) are get's to free, unlocked
        if (!e || dead_ || !spare_ || a < e->start || a + len > e->end || (access & ~e->access))
            return nullptr;
        if (e->users++ == 0) lru_unlink(e);
        ++hits_;
        *spare = take_spare();
        return e;
    }
    // Drops a user of e (from get). block: the memory of the fi_mr object
    // that used it, destroyed already (or nullptr), kept for the next get;
    // returned when enough are kept, for the caller to free unlocked.
    // Inline, as try_hit: fi_close of a cached registration is this alone.
    void* put(mr_entry* e, void* block) EVD_EXCLUDES(mu_) {
        if (forked()) return block;  // a fork child: the parent's entry, not ours to touch
        {
            evd::lock_guard lk(mu_);
            if (block && nspare_ < kSpareMax) {
                *static_cast<void**>(block) = spare_;
                spare_ = block;
                ++nspare_;
                block = nullptr;
            }
            if (--e->users > 0) return block;
            if (e->indexed) {
                lru_push(e);
                return block;
            }
            retire(e);
        }
        reap();  // e, deregistered unlocked
        return block;
    }
    // The cache's counters (fi_control FI_EVD_MR_CACHE_STATS).
    void stats(struct fi_evd_mr_cache_stats* out);

    // fi_mr objects' memory kept for reuse (put), at most this many
    static constexpr size_t kSpareMax = 64;

private:
    static void on_invalidate(mem_listener* l, uintptr_t start, uintptr_t end);
    // this process is a fork child of the cache's maker
    bool forked() const noexcept {
        return g_atfork ? g_forks.load(std::memory_order_relaxed) != forks_ : pid_ != getpid();
    }
    mr_entry* find(uintptr_t start, uintptr_t end, int access) EVD_REQUIRES(mu_);
    void unindex(size_t i) EVD_REQUIRES(mu_);
    void retire(mr_entry* e) EVD_REQUIRES(mu_);
    bool make_room(size_t bytes) EVD_REQUIRES(mu_);
    void lru_push(mr_entry* e) EVD_REQUIRES(mu_) {
        e->lru_prev = lru_tail_;
        e->lru_next = nullptr;
        (lru_tail_ ? lru_tail_->lru_next : lru_head_) = e;
        lru_tail_ = e;
    }
    void lru_unlink(mr_entry* e) EVD_REQUIRES(mu_) {
        (e->lru_prev ? e->lru_prev->lru_next : lru_head_) = e->lru_next;
        (e->lru_next ? e->lru_next->lru_prev : lru_tail_) = e->lru_prev;
        e->lru_prev = e->lru_next = nullptr;
    }
    void* take_spare() EVD_REQUIRES(mu_) {
        void* b = spare_;
        if (b) {
            spare_ = *static_cast<void**>(b);
            --nspare_;
        }
        return b;
    }
    // Outside the locks: deregisters and frees a list of retired entries;
    // reap() takes the list retire() built.
    static void free_dead(mr_entry* list) EVD_EXCLUDES(mem_lock());
    void reap() EVD_EXCLUDES(mem_lock(), mu_);
    mr_entry* reg_new(uintptr_t start, uintptr_t end, int access, int* err)
        EVD_EXCLUDES(mem_lock(), mu_);

    mutable qlock mu_;  // the cache's own lock (after mem_lock() when both)
    struct listener : mem_listener {
        mr_cache* cache = nullptr;
    } listener_;
    struct ibv_pd* pd_;
    mr_cache_limits lim_;
    int full_access_;  // what entries are registered with (see the constructor)
    pid_t pid_;        // the maker's, for a process where pthread_atfork failed
    unsigned forks_;   // the fork counter when the cache was made
    std::vector<mr_entry*> index_ EVD_GUARDED_BY(mu_);  // sorted by start, disjoint
    size_t bytes_ EVD_GUARDED_BY(mu_) = 0;
    mr_entry* lru_head_ EVD_GUARDED_BY(mu_) = nullptr;  // oldest unused
    mr_entry* lru_tail_ EVD_GUARDED_BY(mu_) = nullptr;
    mr_entry* dead_ EVD_GUARDED_BY(mu_) = nullptr;
    // The entry last found or indexed (indexed while set: unindex clears
    // it), which try_hit asks first: a buffer registered again and again
    // is found without the index's binary search.
    mr_entry* last_ EVD_GUARDED_BY(mu_) = nullptr;
    void* spare_ EVD_GUARDED_BY(mu_) = nullptr;  // a list through each block's first word
    size_t nspare_ EVD_GUARDED_BY(mu_) = 0;
    uint64_t hits_ EVD_GUARDED_BY(mu_) = 0;
    uint64_t misses_ EVD_GUARDED_BY(mu_) = 0;
    uint64_t invalidated_ EVD_GUARDED_BY(mu_) = 0;
    uint64_t evicted_ EVD_GUARDED_BY(mu_) = 0;
    uint64_t uncached_ EVD_GUARDED_BY(mu_) = 0;
    uint64_t registered_ EVD_GUARDED_BY(mu_) = 0;
};

}  // namespace evd
