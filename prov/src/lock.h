// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The mutex every evd lock is, the scoped holders that take it, and the
// attributes that let clang's thread-safety analysis check the rules of
// docs/locking.md at compile time (`make thread-safety`: clang++
// -Wthread-safety -Werror over prov/src, a step of the test command).
//
// Fields say which lock guards them (EVD_GUARDED_BY), functions which lock
// their caller holds (EVD_REQUIRES) or must not hold (EVD_EXCLUDES). Under
// g++ the attributes are empty; the types are then mutex and thin
// holders around it, with the same code.
//
// An access the analysis cannot follow (a field published by a release
// store and read lock-free afterwards, a lock held by a caller the compiler
// cannot see) goes through a function marked EVD_NO_LOCK_ANALYSIS whose
// comment says why it is safe; `grep EVD_NO_LOCK_ANALYSIS` lists them all.
#pragma once

#include <mutex>

#if defined(__clang__)
#define EVD_TSA(x) __attribute__((x))
#else
#define EVD_TSA(x)
#endif

#define EVD_CAPABILITY(name) EVD_TSA(capability(name))
#define EVD_SCOPED_CAPABILITY EVD_TSA(scoped_lockable)
#define EVD_GUARDED_BY(m) EVD_TSA(guarded_by(m))
#define EVD_PT_GUARDED_BY(m) EVD_TSA(pt_guarded_by(m))
#define EVD_REQUIRES(...) EVD_TSA(requires_capability(__VA_ARGS__))
#define EVD_EXCLUDES(...) EVD_TSA(locks_excluded(__VA_ARGS__))
#define EVD_ACQUIRE(...) EVD_TSA(acquire_capability(__VA_ARGS__))
#define EVD_RELEASE(...) EVD_TSA(release_capability(__VA_ARGS__))
#define EVD_TRY_ACQUIRE(...) EVD_TSA(try_acquire_capability(__VA_ARGS__))
#define EVD_RETURN_CAPABILITY(m) EVD_TSA(lock_returned(m))
#define EVD_ASSERT_CAPABILITY(m) EVD_TSA(assert_capability(m))
#define EVD_NO_LOCK_ANALYSIS EVD_TSA(no_thread_safety_analysis)

namespace evd {

// mutex, known to the analysis as a lock.
class EVD_CAPABILITY("mutex") mutex {
public:
    mutex() = default;
    mutex(const mutex&) = delete;
    mutex& operator=(const mutex&) = delete;
    void lock() EVD_ACQUIRE() { m_.lock(); }
    void unlock() EVD_RELEASE() { m_.unlock(); }
    bool try_lock() EVD_TRY_ACQUIRE(true) { return m_.try_lock(); }
    // Tells the analysis that the caller holds this lock, where it cannot
    // see it (a handler called through a table by the code that took it).
    // No check at run time: say in a comment who took it.
    void assert_held() const EVD_ASSERT_CAPABILITY(this) {}

private:
    std::mutex m_;
};

// Holds a lock (evd::mutex, qlock) for a scope.
template <class M>
class EVD_SCOPED_CAPABILITY lock_guard {
public:
    explicit lock_guard(M& m) EVD_ACQUIRE(m) : m_(m) { m_.lock(); }
    // m was taken by this thread already (a successful try_lock)
    lock_guard(M& m, std::adopt_lock_t) EVD_REQUIRES(m) : m_(m) {}
    ~lock_guard() EVD_RELEASE() { m_.unlock(); }
    lock_guard(const lock_guard&) = delete;
    lock_guard& operator=(const lock_guard&) = delete;

private:
    M& m_;
};

// A lock held for a scope that lets go of it for a while (around a call
// that must not run under it) and takes it back. (A one-attempt take is
// mutex::try_lock, then lock_guard with std::adopt_lock.)
template <class M>
class EVD_SCOPED_CAPABILITY unique_lock {
public:
    explicit unique_lock(M& m) EVD_ACQUIRE(m) : m_(m) { m_.lock(); }
    ~unique_lock() EVD_RELEASE() {
        if (held_) m_.unlock();
    }
    void unlock() EVD_RELEASE() {
        m_.unlock();
        held_ = false;
    }
    void lock() EVD_ACQUIRE() {
        m_.lock();
        held_ = true;
    }
    unique_lock(const unique_lock&) = delete;
    unique_lock& operator=(const unique_lock&) = delete;

private:
    M& m_;
    bool held_ = true;
};

// Lets go of a lock held by the caller for a scope, and takes it back when
// the scope ends, however it ends (an exception included).
template <class M>
class EVD_SCOPED_CAPABILITY unlock_scope {
public:
    explicit unlock_scope(M& m) EVD_RELEASE(m) : m_(m) { m_.unlock(); }
    // takes it back; annotated as the end of a scope, which the analysis
    // reverses for a scope that began by releasing
    ~unlock_scope() EVD_RELEASE() { m_.lock(); }
    unlock_scope(const unlock_scope&) = delete;
    unlock_scope& operator=(const unlock_scope&) = delete;

private:
    M& m_;
};

}  // namespace evd
