// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Happens-before edges that pass through the kernel, told to
// ThreadSanitizer. An rdma_cm id is set up in one thread (its owner object,
// its context) and its events are read from the channel in another: the
// kernel orders the two (the command is a write(2) to the rdma_cm fd, the
// event a read(2) of it), but librdmacm is not instrumented, so TSan sees
// two threads touching the owner with nothing between them. Whoever hands
// an id to the kernel (a call that can make rdma_cm report an event on it)
// calls hb_release(id) first; the dispatcher calls hb_acquire(id) on the
// event's ids before it reads their owners (cm.cpp). Empty outside TSan
// builds. Locking: docs/locking.md.
#pragma once

namespace evd {

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline void hb_release(const void* p) noexcept {
    if (p) __tsan_release(const_cast<void*>(p));
}
inline void hb_acquire(const void* p) noexcept {
    if (p) __tsan_acquire(const_cast<void*>(p));
}
#else
inline void hb_release(const void*) noexcept {}
inline void hb_acquire(const void*) noexcept {}
#endif

}  // namespace evd
