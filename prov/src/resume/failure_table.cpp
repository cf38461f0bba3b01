// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Which failures a resumable connection is to ride through: the data
// (failure_table.h).
#include "resume/failure_table.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace evd::resume {

namespace {
constexpr failure_source W = failure_source::completion;
constexpr failure_source A = failure_source::async_event;
constexpr failure_source C = failure_source::cm_event;
constexpr failure_verdict T = failure_verdict::transient;
constexpr failure_verdict E = failure_verdict::ends;
constexpr failure_verdict I = failure_verdict::ignored;
}  // namespace

// clang-format off
const failure_row failure_table[] = {
    // ---- completion statuses that leave an RC QP in error
    {W, IBV_WC_RETRY_EXC_ERR,     "IBV_WC_RETRY_EXC_ERR",     T, "no answer within the transport's retries: a link down or a partition as much as a dead peer; the attempts to join it again tell them apart"},
    {W, IBV_WC_WR_FLUSH_ERR,      "IBV_WC_WR_FLUSH_ERR",      T, "flushed behind whatever moved the QP to error: the worst cause seen during the drain decides"},
    {W, IBV_WC_RESP_TIMEOUT_ERR,  "IBV_WC_RESP_TIMEOUT_ERR",  T, "the response did not come back in time (reliable datagram only; the path, as retries exhausted)"},
    {W, IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR", E, "the peer posted no receive in time (evd asks for endless receiver-not-ready retries, so it does not happen on evd's connections)"},
    {W, IBV_WC_LOC_LEN_ERR,       "IBV_WC_LOC_LEN_ERR",       E, "a message longer than the receive: the application's"},
    {W, IBV_WC_LOC_QP_OP_ERR,     "IBV_WC_LOC_QP_OP_ERR",     E, "the QP refused the request (siw also reports a failed send this way: on iWARP the TCP stream's end is the connection's); with the endpoint's port down at that moment it rides through instead: Soft-RoCE fails a request it cannot transmit this way"},
    {W, IBV_WC_LOC_PROT_ERR,      "IBV_WC_LOC_PROT_ERR",      E, "a local buffer outside its registration: the application's"},
    {W, IBV_WC_LOC_ACCESS_ERR,    "IBV_WC_LOC_ACCESS_ERR",    E, "a local registration without the access needed: the application's"},
    {W, IBV_WC_MW_BIND_ERR,       "IBV_WC_MW_BIND_ERR",       E, "a memory window bind failed: the application's"},
    {W, IBV_WC_BAD_RESP_ERR,      "IBV_WC_BAD_RESP_ERR",      E, "the peer answered what was not asked: not a path's failure"},
    {W, IBV_WC_REM_INV_REQ_ERR,   "IBV_WC_REM_INV_REQ_ERR",   E, "the peer found the request invalid: a replay is as invalid"},
    {W, IBV_WC_REM_ACCESS_ERR,    "IBV_WC_REM_ACCESS_ERR",    E, "the peer refused the RMA access: a replay is refused as well"},
    {W, IBV_WC_REM_OP_ERR,        "IBV_WC_REM_OP_ERR",        E, "the peer could not carry out the operation"},
    {W, IBV_WC_REM_INV_RD_REQ_ERR,"IBV_WC_REM_INV_RD_REQ_ERR",E, "the peer found the read invalid"},
    {W, IBV_WC_REM_ABORT_ERR,     "IBV_WC_REM_ABORT_ERR",     E, "the peer aborted the operation"},
    {W, IBV_WC_FATAL_ERR,         "IBV_WC_FATAL_ERR",         E, "the device failed"},
    {W, IBV_WC_GENERAL_ERR,       "IBV_WC_GENERAL_ERR",       E, "an error nobody named: not known to pass"},
    // ---- async events on the QP, its port or its device
    {A, IBV_EVENT_QP_FATAL,       "IBV_EVENT_QP_FATAL",       E, "the QP failed (on siw, a send whose TCP stream failed): not known to pass"},
    {A, IBV_EVENT_QP_REQ_ERR,     "IBV_EVENT_QP_REQ_ERR",     E, "the peer's request broke the transport's rules"},
    {A, IBV_EVENT_QP_ACCESS_ERR,  "IBV_EVENT_QP_ACCESS_ERR",  E, "the peer's request broke an access rule"},
    {A, IBV_EVENT_CQ_ERR,         "IBV_EVENT_CQ_ERR",         E, "the CQ overran: the application's CQ is too small"},
    {A, IBV_EVENT_DEVICE_FATAL,   "IBV_EVENT_DEVICE_FATAL",   E, "the device failed"},
    {A, IBV_EVENT_PORT_ERR,       "IBV_EVENT_PORT_ERR",       I, "the port went down, but RC's retries outlive a short outage: the QP's own failure, if one comes, decides (a fail-fast domain ends its endpoints all the same)"},
    {A, IBV_EVENT_GID_CHANGE,     "IBV_EVENT_GID_CHANGE",     I, "the port's addresses changed; the QP goes on"},
    {A, IBV_EVENT_LID_CHANGE,     "IBV_EVENT_LID_CHANGE",     I, "the subnet manager moved the port; the QP goes on"},
    {A, IBV_EVENT_PKEY_CHANGE,    "IBV_EVENT_PKEY_CHANGE",    I, "the partition table changed; the QP goes on"},
    {A, IBV_EVENT_SM_CHANGE,      "IBV_EVENT_SM_CHANGE",      I, "a new subnet manager; the QP goes on"},
    {A, IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER", I, "the subnet manager asks for registrations again; the QP goes on"},
    {A, IBV_EVENT_PATH_MIG_ERR,   "IBV_EVENT_PATH_MIG_ERR",   I, "the alternate path failed; the QP keeps its current one"},
    // ---- rdma_cm events on a connected endpoint's id
    {C, RDMA_CM_EVENT_DISCONNECTED,  "RDMA_CM_EVENT_DISCONNECTED",  E, "the peer disconnected (fi_shutdown, fi_close): the connection is over, not failed"},
    {C, RDMA_CM_EVENT_DEVICE_REMOVAL,"RDMA_CM_EVENT_DEVICE_REMOVAL",E, "the device is gone"},
    {C, RDMA_CM_EVENT_ADDR_CHANGE,   "RDMA_CM_EVENT_ADDR_CHANGE",   I, "the local address moved (a bond failed over); the QP goes on until it fails"},
};
// clang-format on
const size_t failure_table_len = sizeof(failure_table) / sizeof(failure_table[0]);

const char* failure_source_name(failure_source s) noexcept {
    switch (s) {
    case failure_source::completion: return "completion";
    case failure_source::async_event: return "async event";
    case failure_source::cm_event: return "rdma_cm event";
    }
    return "unknown";
}

const failure_row* failure_lookup(failure_source s, int code) noexcept {
    for (size_t i = 0; i < failure_table_len; ++i)
        if (failure_table[i].source == s && failure_table[i].code == code) return &failure_table[i];
    return nullptr;
}

const char* failure_verdict_name(failure_verdict v) noexcept {
    switch (v) {
    case failure_verdict::ignored: return "ignored";
    case failure_verdict::transient: return "rides through";
    case failure_verdict::ends: return "ends";
    }
    return "unknown";
}

failure_verdict failure_verdict_of(failure_source s, int code) noexcept {
    if (const failure_row* r = failure_lookup(s, code)) return r->verdict;
    return s == failure_source::completion ? failure_verdict::ends : failure_verdict::ignored;
}

}  // namespace evd::resume
