// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rdma_cm events -> EQ records: the translation table (data, one row per
// rdma_cm_event_type, printed in fi_evd(7)), evd's private-data header, and
// the pure translation of an event. No channel, no lock:
// test/unit/cm_table.cpp and test/fuzz/cm_data.cpp drive it directly.
#include "cm/cm.h"

#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <infiniband/ib.h>

#include <cerrno>
#include <cstring>

namespace evd {

// ------------------------------------------------------------------ the table
namespace {

constexpr cm_row kRows[] = {
    {RDMA_CM_EVENT_ADDR_RESOLVED, "RDMA_CM_EVENT_ADDR_RESOLVED", cm_outcome::resolve_route, 0, 0,
     false, "fi_connect continues inside evd: the endpoint's QP is handed to the now bound id (an address on another device than the domain's is error FI_EINVAL), then rdma_resolve_route (FI_EVD_CM_TIMEOUT ms)."},
    {RDMA_CM_EVENT_ADDR_ERROR, "RDMA_CM_EVENT_ADDR_ERROR", cm_outcome::error, 0, FI_EADDRNOTAVAIL,
     true, "The destination address could not be resolved to an RDMA device and path "
           "(nobody has it, no ARP/ND answer): error FI_EADDRNOTAVAIL."},
    {RDMA_CM_EVENT_ROUTE_RESOLVED, "RDMA_CM_EVENT_ROUTE_RESOLVED", cm_outcome::send_connect, 0,
     0, false, "fi_connect continues inside evd: rdma_connect with the user's data."},
    {RDMA_CM_EVENT_ROUTE_ERROR, "RDMA_CM_EVENT_ROUTE_ERROR", cm_outcome::error, 0, FI_ENETUNREACH,
     true, "No route to the resolved address: error FI_ENETUNREACH."},
    {RDMA_CM_EVENT_CONNECT_REQUEST, "RDMA_CM_EVENT_CONNECT_REQUEST", cm_outcome::connreq,
     FI_CONNREQ, 0, false,
     "FI_CONNREQ on the listener's EQ; fid = the passive endpoint, info->handle accepts or "
     "rejects it, the peer's data follows the record with its exact length. A request "
     "without a valid evd header is rejected inside evd and counted."},
    {RDMA_CM_EVENT_CONNECT_RESPONSE, "RDMA_CM_EVENT_CONNECT_RESPONSE", cm_outcome::internal, 0, 0,
     false, "Not expected: evd always connects with a QP, so rdma_cm completes the "
            "handshake itself. Logged and dropped."},
    {RDMA_CM_EVENT_CONNECT_ERROR, "RDMA_CM_EVENT_CONNECT_ERROR", cm_outcome::error, 0,
     FI_ECONNABORTED, true,
     "The connection handshake failed after it started: error FI_ECONNABORTED."},
    {RDMA_CM_EVENT_UNREACHABLE, "RDMA_CM_EVENT_UNREACHABLE", cm_outcome::error, 0,
     FI_EHOSTUNREACH, true,
     "The remote CM did not answer (timeout) or cannot be reached: error FI_EHOSTUNREACH."},
    {RDMA_CM_EVENT_REJECTED, "RDMA_CM_EVENT_REJECTED", cm_outcome::error, 0, FI_ECONNREFUSED,
     true, "Error FI_ECONNREFUSED; prov_errno is the reject reason: 28 = the peer's fi_reject "
           "(err_data = its data), 8 = nobody listens on that port (on iWARP, whose "
           "status is an errno: 28 when it carries evd's data or is -ECONNRESET, else 8)."},
    {RDMA_CM_EVENT_ESTABLISHED, "RDMA_CM_EVENT_ESTABLISHED", cm_outcome::connected, FI_CONNECTED,
     0, false, "FI_CONNECTED on both sides; the active side gets the accept data after the "
               "record, the passive side none."},
    {RDMA_CM_EVENT_DISCONNECTED, "RDMA_CM_EVENT_DISCONNECTED", cm_outcome::shutdown, FI_SHUTDOWN,
     0, true, "FI_SHUTDOWN on both sides, including the one that called fi_shutdown."},
    {RDMA_CM_EVENT_DEVICE_REMOVAL, "RDMA_CM_EVENT_DEVICE_REMOVAL", cm_outcome::removal, 0,
     FI_ENODEV, true, "Error FI_ENODEV on every endpoint and listener of the device, then "
                      "nothing more from them; the application closes them. rdma_cm reports "
                      "the removal with status 0, so prov_errno is -ENODEV (fi_eq_strerror: "
                      "\"No such device\"), and the device's name is logged (FI_LOG_LEVEL=warn)."},
    {RDMA_CM_EVENT_MULTICAST_JOIN, "RDMA_CM_EVENT_MULTICAST_JOIN", cm_outcome::internal, 0, 0,
     false, "Not used (evd joins no multicast group). Logged and dropped."},
    {RDMA_CM_EVENT_MULTICAST_ERROR, "RDMA_CM_EVENT_MULTICAST_ERROR", cm_outcome::internal, 0, 0,
     false, "Not used (evd joins no multicast group). Logged and dropped."},
    {RDMA_CM_EVENT_ADDR_CHANGE, "RDMA_CM_EVENT_ADDR_CHANGE", cm_outcome::internal, 0, 0, false,
     "The local address moved to another device; logged. Established connections keep "
     "their QP until it fails."},
    {RDMA_CM_EVENT_TIMEWAIT_EXIT, "RDMA_CM_EVENT_TIMEWAIT_EXIT", cm_outcome::internal, 0, 0,
     false, "The QP left time-wait after a disconnect; nothing to report (FI_SHUTDOWN was "
            "already delivered)."},
};
static_assert(sizeof(kRows) / sizeof(kRows[0]) == RDMA_CM_EVENT_TIMEWAIT_EXIT + 1,
              "one row per rdma_cm_event_type");

constexpr cm_row kUnknown = {static_cast<enum rdma_cm_event_type>(-1), "unknown",
                             cm_outcome::internal, 0, 0, false,
                             "An event this build does not know: logged and dropped."};

}  // namespace

const cm_row* cm_table(size_t* n) {
    if (n) *n = sizeof(kRows) / sizeof(kRows[0]);
    return kRows;
}

const cm_row& cm_row_for(int event) {
    for (const cm_row& r : kRows)
        if (static_cast<int>(r.event) == event) return r;
    return kUnknown;
}

const char* cm_outcome_name(cm_outcome o) {
    switch (o) {
        case cm_outcome::connreq: return "FI_CONNREQ";
        case cm_outcome::connected: return "FI_CONNECTED";
        case cm_outcome::shutdown: return "FI_SHUTDOWN";
        case cm_outcome::error: return "error";
        case cm_outcome::removal: return "error on every ep/pep";
        case cm_outcome::resolve_route: return "internal: resolve route";
        case cm_outcome::send_connect: return "internal: connect";
        case cm_outcome::internal: return "internal";
    }
    return "?";
}

// ------------------------------------------------------------------ private data
int cm_pack(uint8_t* out, size_t cap, const void* data, size_t len) {
    if (len > kCmDataMax || cap < kCmHdrLen + len || (len && !data)) return -FI_EINVAL;
    out[0] = kCmMagic0;
    out[1] = kCmMagic1;
    out[2] = kCmVersion;
    out[3] = static_cast<uint8_t>(len);
    if (len) std::memcpy(out + kCmHdrLen, data, len);
    return static_cast<int>(kCmHdrLen + len);
}

int cm_unpack(const void* pd, size_t pd_len, const uint8_t** data, size_t* len) {
    *data = nullptr;
    *len = 0;
    if (!pd || pd_len < kCmHdrLen) return -FI_EINVAL;
    const auto* b = static_cast<const uint8_t*>(pd);
    if (b[0] != kCmMagic0 || b[1] != kCmMagic1 || b[2] != kCmVersion) return -FI_EINVAL;
    size_t n = b[3];
    if (n > pd_len - kCmHdrLen) return -FI_EINVAL;
    *data = n ? b + kCmHdrLen : nullptr;
    *len = n;
    return 0;
}

// ------------------------------------------------------------------ translation
cm_action cm_translate(const struct rdma_cm_event& ev) {
    cm_action a;
    // The event type comes from the kernel and may be newer than rdma_cma.h:
    // read it as an integer, never as an out-of-range enum value (UBSan).
    int type;
    static_assert(sizeof type == sizeof ev.event);
    std::memcpy(&type, &ev.event, sizeof type);
    a.row = &cm_row_for(type);
    a.prov_errno = ev.status;
    bool carries_data = false;
    switch (type) {
        case RDMA_CM_EVENT_CONNECT_REQUEST:
        case RDMA_CM_EVENT_ESTABLISHED:
            carries_data = true;
            break;
        case RDMA_CM_EVENT_REJECTED:
            // iWARP reports rejects as negative errnos, and its drivers
            // disagree on which: siw says -ECONNRESET for the peer's MPA
            // reject, cxgb4 and irdma -ECONNREFUSED, which is also what a TCP
            // reset (nobody listens) gives. They get the IB reasons, one
            // contract for both transports: a reject that carries evd's
            // private data, or siw's -ECONNRESET, is the peer's.
            if (ev.status < 0) {
                const uint8_t* d = nullptr;
                size_t n = 0;
                const bool evd_data =
                    cm_unpack(ev.param.conn.private_data,
                              ev.param.conn.private_data ? ev.param.conn.private_data_len : 0,
                              &d, &n) == 0;
                a.prov_errno = evd_data || ev.status == -ECONNRESET ? kRejConsumer : kRejNoListener;
            }
            a.peer_reject = a.prov_errno == kRejConsumer;
            carries_data = a.peer_reject;
            break;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            // rdma_cm says "removed" with status 0; give the record the same
            // kind of prov_errno as the other CM errors (a negative errno),
            // so fi_eq_strerror names the cause instead of "no detail".
            if (a.prov_errno == 0) a.prov_errno = -ENODEV;
            break;
        default:
            break;
    }
    if (carries_data) {
        const void* pd = ev.param.conn.private_data;
        size_t pd_len = pd ? ev.param.conn.private_data_len : 0;
        if (type == RDMA_CM_EVENT_ESTABLISHED && pd_len == 0) {
            // the passive side's ESTABLISHED carries nothing: not an error
            a.data_ok = true;
        } else {
            a.data_ok = cm_unpack(pd, pd_len, &a.data, &a.data_len) == 0;
        }
    }
    return a;
}

}  // namespace evd
