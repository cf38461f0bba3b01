// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The connected QPs evd holds, and a way to fail them all at once: the
// resumable pass of the fault runner (test/fault/run.sh) needs an outage that
// costs no link flap, so its scenario (scenario.cpp) calls
// evd_fault_break_qps, which moves every RC QP evd made that is in RTS to the
// error state, as a QP whose path failed is moved by its device. Posted work
// then completes flushed, which evd holds as an outage and resumes.
//
// interpose.cpp tells this file of each QP evd makes (ibv_create_qp from
// libevd-fi.so) and destroys. This file includes the verbs header, which
// the interposer, declaring the same functions with opaque types, cannot.
#include <infiniband/verbs.h>

#include <mutex>

#include "break_qp.h"

namespace {
constexpr int kMax = 256;
std::mutex g_mu;
struct ibv_qp* g_qps[kMax];  // the QPs evd made and has not destroyed
int g_n = 0;
}  // namespace

namespace evd_fault {

void qp_made(void* qp) {
    std::lock_guard<std::mutex> g(g_mu);
    if (g_n < kMax) g_qps[g_n++] = static_cast<struct ibv_qp*>(qp);
}

void qp_gone(void* qp) {
    std::lock_guard<std::mutex> g(g_mu);
    for (int i = 0; i < g_n; ++i)
        if (g_qps[i] == qp) {
            g_qps[i] = g_qps[--g_n];
            return;
        }
}

}  // namespace evd_fault

// Returns how many QPs it moved to the error state. Its own verbs calls go
// through the interposer's wrappers uncounted (they are not made from evd).
extern "C" __attribute__((visibility("default"))) int evd_fault_break_qps(void) {
    std::lock_guard<std::mutex> g(g_mu);
    int broken = 0;
    for (int i = 0; i < g_n; ++i) {
        struct ibv_qp* qp = g_qps[i];
        if (qp->qp_type != IBV_QPT_RC) continue;
        struct ibv_qp_attr a {};
        struct ibv_qp_init_attr ia {};
        if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) || a.qp_state != IBV_QPS_RTS) continue;
        struct ibv_qp_attr e {};
        e.qp_state = IBV_QPS_ERR;
        if (!ibv_modify_qp(qp, &e, IBV_QP_STATE)) ++broken;
    }
    return broken;
}
