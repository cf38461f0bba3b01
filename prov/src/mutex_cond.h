// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The mutex and condition of an object waited on with FI_WAIT_MUTEX_COND (an
// EQ, a wait set), which FI_GETWAIT hands to the application.
//
// fi_poll(3)'s pattern is: lock the mutex, call fi_trywait, wait on the
// condition. fi_trywait runs progress, and progress may post an event and
// signal that condition on the very thread that holds the mutex, through any
// object of the list (a CQ's progress can post to an EQ). The mutex is
// therefore error-checking: the signalling thread's lock answers EDEADLK when
// it holds the mutex already, and the signal then goes out without taking it
// (nobody can be between checking and waiting: the holder is this thread).
// Any other holder is waited for as usual, so no wakeup is lost.
#pragma once

#include <pthread.h>
#include <time.h>

namespace evd {

// Initialises mu (error-checking) and cond (timed waits on `clock`).
inline void mutex_cond_init(pthread_mutex_t* mu, pthread_cond_t* cond, clockid_t clock) noexcept {
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, clock);
    pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
}

// Holds mu for a scope, unless this thread holds it already (see above).
class lock_unless_held {
public:
    explicit lock_unless_held(pthread_mutex_t* mu) noexcept
        : mu_(mu), locked_(pthread_mutex_lock(mu) == 0) {}
    ~lock_unless_held() {
        if (locked_) pthread_mutex_unlock(mu_);
    }
    lock_unless_held(const lock_unless_held&) = delete;
    lock_unless_held& operator=(const lock_unless_held&) = delete;

private:
    pthread_mutex_t* mu_;
    bool locked_;
};

}  // namespace evd
