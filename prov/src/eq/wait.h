// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Wait sets (fi_wait_open) and fi_trywait (wait.cpp); poll sets (poll_set.h)
// ask their members the same way.
//
// What every object that can block (EQ, CQ, counter) provides:
//  * fi_trywait(fabric, fids, n) and fi_poll() ask every fid that is not an
//    evd EQ or wait set through fi_control(fid, kCtrlTrywait, nullptr), which
//    must answer 0 (nothing pending, wait object armed: safe to block) or
//    -FI_EAGAIN (something to read). -FI_ENOSYS makes fi_trywait fail with
//    -FI_EINVAL.
//  * An object opened with FI_WAIT_SET joins the set with wait_set_add() and
//    leaves it with wait_set_del() before it is freed. Its wait_member::fd
//    (readable when it may have events) joins the set's epoll fd for FD sets;
//    for MUTEX_COND and YIELD sets the object calls wait_set_signal() when an
//    event arrives while its wait object is armed.
#pragma once

#include "evd.h"

namespace evd {

int wait_open(struct fid_fabric* fab, struct fi_wait_attr* attr, struct fid_wait** waitset);
int trywait(struct fid_fabric* fab, struct fid** fids, int count);

// fi_control command answered by CQs / counters for fi_trywait and fi_poll.
inline constexpr int kCtrlTrywait = 0x65765401;

struct wait_set;

struct wait_member {
    struct fid* fid = nullptr;                  // the member itself
    int (*trywait)(wait_member*) = nullptr;     // 0 = armed, nothing pending; -FI_EAGAIN
    int fd = -1;                                // readable when it may have events
    // --- private to wait.cpp
    wait_member* next = nullptr;
};

wait_set* wait_set_from_fid(struct fid_wait* f);  // nullptr when not an evd wait set
// FI_WAIT_FD (also for sets opened with FI_WAIT_UNSPEC), FI_WAIT_MUTEX_COND
// or FI_WAIT_YIELD.
enum fi_wait_obj wait_set_obj(const wait_set* ws);
// A CQ or counter opened with FI_WAIT_SET: *out = the evd FD wait set f is;
// -FI_EINVAL (no set, or not evd's) or -FI_ENOSYS (not an FD set), each
// with a warning naming `who` (e.g. "fi_cq_open: ... a CQ").
int member_wait_set(struct fid_wait* f, enum fi_log_subsys sub, const char* who,
                    const char* what, wait_set** out);
int wait_set_add(wait_set* ws, wait_member* m);
void wait_set_del(wait_set* ws, wait_member* m);
// Wakes fi_wait on a MUTEX_COND / YIELD set (FD sets are woken by member fds).
void wait_set_signal(wait_set* ws) noexcept;

// FI_GETWAIT (the object's wait fd, -1 when it has none) and FI_GETWAITOBJ
// for a CQ or counter; `what` names it in the warning. Other commands are
// the caller's.
int control_wait_fd(int command, void* arg, int fd, enum fi_wait_obj obj,
                    enum fi_log_subsys sub, const char* what);

// 0 / -FI_EAGAIN for any fid (EQ, wait set, or kCtrlTrywait), -FI_EINVAL else.
int fid_trywait(struct fid* f);

}  // namespace evd
