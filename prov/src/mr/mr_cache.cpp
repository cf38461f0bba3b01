// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The registration cache of a domain (mr_cache.h).
#include "mr/mr_cache.h"

#include <pthread.h>
#include <rdma/fi_ext_evd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "evd.h"

namespace evd {

namespace {

constexpr int kFullAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

uintptr_t page_size() {
    static const uintptr_t ps = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    return ps;
}

void count_fork() { g_forks.fetch_add(1, std::memory_order_relaxed); }

unsigned forks_now() {
    static const bool registered = [] {
        g_atfork = pthread_atfork(nullptr, nullptr, count_fork) == 0;
        return true;
    }();
    (void)registered;
    return g_forks.load(std::memory_order_relaxed);
}

// The memory of fi_mr objects kept for reuse, freed outside the locks.
void free_spares(void* list) {
    while (list) {
        void* next = *static_cast<void**>(list);
        ::operator delete(list);
        list = next;
    }
}

}  // namespace

mr_cache::mr_cache(struct ibv_pd* pd, mr_cache_limits lim, int extra_access)
    : pd_(pd),
      lim_(lim),
      full_access_(kFullAccess | extra_access),
      pid_(getpid()),
      forks_(forks_now()) {
    listener_.invalidate = on_invalidate;
    listener_.mu = &mu_;
    listener_.cache = this;
    evd::lock_guard lk(mem_lock());
    mem_monitor_listen(&listener_);
}


mr_cache::~mr_cache() {
    if (forked()) return;  // a fork child: the parent's registrations, not its own
    {
        evd::lock_guard lk(mem_lock());
        mem_monitor_unlisten(&listener_);
    }
    void* spares = nullptr;
    {
        evd::lock_guard lk(mu_);
        while (!index_.empty()) unindex(index_.size() - 1);
        spares = std::exchange(spare_, nullptr);
        nspare_ = 0;
    }
    reap();
    free_spares(spares);
}

void mr_cache::on_invalidate(mem_listener* l, uintptr_t start, uintptr_t end) {
    mr_cache* c = static_cast<listener*>(l)->cache;
    c->mu_.assert_held();  // the monitor took every listener's lock (lock_listeners)
    // entries are sorted and disjoint, so their ends are sorted too
    auto it = std::upper_bound(c->index_.begin(), c->index_.end(), start,
                               [](uintptr_t s, const mr_entry* e) { return s < e->end; });
    size_t i = static_cast<size_t>(it - c->index_.begin());
    while (i < c->index_.size() && c->index_[i]->start < end) {
        c->unindex(i);
        ++c->invalidated_;
    }
}

mr_entry* mr_cache::find(uintptr_t start, uintptr_t end, int access) {
    auto it = std::upper_bound(index_.begin(), index_.end(), start,
                               [](uintptr_t s, const mr_entry* e) { return s < e->start; });
    if (it == index_.begin()) return nullptr;
    mr_entry* e = *(it - 1);
    if (e->end < end || (access & ~e->access)) return nullptr;
    return e;
}

void mr_cache::unindex(size_t i) {
    mr_entry* e = index_[i];
    index_.erase(index_.begin() + static_cast<std::ptrdiff_t>(i));
    e->indexed = false;
    if (last_ == e) last_ = nullptr;
    bytes_ -= e->end - e->start;
    if (e->users == 0) {
        lru_unlink(e);
        retire(e);
    }
}

void mr_cache::retire(mr_entry* e) {
    e->dead_next = dead_;
    dead_ = e;
}

// Evicts unused entries, oldest first, until one more entry of `bytes` fits;
// false when entries in use leave no room.
bool mr_cache::make_room(size_t bytes) {
    auto fits = [&]() EVD_REQUIRES(mu_) {
        return index_.size() < lim_.max_count && (!lim_.max_bytes || bytes_ + bytes <= lim_.max_bytes);
    };
    while (!fits() && lru_head_) {
        mr_entry* e = lru_head_;
        auto it = std::lower_bound(index_.begin(), index_.end(), e->start,
                                   [](const mr_entry* x, uintptr_t s) { return x->start < s; });
        unindex(static_cast<size_t>(it - index_.begin()));  // unused: retired
        ++evicted_;
    }
    return fits();
}

// A list of retired entries the caller took out of the cache (dead_ under
// mu_): nobody else reaches them any more.
void mr_cache::free_dead(mr_entry* list) {
    while (list) {
        mr_entry* next = list->dead_next;
        if (int rc = release_with(list->ibmr, ibv_dereg_mr))
            EVD_WARN(FI_LOG_MR, "ibv_dereg_mr of a cached registration: %s (leaked)\n", strerror(rc));
        delete list;
        list = next;
    }
}

void mr_cache::reap() {
    mr_entry* dead;
    {
        evd::lock_guard lk(mu_);
        dead = std::exchange(dead_, nullptr);
    }
    free_dead(dead);
}

mr_entry* mr_cache::reg_new(uintptr_t start, uintptr_t end, int access, int* err) {
    auto* e = new (std::nothrow) mr_entry;
    if (!e) {
        *err = ENOMEM;
        return nullptr;
    }
    e->start = start;
    e->end = end;
    const int full = full_access_ | access;
    e->access = full;
    e->ibmr.reset(ibv_reg_mr(pd_, reinterpret_cast<void*>(start), end - start, full));
    if (!e->ibmr && (errno == EFAULT || errno == EACCES || errno == EPERM) && access != full) {
        e->access = access;  // read-only memory: what was asked for
        e->ibmr.reset(ibv_reg_mr(pd_, reinterpret_cast<void*>(start), end - start, access));
    }
    if (!e->ibmr) {
        *err = errno ? errno : EINVAL;
        EVD_WARN(FI_LOG_MR, "ibv_reg_mr(%#lx, %zu): %s\n", static_cast<unsigned long>(start),
                 static_cast<size_t>(end - start), strerror(*err));
        delete e;
        return nullptr;
    }
    return e;  // with its first user (mr_entry::users)
}

mr_entry* mr_cache::get(void* addr, size_t len, int access, int* err, void** spare) {
    *err = 0;
    *spare = nullptr;
    if (!len || forked()) return nullptr;  // a fork child: no monitor here
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    const uintptr_t ps = page_size();
    const uintptr_t own_start = a & ~(ps - 1);
    const uintptr_t own_end = (a + len + ps - 1) & ~(ps - 1);
    uintptr_t start = own_start, end = own_end;
    uint64_t events = 0;
    mr_entry* hit = nullptr;
    mr_entry* dead = nullptr;
    bool need_room = false;  // the index has not taken its room yet
    // The hit: this cache's lock alone.
    {
        evd::lock_guard lk(mu_);
        dead = std::exchange(dead_, nullptr);  // what invalidations retired meanwhile
        hit = find(a, a + len, access);
        if (hit) {
            last_ = hit;
            if (hit->users++ == 0) lru_unlink(hit);
            ++hits_;
            *spare = take_spare();
        }
    }
    if (dead) free_dead(dead);
    if (hit) return hit;
    // The miss: the monitor's event count and the range, read together.
    {
        evd::lock_guard ml(mem_lock());
        evd::lock_guard lk(mu_);
        ++misses_;
        events = mem_monitor_events();
        need_room = index_.capacity() < lim_.max_count;
        // One registration for the new range and the entries it overlaps
        // (their pages are mapped and pinned already): the next request
        // anywhere in the union hits.
        auto it = std::upper_bound(index_.begin(), index_.end(), start,
                                   [](uintptr_t s, const mr_entry* x) { return s < x->end; });
        for (; it != index_.end() && (*it)->start < end; ++it) {
            start = std::min(start, (*it)->start);
            end = std::max(end, (*it)->end);
        }
    }
    // Watch first, then pin: an unmap after the watch is seen (the event
    // count moves), one before it left the new pages to be pinned.
    if (!mem_monitor_watch(start, end)) {
        evd::lock_guard lk(mu_);
        ++uncached_;
        return nullptr;
    }
    mr_entry* e = reg_new(start, end, access, err);
    if (!e && (start != own_start || end != own_end)) {
        // part of the union went meanwhile (its event made the count move):
        // the request's own pages, and no caching
        start = own_start;
        end = own_end;
        e = reg_new(start, end, access, err);
    }
    if (!e) return nullptr;
    // The index takes its full size at the first entry (a domain that caches
    // nothing holds nothing), allocated here and freed below without the
    // lock: an allocation under it could unmap memory and wait for the
    // monitor, which waits for the lock. Without it the entry stays private.
    std::vector<mr_entry*> room;
    if (need_room) {
        try {
            room.reserve(lim_.max_count);
        } catch (const std::bad_alloc&) {  // no room: the entry stays private
        }
    }
    evd::lock_guard ml(mem_lock());
    evd::lock_guard lk(mu_);
    *spare = take_spare();
    const bool roomy = index_.capacity() >= lim_.max_count || room.capacity() >= lim_.max_count;
    if (index_.capacity() < lim_.max_count && roomy) {
        room.assign(index_.begin(), index_.end());  // within its capacity
        index_.swap(room);  // the old (smaller) array goes with room, unlocked
    }
    ++registered_;
    if (!roomy) {
        ++uncached_;
        return e;  // private
    }
    if (mem_monitor_events() != events) {
        ++uncached_;  // an event came meanwhile, maybe for these pages
        return e;     // private: deregistered at its last put
    }
    if (mr_entry* other = find(start, end, e->access)) {  // another thread won
        if (other->users++ == 0) lru_unlink(other);
        --e->users;
        retire(e);  // freed by the next call
        return other;
    }
    // the unused entries the new one overlaps go; entries in use leave the index
    auto it = std::upper_bound(index_.begin(), index_.end(), start,
                               [](uintptr_t s, const mr_entry* x) { return s < x->end; });
    size_t i = static_cast<size_t>(it - index_.begin());
    while (i < index_.size() && index_[i]->start < end) unindex(i);
    if (!make_room(end - start)) {
        ++uncached_;
        return e;  // private
    }
    it = std::lower_bound(index_.begin(), index_.end(), start,
                          [](const mr_entry* x, uintptr_t s) { return x->start < s; });
    index_.insert(it, e);  // within the reserved capacity: no allocation
    e->indexed = true;
    last_ = e;
    bytes_ += end - start;
    return e;
}

void mr_cache::stats(struct fi_evd_mr_cache_stats* out) {
    *out = {};
    if (forked()) return;  // a fork child caches nothing
    evd::lock_guard lk(mu_);
    out->hits = hits_;
    out->misses = misses_;
    out->registrations = registered_;
    out->invalidations = invalidated_;
    out->evictions = evicted_;
    out->uncached = uncached_;
    out->entries = index_.size();
    out->bytes = bytes_;
}

}  // namespace evd
