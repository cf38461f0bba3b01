// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The memory monitor: tells the registration caches (mr_cache.h) when the
// application unmaps, moves or discards memory they hold registrations of,
// before the call that did it returns to the application.
//
// How: one userfaultfd for the process, opened with UFFD_USER_MODE_ONLY (no
// privilege needed; Linux 5.11 and later) and the UNMAP, REMOVE and REMAP
// events. Each cached range is registered with it in write-protect mode:
// the events come for every registered range whatever its mode, and evd
// never write-protects a page, so no access to the memory ever faults. The
// kernel keeps a thread that munmap()s, mremap()s or madvise()s
// (MADV_DONTNEED, MADV_FREE, MADV_REMOVE) a registered range waiting until
// the event has been read from the fd. The monitor's thread reads it with
// mem_lock() held and hands it to every cache before it lets go: a lookup
// made after munmap returned therefore waits for, and then sees, the
// invalidation.
//
// Rules that keep that thread and the application apart (both would hang):
//  - nothing done under mem_lock() allocates, frees, unmaps or touches
//    application memory (an unmap of a registered range waits for the
//    thread, which waits for mem_lock());
//  - the thread itself never frees or deregisters anything: invalidated
//    registrations are released by the next application call on their cache.
//
// Where userfaultfd cannot watch a range (file-backed memory, another
// userfaultfd owning it, a kernel without the call, a seccomp filter)
// mem_monitor_watch says so and the cache registers that buffer uncached.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "futex.h"
#include "lock.h"

namespace evd {

// The monitor's lock: its listener list and event count; each cache's misses
// take it before their own lock.
mutex& mem_lock();

// A cache's subscription: invalidate(self, start, end) runs on the monitor's
// thread, under mem_lock() and *mu, for every event ([start, end) page
// aligned). The monitor takes every listener's mu before it reads an event
// (the read releases the unmapping thread) and lets go after applying it.
struct mem_listener {
    void (*invalidate)(mem_listener* self, uintptr_t start, uintptr_t end) = nullptr;
    qlock* mu = nullptr;  // the listener's own lock
    mem_listener* next EVD_GUARDED_BY(mem_lock()) = nullptr;  // the monitor's list
};

// The first get starts the monitor (its fd and thread), which then runs
// until mem_monitor_shutdown (provider cleanup), so that opening and closing
// domains does not start and stop a thread each time. get returns 0, or a
// negative FI_E* when userfaultfd or the thread is not available (then
// nothing is watched and the caller caches nothing).
int mem_monitor_get();
void mem_monitor_put();
void mem_monitor_shutdown();

// Under mem_lock(): subscribes / unsubscribes l.
void mem_monitor_listen(mem_listener* l) EVD_REQUIRES(mem_lock());
void mem_monitor_unlisten(mem_listener* l) EVD_REQUIRES(mem_lock());

// Watches [start, end) (page aligned) for unmaps, moves and discards; false
// when userfaultfd cannot watch that memory. Not under mem_lock(). A range
// stays watched until it is unmapped or the monitor stops.
bool mem_monitor_watch(uintptr_t start, uintptr_t end) EVD_EXCLUDES(mem_lock());

// Under mem_lock(): how many events the monitor has applied. A cache that
// registered memory with the lock released compares it with the value it
// read before watching the range: a change means an event may concern the
// new registration, which is then not cached.
uint64_t mem_monitor_events() EVD_REQUIRES(mem_lock());

}  // namespace evd
