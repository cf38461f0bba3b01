// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hardware async events -> EQ records: the translation table (data, one
// row per ibv_event_type, printed in fi_evd(7)), the pure translation of an
// event into a record, and the sentences of fi_eq_strerror. No device, no
// lock: test/unit/async_table.cpp drives it with synthetic events.
#include "config.h"

#include "device/async.h"

#include <time.h>

#include <cstdio>
#include <cstring>
#include <iterator>

#include "evd.h"

// HAVE_DECL_IBV_EVENT_*: config.h (configure.ac's AC_CHECK_DECLS, always 0 or 1)

namespace evd {
namespace {

using O = async_obj;
using R = async_rec;
using A = async_act;

// ---------------------------------------------------------------- THE TABLE
// One row per enum ibv_event_type of the installed verbs.h, in enum order.
// fi_evd(7) prints the same rows (man/parts/async.7); test/unit/async_table.cpp
// checks both.
constexpr async_row kTable[] = {
    {IBV_EVENT_CQ_ERR, "IBV_EVENT_CQ_ERR", O::cq, R::error, FI_EOVERRUN, A::none,
     "completion queue %C of %D overran or failed; completions were lost",
     "the only way a CQ raises an error is an overrun (or a device fault): completions are "
     "gone, so the CQ's owner must treat its endpoints' state as unknown"},
    {IBV_EVENT_QP_FATAL, "IBV_EVENT_QP_FATAL", O::qp, R::error, FI_EIO, A::terminal,
     "queue pair %Q of %D hit a fatal error and is in the error state",
     "a local I/O failure the application cannot correct; the endpoint is ended"},
    {IBV_EVENT_QP_REQ_ERR, "IBV_EVENT_QP_REQ_ERR", O::qp, R::error, FI_EREMOTEIO, A::terminal,
     "queue pair %Q of %D received an invalid request from its peer and is in the error state",
     "the peer violated the transport protocol (invalid request): a remote I/O error; the "
     "endpoint is ended"},
    {IBV_EVENT_QP_ACCESS_ERR, "IBV_EVENT_QP_ACCESS_ERR", O::qp, R::error, FI_EACCES,
     A::terminal,
     "queue pair %Q of %D refused a request that violated memory access rights and is in the "
     "error state",
     "an RDMA request hit a bad key, range or permission: access denied; the endpoint is "
     "ended"},
    {IBV_EVENT_COMM_EST, "IBV_EVENT_COMM_EST", O::qp, R::notify, 0, A::comm_est,
     "queue pair %Q of %D received its first message before the connection was reported "
     "established",
     "evd passes it to rdma_notify() so early data never stalls the connection; a "
     "notification only on request"},
    {IBV_EVENT_SQ_DRAINED, "IBV_EVENT_SQ_DRAINED", O::qp, R::notify_or_error, FI_EOPBADSTATE,
     A::none, "the send queue of queue pair %Q on %D has drained",
     "evd never asks for the SQ-drain state: unless the binding requested notifications "
     "(FI_EVD_NOTIFY_ASYNC) it is an unexpected state change (bad state), not fatal"},
    {IBV_EVENT_PATH_MIG, "IBV_EVENT_PATH_MIG", O::qp, R::notify, 0, A::none,
     "queue pair %Q of %D migrated to its alternate path", "informational"},
    {IBV_EVENT_PATH_MIG_ERR, "IBV_EVENT_PATH_MIG_ERR", O::qp, R::error, FI_EHOSTUNREACH,
     A::none, "queue pair %Q of %D could not migrate to its alternate path",
     "the alternate path does not reach the peer; the QP keeps its current path, so not "
     "terminal"},
    {IBV_EVENT_DEVICE_FATAL, "IBV_EVENT_DEVICE_FATAL", O::device, R::error, FI_ENODEV,
     A::device_fatal, "device %D failed and can no longer be used",
     "the device is gone: every domain gets this record and every endpoint of the device "
     "exactly one terminal record"},
    {IBV_EVENT_PORT_ACTIVE, "IBV_EVENT_PORT_ACTIVE", O::port, R::notify, 0, A::port_up,
     "port %P of %D is active",
     "the domain's port snapshot becomes IBV_PORT_ACTIVE: new connections work again"},
    {IBV_EVENT_PORT_ERR, "IBV_EVENT_PORT_ERR", O::port, R::error, FI_ENETDOWN, A::port_down,
     "port %P of %D is down",
     "the link is down; connections through it stall or fail, so the application is told "
     "(not terminal: PORT_ACTIVE may follow)"},
    {IBV_EVENT_LID_CHANGE, "IBV_EVENT_LID_CHANGE", O::port, R::notify, 0, A::port_change,
     "the LID of port %P of %D changed", "informational"},
    {IBV_EVENT_PKEY_CHANGE, "IBV_EVENT_PKEY_CHANGE", O::port, R::notify, 0, A::port_change,
     "the P_Key table of port %P of %D changed", "informational"},
    {IBV_EVENT_SM_CHANGE, "IBV_EVENT_SM_CHANGE", O::port, R::notify, 0, A::port_change,
     "the subnet manager of port %P of %D changed", "informational"},
    {IBV_EVENT_SRQ_ERR, "IBV_EVENT_SRQ_ERR", O::srq, R::error, FI_EIO, A::none,
     "shared receive queue %S of %D failed",
     "a local I/O failure of the shared receive queue; its receives are lost"},
    {IBV_EVENT_SRQ_LIMIT_REACHED, "IBV_EVENT_SRQ_LIMIT_REACHED", O::srq, R::notify_armed, 0,
     A::none, "shared receive queue %S of %D fell below its armed limit",
     "raised only after srq_arm (FI_EVD_ASYNC_OPS): arming is the request, so always "
     "delivered"},
    {IBV_EVENT_QP_LAST_WQE_REACHED, "IBV_EVENT_QP_LAST_WQE_REACHED", O::qp, R::notify, 0,
     A::none, "queue pair %Q of %D will take no more receives from its shared receive queue",
     "informational"},
    {IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER", O::port, R::notify, 0,
     A::port_change, "the subnet manager asks clients of port %P of %D to register again",
     "informational"},
#if HAVE_DECL_IBV_EVENT_GID_CHANGE
    {IBV_EVENT_GID_CHANGE, "IBV_EVENT_GID_CHANGE", O::port, R::notify, 0, A::port_change,
     "the GID table of port %P of %D changed", "informational (RoCE: an IP address changed)"},
#endif
#if HAVE_DECL_IBV_EVENT_WQ_FATAL
    {IBV_EVENT_WQ_FATAL, "IBV_EVENT_WQ_FATAL", O::wq, R::error, FI_EIO, A::none,
     "work queue %W of %D hit a fatal error",
     "a local I/O failure of a work queue (evd creates none: normally undeliverable)"},
#endif
};

constexpr bool table_in_enum_order() {
    for (size_t i = 0; i < std::size(kTable); ++i)
        if (kTable[i].type != static_cast<int>(i)) return false;
    return true;
}
static_assert(table_in_enum_order(), "async table rows must follow enum ibv_event_type");

uint32_t obj_code(async_obj o) {
    switch (o) {
        case O::qp: return FI_EVD_ASYNC_QP;
        case O::cq: return FI_EVD_ASYNC_CQ;
        case O::srq: return FI_EVD_ASYNC_SRQ;
        case O::wq: return FI_EVD_ASYNC_WQ;
        case O::port: return FI_EVD_ASYNC_PORT;
        case O::device: return FI_EVD_ASYNC_DEVICE;
    }
    return 0;
}

}  // namespace

void async_copy_name(char (&dst)[FI_EVD_DEVNAME_MAX], const char* src) noexcept {
    std::snprintf(dst, sizeof dst, "%s", src ? src : "");
}

// The event type as an integer: the kernel may report a type newer than the
// installed verbs.h, and loading such a value as the enum is undefined.
int async_event_type(const struct ibv_async_event& ev) noexcept {
    int t;
    static_assert(sizeof t == sizeof ev.event_type);
    std::memcpy(&t, &ev.event_type, sizeof t);
    return t;
}

std::span<const async_row> async_table() noexcept { return {kTable, std::size(kTable)}; }

const async_row* async_row_for(int type) noexcept {
    if (type < 0 || static_cast<size_t>(type) >= std::size(kTable)) return nullptr;
    return &kTable[type];
}

uint64_t async_now_ns() noexcept {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// The affected object's identity into d (qp/cq/srq/wq number or port);
// returns the number FI_NOTIFY data carries for it.
uint32_t fill_object(const struct ibv_async_event& ev, O obj, struct fi_evd_async_err& d) {
    uint32_t num = 0;
    switch (obj) {
        case O::qp:
            if (ev.element.qp) d.qp_num = num = ev.element.qp->qp_num;
            break;
        case O::cq:
            if (ev.element.cq) d.cq_handle = ev.element.cq->handle;
            num = d.cq_handle;
            break;
        case O::srq:
            if (ev.element.srq) d.srq_handle = num = ev.element.srq->handle;
            break;
        case O::wq:
            if (ev.element.wq) d.wq_num = num = ev.element.wq->wq_num;
            break;
        case O::port:
            d.port_num = ev.element.port_num > 0 ? static_cast<uint32_t>(ev.element.port_num) : 0;
            break;
        case O::device:
            break;
    }
    return num;
}

// What the row's record kind becomes for this target: an error entry, an
// FI_NOTIFY entry, or nothing (a notification nobody asked for).
async_out outcome_for(R rec, bool notify_wanted) {
    switch (rec) {
        case R::error: return async_out::error;
        case R::notify: return notify_wanted ? async_out::notify : async_out::none;
        case R::notify_armed: return async_out::notify;
        case R::notify_or_error: return notify_wanted ? async_out::notify : async_out::error;
    }
    return async_out::none;
}

}  // namespace

async_record async_translate(const struct ibv_async_event& ev, const async_input& in) noexcept {
    async_record r;
    r.row = async_row_for(async_event_type(ev));
    auto& d = r.data;
    d.magic = FI_EVD_ASYNC_MAGIC;
    d.version = FI_EVD_ASYNC_VERSION;
    d.size = sizeof(struct fi_evd_async_err);
    d.event_type = async_event_type(ev);
    async_copy_name(d.device, in.device);
    d.fid = in.fid;
    d.timestamp_ns = in.timestamp_ns;
    d.seq = in.seq;
    d.terminal = in.terminal ? 1 : 0;
    if (!r.row) return r;  // unknown type: out == none

    d.object = obj_code(r.row->obj);
    const uint32_t num = fill_object(ev, r.row->obj, d);
    r.out = outcome_for(r.row->rec, in.notify_wanted);
    if (r.out == async_out::error) {
        r.err.fid = in.fid;
        r.err.context = in.context;
        r.err.data = 0;
        r.err.err = r.row->err;
        r.err.prov_errno = async_event_type(ev);
        r.err.err_data = nullptr;
        r.err.err_data_size = 0;
    } else if (r.out == async_out::notify) {
        r.notify.fid = in.fid;
        r.notify.context = in.context;
        r.notify.data = FI_EVD_NOTIFY_DATA(async_event_type(ev), d.port_num, num);
    }
    return r;
}

const char* async_format(const async_row& row, const struct fi_evd_async_err& data, char* buf,
                         size_t len) noexcept {
    if (!buf || len == 0) return row.sentence;
    size_t n = 0;
    auto put = [&](const char* s) {
        for (; *s && n + 1 < len; ++s) buf[n++] = *s;
    };
    char dev[FI_EVD_DEVNAME_MAX];
    std::memcpy(dev, data.device, sizeof dev);
    dev[sizeof dev - 1] = '\0';  // err_data came back from the application
    for (const char* p = row.sentence; *p && n + 1 < len; ++p) {
        if (*p != '%' || !p[1]) {
            buf[n++] = *p;
            continue;
        }
        char num[24];
        switch (*++p) {
            case 'D': put(dev[0] ? dev : "?"); break;
            case 'P': std::snprintf(num, sizeof num, "%u", data.port_num); put(num); break;
            case 'Q': std::snprintf(num, sizeof num, "%u", data.qp_num); put(num); break;
            case 'C': std::snprintf(num, sizeof num, "%u", data.cq_handle); put(num); break;
            case 'S': std::snprintf(num, sizeof num, "%u", data.srq_handle); put(num); break;
            case 'W': std::snprintf(num, sizeof num, "%u", data.wq_num); put(num); break;
            default: buf[n++] = '%'; if (n + 1 < len) buf[n++] = *p; break;
        }
    }
    put(" (");
    put(row.name);
    put(")");
    buf[n] = '\0';
    return buf;
}

const char* async_strerror(int prov_errno, const void* err_data, char* buf, size_t len) noexcept {
    if (!err_data) return nullptr;
    struct fi_evd_async_err d;
    std::memcpy(&d, err_data, sizeof(d.magic));
    if (d.magic != FI_EVD_ASYNC_MAGIC) return nullptr;
    std::memcpy(&d, err_data, sizeof d);
    if (d.version != FI_EVD_ASYNC_VERSION || d.size != sizeof d || d.event_type != prov_errno)
        return nullptr;
    const async_row* row = async_row_for(prov_errno);
    if (!row) return nullptr;
    return async_format(*row, d, buf, len);
}

}  // namespace evd
