// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// A timeout as a point on CLOCK_MONOTONIC, for the waits that sleep in
// ppoll, epoll_wait, futex or pthread_cond_timedwait (EQs, wait sets).
#pragma once

#include <climits>
#include <ctime>

namespace evd {

struct deadline {
    bool infinite;         // timeout < 0: never expires
    struct timespec end;   // CLOCK_MONOTONIC, when not infinite

    explicit deadline(int timeout_ms) : infinite(timeout_ms < 0), end{} {
        if (infinite) return;
        clock_gettime(CLOCK_MONOTONIC, &end);
        end.tv_sec += timeout_ms / 1000;
        end.tv_nsec += static_cast<long>(timeout_ms % 1000) * 1000000L;
        if (end.tv_nsec >= 1000000000L) {
            end.tv_sec++;
            end.tv_nsec -= 1000000000L;
        }
    }
    // False when expired; else *out is the time left (untouched if infinite).
    bool left(struct timespec* out) const {
        if (infinite) return true;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ns = (end.tv_sec - now.tv_sec) * 1000000000LL + (end.tv_nsec - now.tv_nsec);
        if (ns <= 0) return false;
        out->tv_sec = ns / 1000000000LL;
        out->tv_nsec = ns % 1000000000LL;
        return true;
    }
};

// A time left as an epoll_wait/poll timeout (ms), rounded up so that a wait
// never ends early.
inline int ceil_ms(const struct timespec& t) {
    long long ms = static_cast<long long>(t.tv_sec) * 1000 + (t.tv_nsec + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

}  // namespace evd
