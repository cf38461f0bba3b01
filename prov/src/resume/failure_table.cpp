// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Which failures a resumable connection rides through: the data
// (failure_table.h).
#include "resume/failure_table.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace evd::resume {

namespace {
constexpr failure_source W = failure_source::completion;
constexpr failure_source A = failure_source::async_event;
constexpr failure_source C = failure_source::cm_event;
}  // namespace

// clang-format off
const failure_row failure_table[] = {
    // ---- completion statuses that leave an RC QP in error
    {W, IBV_WC_RETRY_EXC_ERR,     "IBV_WC_RETRY_EXC_ERR",     true,  "no answer within the transport's retries: a link down or a partition as much as a dead peer; the attempts to join it again tell them apart"},
    {W, IBV_WC_RESP_TIMEOUT_ERR,  "IBV_WC_RESP_TIMEOUT_ERR",  true,  "the response did not come back in time: the path, as above"},
    {W, IBV_WC_WR_FLUSH_ERR,      "IBV_WC_WR_FLUSH_ERR",      true,  "flushed behind the failure that moved the QP to error; the first failure decides"},
    {W, IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR", false, "the peer posted no receive in time: the application's, and a replay meets it again"},
    {W, IBV_WC_LOC_LEN_ERR,       "IBV_WC_LOC_LEN_ERR",       false, "a message longer than the receive: the application's"},
    {W, IBV_WC_LOC_QP_OP_ERR,     "IBV_WC_LOC_QP_OP_ERR",     false, "the QP refused the request: the request's"},
    {W, IBV_WC_LOC_PROT_ERR,      "IBV_WC_LOC_PROT_ERR",      false, "a local buffer outside its registration: the application's"},
    {W, IBV_WC_LOC_ACCESS_ERR,    "IBV_WC_LOC_ACCESS_ERR",    false, "a local registration without the access needed: the application's"},
    {W, IBV_WC_MW_BIND_ERR,       "IBV_WC_MW_BIND_ERR",       false, "a memory window bind failed: the application's"},
    {W, IBV_WC_BAD_RESP_ERR,      "IBV_WC_BAD_RESP_ERR",      false, "the peer answered what was not asked: not a path's failure"},
    {W, IBV_WC_REM_INV_REQ_ERR,   "IBV_WC_REM_INV_REQ_ERR",   false, "the peer found the request invalid: a replay is as invalid"},
    {W, IBV_WC_REM_ACCESS_ERR,    "IBV_WC_REM_ACCESS_ERR",    false, "the peer refused the RMA access: a replay is refused as well"},
    {W, IBV_WC_REM_OP_ERR,        "IBV_WC_REM_OP_ERR",        false, "the peer could not carry out the operation"},
    {W, IBV_WC_REM_INV_RD_REQ_ERR,"IBV_WC_REM_INV_RD_REQ_ERR",false, "the peer found the read invalid"},
    {W, IBV_WC_REM_ABORT_ERR,     "IBV_WC_REM_ABORT_ERR",     false, "the peer aborted the operation"},
    {W, IBV_WC_FATAL_ERR,         "IBV_WC_FATAL_ERR",         false, "the device failed"},
    {W, IBV_WC_GENERAL_ERR,       "IBV_WC_GENERAL_ERR",       false, "an error nobody named: not known to pass"},
    // ---- async events on the QP, its port or its device
    {A, IBV_EVENT_PORT_ERR,       "IBV_EVENT_PORT_ERR",       true,  "the port went down: it may come back (PORT_ACTIVE)"},
    {A, IBV_EVENT_GID_CHANGE,     "IBV_EVENT_GID_CHANGE",     true,  "the port's addresses changed: the peer may be reached again"},
    {A, IBV_EVENT_LID_CHANGE,     "IBV_EVENT_LID_CHANGE",     true,  "the subnet manager moved the port: the path, not the peer"},
    {A, IBV_EVENT_PKEY_CHANGE,    "IBV_EVENT_PKEY_CHANGE",    true,  "the partition table changed: the fabric's, not the peer's"},
    {A, IBV_EVENT_SM_CHANGE,      "IBV_EVENT_SM_CHANGE",      true,  "a new subnet manager: the fabric's"},
    {A, IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER", true, "the subnet manager asks for registrations again: the fabric's"},
    {A, IBV_EVENT_PATH_MIG_ERR,   "IBV_EVENT_PATH_MIG_ERR",   true,  "the alternate path failed: the path's"},
    {A, IBV_EVENT_QP_FATAL,       "IBV_EVENT_QP_FATAL",       false, "the QP failed in a way no completion reports: not known to pass"},
    {A, IBV_EVENT_QP_REQ_ERR,     "IBV_EVENT_QP_REQ_ERR",     false, "the peer's request broke the transport's rules"},
    {A, IBV_EVENT_QP_ACCESS_ERR,  "IBV_EVENT_QP_ACCESS_ERR",  false, "the peer's request broke an access rule"},
    {A, IBV_EVENT_CQ_ERR,         "IBV_EVENT_CQ_ERR",         false, "the CQ overran: the application's CQ is too small"},
    {A, IBV_EVENT_DEVICE_FATAL,   "IBV_EVENT_DEVICE_FATAL",   false, "the device failed"},
    // ---- rdma_cm events on a connected endpoint's id
    {C, RDMA_CM_EVENT_ADDR_CHANGE,   "RDMA_CM_EVENT_ADDR_CHANGE",   true,  "the local address moved (a bond failed over): the peer may be reached again"},
    {C, RDMA_CM_EVENT_DISCONNECTED,  "RDMA_CM_EVENT_DISCONNECTED",  false, "the peer disconnected (fi_shutdown, fi_close): the connection is over, not failed"},
    {C, RDMA_CM_EVENT_DEVICE_REMOVAL,"RDMA_CM_EVENT_DEVICE_REMOVAL",false, "the device is gone"},
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

bool failure_transient(failure_source s, int code) noexcept {
    const failure_row* r = failure_lookup(s, code);
    return r && r->transient;
}

}  // namespace evd::resume
