// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The texts of fi_eq_strerror (eq.h, eq_error_text): one sentence per class
// of prov_errno an evd EQ record can carry (fi_ext_evd.h, FI_EVD_PERR_*).
#include <climits>
#include <cstdio>
#include <cstring>

#include "cq/cq.h"
#include "device/async.h"
#include "eq/eq.h"
#include "resume/resume_err.h"

namespace evd {

const char* eq_error_text(int prov_errno, const void* err_data, char* buf, size_t len) {
    if (const char* s = async_strerror(prov_errno, err_data, buf, len)) return s;
    static thread_local char tls[256];
    char* out = (buf && len) ? buf : tls;
    size_t outlen = (buf && len) ? len : sizeof tls;
    if (const char* s = resume::resume_err_text(prov_errno, err_data, out, outlen)) return s;
    const unsigned cls = FI_EVD_PERR_CLASS(prov_errno);
    const int code = FI_EVD_PERR_CODE(prov_errno);
    if (prov_errno > 0 && cls == FI_EVD_PERR_EQ && code == FI_EVD_EQ_PERR_OVERRUN) {
        snprintf(out, outlen,
                 "evd: the event queue overran; provider events were lost (err.data holds how "
                 "many) and the EQ accepts no further events: close it");
    } else if (prov_errno > 0 && cls == FI_EVD_PERR_WC) {
        const wc_row* r = wc_lookup(code);
        snprintf(out, outlen, "evd: the endpoint ended on a failed completion: %s (%s): %s",
                 r ? r->name : "unknown ibv_wc_status",
                 ibv_wc_status_str(static_cast<enum ibv_wc_status>(code)),
                 r ? r->meaning : "no description");
    } else if (prov_errno > 0 && cls == FI_EVD_PERR_USER) {
        snprintf(out, outlen, "evd: application-defined error code %d (written with write_err)",
                 code);
    } else if (prov_errno == 0) {
        snprintf(out, outlen, "evd: no provider-specific detail (see err for the reason)");
    } else if (prov_errno < 0) {
        // -INT_MIN does not exist: no errno is that large anyway
        snprintf(out, outlen, "evd: rdma-core reported status %d: %s", prov_errno,
                 prov_errno == INT_MIN ? "unknown" : strerror(-prov_errno));
    } else {
        snprintf(out, outlen,
                 "evd: provider status %d (an IB CM reject reason for rejected connections, "
                 "else errno: %s)",
                 prov_errno, strerror(prov_errno));
    }
    return out;
}

}  // namespace evd
