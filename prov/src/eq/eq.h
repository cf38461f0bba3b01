// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The event queue (fi_eq(3)): the queue in eq.cpp, its event sources in
// eq_sources.cpp, blocking in eq_wait.cpp.
//
// How the rest of the provider uses it:
//
//  * Internal producers (rdma_cm translation, async events, endpoints) post
//    with eq_post()/eq_post_err(). They never fail silently: when the queue is
//    full the event is counted and an FI_EOVERRUN error is delivered after
//    every valid event.
//  * Event sources (an rdma_cm event channel, a device's async fd) are
//    registered with eq_add_source(): their fd joins the EQ's single wait fd,
//    and their progress callback runs from fi_eq_read/sread/readerr/trywait
//    (and whenever the wait fd is found readable). eq_remove_source()
//    returns only when the callback is not running and never will again.
//  * Objects bound to the EQ call eq_bind_ref()/eq_bind_unref() so that
//    fi_close(eq) answers -FI_EBUSY while they are bound.
#pragma once

#include "evd.h"

namespace evd {

struct eq;
struct fabric;

struct eq_source {
    int fd = -1;  // non-blocking; readable => progress() has work
    // Called without the EQ lock held, serialized per source. May call
    // eq_post*/eq_post_err on any EQ. `arg` is free for the owner.
    void (*progress)(eq_source* src) = nullptr;
    void* arg = nullptr;
    // --- private to eq.cpp
    eq_source* next = nullptr;
    std::atomic<int> busy{0};
    std::atomic<bool> polled{false};  // eq_source_poll
};

// -FI_EALREADY when src is already registered. The fd must be drained by
// progress (level-triggered: a readable fd makes every waiter spin).
int eq_add_source(eq* q, eq_source* src);
// Waits for a running callback: never call it from src's own callback or
// while holding a lock that callback takes.
void eq_remove_source(eq* q, eq_source* src);

// on: src's progress runs at every read of and wakeup on q, readable or not
// (its fd cannot signal: a timer that could not be armed), and a sleeper
// wakes at least every kEqPolledMs to run it; off: back to its fd alone.
// Atomics only: callable under any lock. A thread already asleep without a
// timeout serves it from its next wakeup.
inline constexpr int kEqPolledMs = 10;
void eq_source_poll(eq* q, eq_source* src, bool on);

// entry: an fi_eq_entry (FI_NOTIFY, FI_MR_COMPLETE, ...) or fi_eq_cm_entry
// followed by its data, len bytes in all. Returns 0 or -FI_EOVERRUN.
int eq_post(eq* q, uint32_t event, const void* entry, size_t len);
// err.err_data/err_data_size are ignored: err_data/len are copied instead.
int eq_post_err(eq* q, const struct fi_eq_err_entry& err, const void* err_data,
                size_t err_data_len);

// Drops every queued event (normal or error) whose fid is f: called when f is
// closed, after nothing can post for it any more, so that no reader is handed
// a fid that points at freed memory (ofi_rxm frees the connection behind an
// endpoint right after closing it). Returns how many were dropped.
size_t eq_forget_fid(eq* q, const struct fid* f);

void eq_bind_ref(eq* q);
void eq_bind_unref(eq* q);
eq* eq_from_fid(struct fid_eq* f);   // nullptr when f is not an evd EQ
eq* eq_from_fid(struct fid* f);
struct fid_eq* eq_fid(eq* q);

// fabric op (fi_eq_open)
int eq_open(struct fid_fabric* fab, struct fi_eq_attr* attr, struct fid_eq** out,
            void* context);

// fi_eq_strerror's text for prov_errno and err_data (eq_strerror.cpp): an
// async record's sentence names its device and port; the other classes
// (overrun, failed completion, application code, rdma-core status, CM
// reject reason) get a fixed sentence. Written into buf (len bytes) when
// given, else into a thread-local buffer; returns the text.
const char* eq_error_text(int prov_errno, const void* err_data, char* buf, size_t len);

// ---- for wait.cpp (fi_trywait, wait and poll sets)
// 0 when nothing is queued and the EQ's wait object is armed (safe to block),
// -FI_EAGAIN when events are queued (runs source progress first).
int eq_trywait(eq* q);
// True when fi_eq_read/readerr would return something (runs source progress).
bool eq_has_events(eq* q);
// Largest inline payload of a slot (fi_eq_cm_entry + 256 bytes of CM data).
inline constexpr size_t kEqInline = sizeof(struct fi_eq_cm_entry) + 256;

}  // namespace evd
