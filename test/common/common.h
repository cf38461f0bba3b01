// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Helpers shared by tests that reach evd through the real libfabric API.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sys/types.h>

#include <chrono>
#include <thread>

namespace evdtest {

// Polls `done` every millisecond until it holds or `limit` has passed; true
// when it held. Tests wait on conditions with it instead of sleeping, and
// fail (instead of hanging) when the condition never comes.
template <class Pred>
bool wait_until(Pred done, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// The calling thread's kernel id (for thread_sleeping).
pid_t current_tid();

// Thread tid of this process is asleep in the kernel (state S: blocked in
// poll, epoll_wait, select, a futex, ...). Lets a test post only once another
// thread really blocks, where evd has no counter of its own for it.
bool thread_sleeping(pid_t tid);

// Points libfabric at the freshly built plugin (EVD_PROVIDER_DIR) and selects
// evd. Idempotent; called by every fixture before the first fi_* call.
void use_build_tree_provider();

// Opens an evd fabric without any RDMA device (fi_fabric with prov_name "evd").
struct fid_fabric* open_fabric();

}  // namespace evdtest
