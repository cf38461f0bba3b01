// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The inline-size probe (inline_probe.h).
#include "device/inline_probe.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "evd.h"
#include "owners.h"

namespace evd {

uint32_t probe_max_inline(struct ibv_context* verbs, enum ibv_qp_type type) {
    ibv_pd_ptr pd(ibv_alloc_pd(verbs));
    if (!pd) return 0;
    ibv_cq_ptr cq(ibv_create_cq(verbs, 2, nullptr, nullptr, 0));
    if (!cq) return 0;
    // A size is refused with EINVAL; any other failure (ENOMEM, EMFILE) says
    // nothing about the size, and ends the search at what was accepted so far.
    int other_err = 0;
    auto accepts = [&](uint32_t v, uint32_t* got) {
        struct ibv_qp_init_attr ia {};
        ia.send_cq = cq.get();
        ia.recv_cq = cq.get();
        ia.qp_type = type;
        ia.cap.max_send_wr = 1;
        ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        ia.cap.max_inline_data = v;
        ibv_qp_ptr qp(ibv_create_qp(pd.get(), &ia));
        if (!qp) {
            if (errno != EINVAL) other_err = errno;
            return false;
        }
        *got = std::max(v, ia.cap.max_inline_data);
        return true;
    };
    uint32_t got = 0, lo = 0, hi = 1u << 16;  // lo: accepted (or 0), hi: first refused
    if (accepts(hi, &got)) return got;
    uint32_t best = 0;
    if (!other_err && accepts(0, &got)) {
        best = got;
        while (hi - lo > 1 && !other_err) {
            uint32_t mid = lo + (hi - lo) / 2;
            uint32_t g = 0;
            if (accepts(mid, &g)) {
                lo = mid;
                best = std::max(best, g);
            } else {
                hi = mid;
            }
        }
    }
    if (other_err)
        EVD_WARN(FI_LOG_DOMAIN, "inline-size probe cut short: ibv_create_qp: %s: max_inline_data %u "
                 "(a lower bound)\n", strerror(other_err), best);
    return best;
}

}  // namespace evd
