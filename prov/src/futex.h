// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The futex system call and the lock built on it (the EQ's queue lock,
// eq.cpp; the CQ's read lock, cq_read.cpp). Header only: both are on a
// per-event or per-completion path.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "lock.h"

namespace evd {

inline long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const struct timespec* t) {
    return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, t, nullptr, 0);
}

// The EQ lock: one inline compare-and-swap to take, one exchange to release
// when uncontended (about a quarter of the instructions of a pthread mutex,
// which matters at ~100 instructions per event); a short spin, then a futex
// (0 free, 1 held, 2 held with sleepers).
class EVD_CAPABILITY("mutex") qlock {
    std::atomic<uint32_t> s_{0};
    void lock_slow() noexcept {
        for (int i = 0; i < 100; i++) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            uint32_t c = 0;
            if (s_.load(std::memory_order_relaxed) == 0 &&
                s_.compare_exchange_weak(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
                return;
        }
        while (s_.exchange(2, std::memory_order_acquire) != 0)
            (void)futex(&s_, FUTEX_WAIT_PRIVATE, 2, nullptr);
    }

public:
    // Under ThreadSanitizer the lock is announced as a mutex, so that its
    // deadlock detector sees it in the lock order (docs/locking.md).
    void lock() noexcept EVD_ACQUIRE() {
#if defined(__SANITIZE_THREAD__)
        __tsan_mutex_pre_lock(this, 0);
#endif
        uint32_t c = 0;
        if (!s_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
            [[unlikely]] lock_slow();
#if defined(__SANITIZE_THREAD__)
        __tsan_mutex_post_lock(this, 0, 0);
#endif
    }
    void unlock() noexcept EVD_RELEASE() {
#if defined(__SANITIZE_THREAD__)
        (void)__tsan_mutex_pre_unlock(this, 0);
#endif
        if (s_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
            (void)futex(&s_, FUTEX_WAKE_PRIVATE, 1, nullptr);
#if defined(__SANITIZE_THREAD__)
        __tsan_mutex_post_unlock(this, 0);
#endif
    }
    // as evd::mutex::assert_held: the caller holds it where the analysis
    // cannot see; no check at run time
    void assert_held() const EVD_ASSERT_CAPABILITY(this) {}
};

}  // namespace evd
