// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The EQ object's state, shared by the files that implement it and by
// nothing else: the queue and its entry points (eq.cpp), the event-source
// multiplexer (eq_sources.cpp) and the blocking engine (eq_wait.cpp).
#pragma once

#include <pthread.h>
#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "eq/eq.h"
#include "eq/wait.h"
#include "futex.h"
#include "owners.h"

namespace evd {

inline constexpr uint32_t kNoBig = UINT32_MAX;

// One queued event: its header, and its payload inline or in a large chunk.
struct eq_slot {
    uint32_t event;
    uint32_t len;   // payload bytes (err_data bytes for errors)
    uint32_t big;   // chunk index or kNoBig
    bool is_err;
    const void* src;  // ordering source: the entry's fid
    struct fi_eq_err_entry err;
    alignas(16) unsigned char inl[kEqInline];
};

struct eq : object_head<struct fid_eq, kind::eq> {
    fabric* fab = nullptr;
    uint32_t api = 0;
    refcount refs;  // objects bound to this EQ
    uint64_t flags = 0;
    enum fi_wait_obj wobj = FI_WAIT_NONE;
    wait_set* ws = nullptr;
    wait_member wm;

    size_t ucap = 0, cap = 0, max_write = 0, nbig = 0;

    qlock mu;
    // ---- guarded by mu
    std::unique_ptr<eq_slot[]> slots EVD_GUARDED_BY(mu);
    std::unique_ptr<uint32_t[]> order EVD_GUARDED_BY(mu);
    std::unique_ptr<uint32_t[]> freel EVD_GUARDED_BY(mu);
    std::unique_ptr<uint32_t[]> bigfree EVD_GUARDED_BY(mu);
    std::unique_ptr<unsigned char[]> bigmem, errbuf;
    size_t head EVD_GUARDED_BY(mu) = 0;
    size_t count EVD_GUARDED_BY(mu) = 0;
    size_t nfree EVD_GUARDED_BY(mu) = 0;
    size_t nbigfree EVD_GUARDED_BY(mu) = 0;
    size_t nerr EVD_GUARDED_BY(mu) = 0;
    bool overrun EVD_GUARDED_BY(mu) = false;
    uint64_t lost EVD_GUARDED_BY(mu) = 0;
    bool armed EVD_GUARDED_BY(mu) = true;
    // Threads in sread/wait_n; changed under mu, waited on by fi_close
    // (std::atomic wait, woken by the last one to leave a closing EQ).
    std::atomic<int> waiters{0};
    uint64_t wake_gen EVD_GUARDED_BY(mu) = 0;
    bool closing EVD_GUARDED_BY(mu) = false;
    eq_source* sources EVD_GUARDED_BY(mu) = nullptr;
    uint64_t change_index EVD_GUARDED_BY(mu) = 0;
    // ----
    bool ext_fd = false;         // the eventfd is watched from outside (FI_GETWAIT, wait set)
    bool efd_signalled EVD_GUARDED_BY(mu) = false;  // we wrote the eventfd and nobody drained it yet
    int fd_sleepers EVD_GUARDED_BY(mu) = 0;  // sread/wait_n blocked in ppoll (EQs with sources)
    int futex_sleepers EVD_GUARDED_BY(mu) = 0;  // sread/wait_n blocked on futex_seq
    // ----
    std::atomic<uint32_t> futex_seq{0};  // bumped under mu when futex sleepers must wake
    std::atomic<int> nsources{0};
    std::atomic<int> npolled{0};  // sources with eq_source_poll on
    bool signals = false;  // has an eventfd (every wait object but NONE and YIELD)
    fd_owner efd, epfd;  // the eventfd posts signal; the epoll fd that holds it and every source
    bool has_mc = false;
    pthread_mutex_t mc_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t mc_cond = PTHREAD_COND_INITIALIZER;

    size_t wrap(size_t i) const noexcept { return i >= cap ? i - cap : i; }
    eq_slot& at(size_t pos) noexcept EVD_REQUIRES(mu) { return slots[order[wrap(head + pos)]]; }
    unsigned char* payload(eq_slot& s) noexcept {
        return s.big == kNoBig ? s.inl : bigmem.get() + size_t{s.big} * max_write;
    }
    ~eq() {
        if (has_mc) {
            pthread_cond_destroy(&mc_cond);
            pthread_mutex_destroy(&mc_mu);
        }
    }
};

// Appends to evs[0..n) a readiness for each source polled (eq_source_poll)
// that epoll did not report, at most kEqMaxPolled; the new count. Takes mu.
inline constexpr int kEqMaxPolled = 4;
int eq_add_polled(eq* q, struct epoll_event* evs, int n) EVD_EXCLUDES(q->mu);

// ---- the queue (eq_queue.cpp); mu held
// Queues one event (err: an error entry) with len bytes of payload, within
// `limit` entries (the application's capacity, or the reserve beyond it for
// evd's own posts). 0, or -FI_EOVERRUN when full.
int eq_push_locked(eq* q, size_t limit, uint32_t event, const struct fi_eq_err_entry* err,
                   const void* data, size_t len) EVD_REQUIRES(q->mu);
// fi_eq_readerr on the queue: the oldest ready error, the sticky overrun, or
// -FI_EAGAIN.
ssize_t eq_readerr_locked(eq* q, struct fi_eq_err_entry* buf, uint64_t flags)
    EVD_REQUIRES(q->mu);
// Position of the oldest error with no earlier normal event of its source, or -1.
long eq_ready_err_locked(eq* q) EVD_REQUIRES(q->mu);
// fi_eq_read on the queue: an event, -FI_EAVAIL, -FI_ETOOSMALL or -FI_EAGAIN.
ssize_t eq_read_locked(eq* q, uint32_t* event, void* buf, size_t len, uint64_t flags)
    EVD_REQUIRES(q->mu);

// ---- the multiplexer (eq_sources.cpp); never with mu held
// Runs the progress of every source whose fd is readable now.
void eq_run_sources(eq* q) EVD_EXCLUDES(q->mu);
// Runs the progress of the sources epoll reported readable (evs[0..n)).
void eq_run_ready(eq* q, const struct epoll_event* evs, int n) EVD_EXCLUDES(q->mu);

// ---- the blocking engine (eq_wait.cpp)
// What a producer (or a wake) must signal once it has dropped mu.
struct wake_plan {
    bool fd = false, futex = false, mc = false, ws = false;
    explicit operator bool() const { return fd || futex || mc || ws; }
};
// mu held: the caller saw nothing to wait for; the next event signals again.
void eq_arm_locked(eq* q) EVD_REQUIRES(q->mu);
// mu held, after a push: which wait objects need a signal.
wake_plan eq_disarm_locked(eq* q) EVD_REQUIRES(q->mu);
// mu held: wake everybody (close, the wake op, a new source).
wake_plan eq_kick_locked(eq* q) EVD_REQUIRES(q->mu);
// mu not held: deliver what a plan says.
void eq_signal(eq* q, wake_plan w) noexcept EVD_EXCLUDES(q->mu);
// fi_eq_sread (threshold 1, woken: -FI_EAGAIN) and the wait_n extension
// (woken: -FI_EINTR when ext). *nmore gets the events left queued.
ssize_t eq_wait_for(eq* q, size_t threshold, int timeout, uint32_t* event, void* buf, size_t len,
                    uint64_t flags, size_t* nmore, bool ext);

}  // namespace evd
