// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Connection management: rdma_cm events to EQ records (cm.cpp).
//
//  * The translation rdma_cm event -> EQ outcome is DATA: cm_table(), one row
//    per enum rdma_cm_event_type, tested by test/unit/cm_table.cpp and
//    printed in fi_evd(7) (man/parts/cm.7).
//  * evd prefixes its own 4-byte header to the private data of every
//    connect/accept/reject so the receiver can tell how many user bytes were
//    sent (IB CM pads private data) and reject garbage from the network.
//  * One rdma_event_channel per EQ (cm_chan), created when the first pep/ep
//    binds to that EQ and registered as an EQ source: rdma_cm events advance
//    when the application reads or waits on the EQ.
#pragma once

#include <rdma/rdma_cma.h>

#include <chrono>
#include <vector>

#include "eq/eq.h"
#include "evd.h"
#include "lock.h"
#include "owners.h"
#include "tsan_hb.h"

namespace evd {

struct eq;
struct pep;
struct ep;
struct msg_ep;
struct connreq;
struct cm_owner;

// ------------------------------------------------------------------ private data
// Wire header in front of the user's connection data: magic "ev", version,
// user length. Everything after it up to `len` is the user's.
inline constexpr uint8_t kCmMagic0 = 0x65;  // 'e'
inline constexpr uint8_t kCmMagic1 = 0x76;  // 'v'
inline constexpr uint8_t kCmVersion = 1;
inline constexpr size_t kCmHdrLen = 4;

// Private data the transport carries per message for rdma_cm on IB/RoCE RC
// (IB CM REQ 92 bytes of which rdma_cm takes 36 for its IP header; REP 196;
// REJ 148). iWARP (MPA) allows more; evd advertises the IB/RoCE numbers.
inline constexpr size_t kCmReqSpace = 56;
inline constexpr size_t kCmRepSpace = 196;
inline constexpr size_t kCmRejSpace = 148;
// The largest user payload of fi_connect, fi_accept and fi_reject alike
// (FI_OPT_CM_DATA_SIZE, ep_attr->max_cm_data_size): the smallest message
// (REQ) minus evd's header. More is -FI_EINVAL.
inline constexpr size_t kCmDataMax = kCmReqSpace - kCmHdrLen;  // 52

// Writes header + data into out (capacity cap). Returns the byte count, or
// -FI_EINVAL when len > kCmDataMax (or cap too small).
int cm_pack(uint8_t* out, size_t cap, const void* data, size_t len);
// Validates untrusted private data. On success *data/*len give the user
// bytes (inside pd) and 0 is returned; -FI_EINVAL when there is no valid
// evd header or its length runs past pd_len.
int cm_unpack(const void* pd, size_t pd_len, const uint8_t** data, size_t* len);

// ------------------------------------------------------------------ translation table
enum class cm_outcome : int {
    connreq,        // FI_CONNREQ on the listener's EQ
    connected,      // FI_CONNECTED on the endpoint
    shutdown,       // FI_SHUTDOWN (terminal)
    error,          // fi_eq_err_entry on the endpoint (terminal)
    removal,        // error on every ep/pep of the device, then nothing more
    resolve_route,  // internal: continue fi_connect with rdma_resolve_route
    send_connect,   // internal: continue fi_connect with rdma_connect
    internal,       // handled inside evd, no record
};

struct cm_row {
    enum rdma_cm_event_type event;
    const char* name;        // "RDMA_CM_EVENT_..."
    cm_outcome outcome;
    uint32_t fi_event;       // FI_CONNREQ / FI_CONNECTED / FI_SHUTDOWN, 0 for errors
    int fi_err;              // positive FI_E* for error outcomes, else 0
    bool terminal;           // ends the endpoint (at most one terminal event)
    const char* doc;         // one line for fi_evd(7)
};

// Every rdma_cm_event_type of the installed rdma_cma.h, in enum order.
const cm_row* cm_table(size_t* n);
// The row for an event; an unknown value gets a synthetic "unknown" row
// (outcome internal, logged).
const cm_row& cm_row_for(int event);
const char* cm_outcome_name(cm_outcome o);

// What one rdma_cm event means to evd (pure: no rdma-core calls).
struct cm_action {
    const cm_row* row = nullptr;
    int prov_errno = 0;            // rdma_cm's status, kept verbatim
    bool peer_reject = false;      // REJECTED by the peer's fi_reject (not transport)
    bool data_ok = true;           // private data carried a valid evd header
    const uint8_t* data = nullptr; // user bytes inside the event's private data
    size_t data_len = 0;
};
// IB CM reject reason rdma_cm reports as status when the peer's
// application rejected (consumer-defined); 8 = no listener on the port.
inline constexpr int kRejConsumer = 28;
inline constexpr int kRejNoListener = 8;

static_assert(kRejConsumer == FI_EVD_CM_REJ_CONSUMER && kRejNoListener == FI_EVD_CM_REJ_NO_LISTENER);
static_assert(kCmDataMax == FI_EVD_CM_DATA_MAX);

cm_action cm_translate(const struct rdma_cm_event& ev);

// ------------------------------------------------------------------ channels
// The lock of the EQ -> channel table and of every channel's refs
// (docs/locking.md).
mutex& cm_chan_table_lock();

struct cm_chan {
    cm_channel_ptr ch;
    eq* q = nullptr;
    mutex mu;  // dispatch vs. owners detaching (order: cm_chan::mu -> ep::mu)
    int refs EVD_GUARDED_BY(cm_chan_table_lock()) = 0;
    eq_source src;  // fd = ch->fd, registered with q
    // Deadlines of the endpoints on this channel (cm_deadline.h): connection
    // setup, the progress probe of a connected endpoint (probe.h), or the
    // next step of a resumable endpoint's outage (msg/ep_outage.h); a
    // timerfd armed at the earliest, an EQ source of q. One per endpoint.
    // What a deadline is for. One per endpoint: a later one replaces it,
    // except that nothing but an outage step replaces an outage step, and a
    // keepalive replaces only a setup deadline or a keepalive.
    enum class due_kind : uint8_t { keepalive, setup, probe, outage };
    struct deadline {
        msg_ep* e;
        std::chrono::steady_clock::time_point at;
        due_kind kind;
    };
    // ids a handler let go beyond the one it returns (ep_exchange.cpp):
    // destroyed by dispatch and the timer once mu is dropped
    std::vector<cm_id_ptr> dead EVD_GUARDED_BY(mu);
    mutex dl_mu;  // guards deadlines (after mu when both are taken)
    std::vector<deadline> deadlines EVD_GUARDED_BY(dl_mu);
    fd_owner timer;  // timerfd (cm_deadline.cpp)
    eq_source timer_src;
};

// Channel of EQ q (created and registered with q on first use); +1 ref.
// nullptr with *err set on failure.
cm_chan* cm_chan_get(eq* q, int* err);
void cm_chan_put(cm_chan* chan);
// Another id now lives on chan: +1 ref, with room for its deadline
// (cm_deadline_reserve). -FI_ENOMEM (no ref taken) when there is none.
int cm_chan_ref(cm_chan* chan);
// No more dispatch of id's events to its owner: the context is cleared under
// the channel's lock, so a dispatch already running has finished, and later
// events of id are acknowledged and dropped. For an owner about to go.
void cm_detach_owner(cm_chan* chan, struct rdma_cm_id* id) EVD_EXCLUDES(chan->mu);
// rdma_connect/rdma_accept parameters evd uses for every connection, with
// len bytes of private data (header and user data, cm_pack) and the
// transport retry count cm_retry_count chose.
void cm_fill_conn_param(struct rdma_conn_param* p, const uint8_t* data, size_t len,
                        uint8_t retry_count);
// The retry count a connection on a device with this vendor id asks for
// (it governs both ends' QPs: the passive side takes the request's):
// FI_EVD_RETRY_COUNT, or when unset 7, except 6 on Soft-RoCE, whose
// completer takes 7 as "retry forever" (a peer that died would never be
// noticed, rxe_comp.c).
uint8_t cm_retry_count(uint32_t vendor_id);
constexpr uint32_t kSoftRoceVendorId = 0xffffff;  // rxe's ibv_device_attr.vendor_id
// A new RC id on chan whose events go to owner: 0, or a negative FI_E* code
// (logged) with *out left empty.
int cm_create_id(cm_chan* chan, cm_owner* owner, cm_id_ptr* out);

// An id a handler lets go (its context cleared), destroyed by whoever holds
// chan->mu once they drop it (dispatch, the deadline timer). Never throws:
// without memory the id is destroyed at provider exit instead, with a warning.
void cm_chan_bury(cm_chan* chan, cm_id_ptr id) EVD_REQUIRES(chan->mu);
// A handler lets go of two ids and may return one: a (or b when there is
// no a) is returned, the other buried.
cm_id_ptr cm_chan_keep_one(cm_chan* chan, cm_id_ptr a, cm_id_ptr b) EVD_REQUIRES(chan->mu);
// Posts an error record for fid f (context = f->context) to q.
int cm_post_err(eq* q, struct fid* f, int err, int prov_errno, const void* data, size_t len);
// Posts FI_CONNREQ / FI_CONNECTED / FI_SHUTDOWN with data after the record.
int cm_post_cm(eq* q, uint32_t event, struct fid* f, struct fi_info* info, const void* data,
               size_t len);

// Counters for tests and fi_evd(7) (debugging).
struct cm_stats {
    std::atomic<uint64_t> events{0};       // rdma_cm events read
    std::atomic<uint64_t> orphaned{0};     // events for an id nobody owns anymore
    std::atomic<uint64_t> bad_connreq{0};  // requests rejected for malformed data
    std::atomic<uint64_t> failed{0};       // events whose handler failed (no memory)
};
cm_stats& cm_get_stats();

// ------------------------------------------------------------------ handlers
// Called by the channel's progress with cm_chan::mu held; return an id to
// destroy after the event is acknowledged (or nothing).
cm_id_ptr pep_cm_event(pep* p, struct rdma_cm_event* ev, const cm_action& a, cm_chan* chan);
cm_id_ptr connreq_cm_event(connreq* r, struct rdma_cm_event* ev, const cm_action& a);
cm_id_ptr ep_cm_event(msg_ep* e, struct rdma_cm_event* ev, const cm_action& a);

// Sockaddr length by family (0 if unknown).
size_t cm_addrlen(const struct sockaddr* sa);
// Copies an address out for fi_getname/fi_getpeer (-FI_ETOOSMALL semantics).
int cm_copy_addr(const struct sockaddr* sa, void* addr, size_t* addrlen);
// fi_getopt/fi_setopt of a passive or active MSG endpoint: FI_OPT_CM_DATA_SIZE
// (kCmDataMax) is read-only, anything else -FI_ENOPROTOOPT.
int cm_getopt(int level, int optname, void* optval, size_t* optlen);
int cm_setopt(int level, int optname);

}  // namespace evd
