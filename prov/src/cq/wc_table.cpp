// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// How a work completion reaches the application: its status as a libfabric
// error (one row per ibv_wc_status, cq.h), its opcode as completion flags,
// and the text fi_cq_strerror gives for it.
#include <cstdio>

#include "cq/cq.h"

namespace evd {

// clang-format off
const wc_row wc_table[] = {
    {IBV_WC_SUCCESS,            "IBV_WC_SUCCESS",            0,               false, "the operation completed"},
    {IBV_WC_LOC_LEN_ERR,        "IBV_WC_LOC_LEN_ERR",        FI_ETRUNC,       true,  "the message did not fit the posted receive buffer (or the send exceeded the port's message size)"},
    {IBV_WC_LOC_QP_OP_ERR,      "IBV_WC_LOC_QP_OP_ERR",      FI_EIO,          true,  "the local queue pair rejected the work request (internal consistency error)"},
    {IBV_WC_LOC_EEC_OP_ERR,     "IBV_WC_LOC_EEC_OP_ERR",     FI_EIO,          true,  "local end-to-end context error (not used by RC queue pairs)"},
    {IBV_WC_LOC_PROT_ERR,       "IBV_WC_LOC_PROT_ERR",       FI_EACCES,       true,  "a local buffer is not covered by the memory registration given as its descriptor"},
    {IBV_WC_WR_FLUSH_ERR,       "IBV_WC_WR_FLUSH_ERR",       FI_ECANCELED,    false, "the operation was flushed because the endpoint is disconnected or in error"},
    {IBV_WC_MW_BIND_ERR,        "IBV_WC_MW_BIND_ERR",        FI_EACCES,       true,  "memory window bind failed"},
    {IBV_WC_BAD_RESP_ERR,       "IBV_WC_BAD_RESP_ERR",       FI_EIO,          true,  "the peer sent an unexpected transport response"},
    {IBV_WC_LOC_ACCESS_ERR,     "IBV_WC_LOC_ACCESS_ERR",     FI_EACCES,       true,  "the local registration does not allow the access an incoming operation needed"},
    {IBV_WC_REM_INV_REQ_ERR,    "IBV_WC_REM_INV_REQ_ERR",    FI_EREMOTEIO,    true,  "the peer found the request invalid (e.g. message larger than its receive buffer, or RMA not enabled)"},
    {IBV_WC_REM_ACCESS_ERR,     "IBV_WC_REM_ACCESS_ERR",     FI_EACCES,       true,  "the peer refused the RMA access: bad key, address range or access rights"},
    {IBV_WC_REM_OP_ERR,         "IBV_WC_REM_OP_ERR",         FI_EREMOTEIO,    true,  "the peer could not complete the operation"},
    {IBV_WC_RETRY_EXC_ERR,      "IBV_WC_RETRY_EXC_ERR",      FI_ETIMEDOUT,    true,  "transport retries exhausted: the peer does not answer"},
    {IBV_WC_RNR_RETRY_EXC_ERR,  "IBV_WC_RNR_RETRY_EXC_ERR",  FI_ENORX,        true,  "receiver-not-ready retries exhausted: the peer had no receive posted"},
    {IBV_WC_LOC_RDD_VIOL_ERR,   "IBV_WC_LOC_RDD_VIOL_ERR",   FI_EIO,          true,  "local reliable datagram domain violation (not used by RC queue pairs)"},
    {IBV_WC_REM_INV_RD_REQ_ERR, "IBV_WC_REM_INV_RD_REQ_ERR", FI_EREMOTEIO,    true,  "the peer found the read request invalid"},
    {IBV_WC_REM_ABORT_ERR,      "IBV_WC_REM_ABORT_ERR",      FI_ECONNABORTED, true,  "the peer aborted the operation"},
    {IBV_WC_INV_EECN_ERR,       "IBV_WC_INV_EECN_ERR",       FI_EIO,          true,  "invalid end-to-end context number (not used by RC queue pairs)"},
    {IBV_WC_INV_EEC_STATE_ERR,  "IBV_WC_INV_EEC_STATE_ERR",  FI_EIO,          true,  "invalid end-to-end context state (not used by RC queue pairs)"},
    {IBV_WC_FATAL_ERR,          "IBV_WC_FATAL_ERR",          FI_EIO,          true,  "fatal device error"},
    {IBV_WC_RESP_TIMEOUT_ERR,   "IBV_WC_RESP_TIMEOUT_ERR",   FI_ETIMEDOUT,    true,  "the peer's response timed out"},
    {IBV_WC_GENERAL_ERR,        "IBV_WC_GENERAL_ERR",        FI_EOTHER,       true,  "unspecified transport error"},
    {IBV_WC_TM_ERR,             "IBV_WC_TM_ERR",             FI_EOTHER,       true,  "tag matching error (tag matching is not used by evd)"},
    {IBV_WC_TM_RNDV_INCOMPLETE, "IBV_WC_TM_RNDV_INCOMPLETE", FI_EOTHER,       true,  "tag matching rendezvous incomplete (not used by evd)"},
};
// clang-format on
const size_t wc_table_len = sizeof(wc_table) / sizeof(wc_table[0]);

const wc_row* wc_lookup(int status) noexcept {
    // rows are in enum order; fall back to a scan if that ever changes
    if (status >= 0 && static_cast<size_t>(status) < wc_table_len && wc_table[status].status == status)
        return &wc_table[status];
    for (size_t i = 0; i < wc_table_len; ++i)
        if (wc_table[i].status == status) return &wc_table[i];
    return nullptr;
}

int wc_fi_errno(int status) noexcept {
    const wc_row* r = wc_lookup(status);
    return r ? r->fi_errno : FI_EOTHER;
}

const char* wc_error_text(int prov_errno, char* buf, size_t len) {
    const wc_row* r = wc_lookup(prov_errno);
    static thread_local char tls[256];
    char* out = (buf && len) ? buf : tls;
    size_t outlen = (buf && len) ? len : sizeof tls;
    if (!r)
        snprintf(out, outlen, "unknown completion status %d", prov_errno);
    else
        snprintf(out, outlen, "%s (%s): %s; reported as %s", ibv_wc_status_str(
                     static_cast<enum ibv_wc_status>(prov_errno)), r->name, r->meaning,
                 r->fi_errno ? fi_strerror(r->fi_errno) : "success");
    return out;
}

}  // namespace evd
