// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hardware async events (ibv_get_async_event) -> EQ records (async.cpp): the
// translation table (data, one place), routing to the owning object's EQ,
// fi_eq_strerror text, the domain extension ops (FI_EVD_ASYNC_OPS).
//
// ---------------------------------------------------------------- strerror
// fi_eq_strerror (eq.cpp) asks async_strerror() first, so an async record's
// text names its device and port however it reached the application.
// async_strerror() recognises an async record by its err_data (a struct
// fi_evd_async_err: magic FI_EVD_ASYNC_MAGIC, version, size ==
// sizeof(struct fi_evd_async_err), event_type == prov_errno) and returns
// nullptr for anything else (then do the normal fi_strerror thing). It
// writes a sentence such as "port 1 of rxe0 is down (IBV_EVENT_PORT_ERR)"
// into buf (truncated to len) and returns buf; with buf == nullptr or len == 0
// it returns a static per-event sentence without identities.
//
// ---------------------------------------------------------------- targets
// Who registers what (devctx_register, see devctx.h):
//  * endpoints: devctx::qps[ibv_qp*] = {ep fid, ep context, route -> bound EQ
//    (else the domain's EQ), owner = ep, consequence, claim_terminal,
//    eq_flags}. The consequence hook receives every QP event after the record
//    was posted, and additionally DEVICE_FATAL (with ev.element.qp set to that
//    endpoint's QP). It calls rdma_notify(cm_id, IBV_EVENT_COMM_EST) on
//    COMM_EST (rdma_cm then completes a connection whose RTU was lost); the
//    terminal record of QP_FATAL / QP_REQ_ERR / QP_ACCESS_ERR / DEVICE_FATAL
//    was already posted once claim_terminal() returned true.
//  * CQs: devctx::cqs[ibv_cq*] = {cq fid, context, route -> domain's EQ}.
//  * shared rx contexts: devctx::srqs[ibv_srq*] = {srx fid, context, route ->
//    domain's EQ}. srq_arm (FI_EVD_ASYNC_OPS) finds the SRQ through this.
//  * domains: devctx::domains (port and device events go to domain::eq_bound).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "device/devctx.h"
#include "evd.h"

namespace evd {

// Called by devctx_poll_async() for every event read from a device's async
// fd, BEFORE ibv_ack_async_event (the caller acks). Translates, routes and
// posts the record; never throws.
void async_dispatch(devctx* d, const struct ibv_async_event& ev) noexcept;

// fi_eq_strerror helper for async records (see the note above).
const char* async_strerror(int prov_errno, const void* err_data, char* buf, size_t len) noexcept;

// Domain ops_open: answers FI_EVD_ASYNC_OPS, -FI_ENOSYS for any other name
// (so domain.cpp can chain: try this first, then its own names).
int async_domain_ops_open(struct fid* fid, const char* name, uint64_t flags, void** ops,
                          void* context);

// The consequence hook of an endpoint's QP registration (async_target::
// consequence, owner = evd::ep*): passes COMM_EST to rdma_notify() so data
// that arrives before the connection is reported established never stalls
// it. (Disabling on fatal events is done by claim_terminal, which moves the
// endpoint to its error state.) Runs under the registry lock; never blocks.
void async_ep_consequence(void* owner, const struct ibv_async_event& ev);

// ---------------------------------------------------------------- the table
enum class async_obj : uint8_t { qp, cq, srq, wq, port, device };

enum class async_rec : uint8_t {
    error,          // fi_eq_readerr record, always
    notify,         // FI_NOTIFY record when the binding opted in (FI_EVD_NOTIFY_ASYNC)
    notify_armed,   // FI_NOTIFY record always: the application armed it (SRQ limit)
    notify_or_error // FI_NOTIFY when opted in (requested), else an error record (unexpected)
};

// What evd itself does besides posting the record.
enum class async_act : uint8_t {
    none,
    terminal,     // ends the endpoint: claim_terminal + consequence (disable)
    comm_est,     // consequence hook calls rdma_notify()
    port_down,    // domain port snapshot -> IBV_PORT_DOWN
    port_up,      // domain port snapshot -> IBV_PORT_ACTIVE
    port_change,  // domain port snapshot: counted, state unchanged
    device_fatal  // every endpoint of the device gets one terminal record
};

struct async_row {
    int type;               // enum ibv_event_type
    const char* name;       // "IBV_EVENT_PORT_ERR"
    async_obj obj;          // what ev.element points at
    async_rec rec;          // record kind
    int err;                // positive FI_E* for error records (0 for notify-only rows)
    async_act act;          // consequence inside evd
    // Sentence template for fi_eq_strerror: %D device, %P port, %Q QP number,
    // %C CQ handle, %S SRQ handle, %W WQ number. " (IBV_EVENT_...)" is appended.
    const char* sentence;
    const char* why;        // why this err / kind (printed in fi_evd(7))
};

// Every ibv_event_type of the installed verbs.h, one row each, in enum order.
std::span<const async_row> async_table() noexcept;
const async_row* async_row_for(int type) noexcept;

// Input of the pure translation.
struct async_input {
    const char* device = "";     // device name
    struct fid* fid = nullptr;   // target fid
    void* context = nullptr;     // target fid's context
    bool notify_wanted = false;  // the binding opted in (FI_EVD_NOTIFY_ASYNC)
    bool terminal = false;       // this record is its endpoint's terminal event
    uint64_t timestamp_ns = 0;   // CLOCK_MONOTONIC at read
    uint64_t seq = 0;            // per-device event number
};

enum class async_out : uint8_t { none, error, notify };

struct async_record {
    const async_row* row = nullptr;  // nullptr: unknown event type
    async_out out = async_out::none;
    struct fi_eq_err_entry err {};   // out == error (err_data fields unset: use data)
    struct fi_eq_entry notify {};    // out == notify
    struct fi_evd_async_err data {}; // err_data of an error record (filled always)
};

// Pure: no locks, no I/O. Reads the identity (qp_num, handle, port) from
// ev.element according to the row's object kind.
async_record async_translate(const struct ibv_async_event& ev, const async_input& in) noexcept;

// Formats the sentence of `data` (validated by the caller) into buf.
const char* async_format(const async_row& row, const struct fi_evd_async_err& data, char* buf,
                         size_t len) noexcept;

uint64_t async_now_ns() noexcept;
// ev.event_type read as an int (valid also for types newer than verbs.h).
int async_event_type(const struct ibv_async_event& ev) noexcept;
// A device name into a record's fixed-size field (truncated, terminated).
void async_copy_name(char (&dst)[FI_EVD_DEVNAME_MAX], const char* src) noexcept;

}  // namespace evd
