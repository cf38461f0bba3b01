// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Active endpoints (fi_endpoint(3), fi_cm(3)) and MSG listeners. What every
// active endpoint is (ep) and does the same way: fi_endpoint in
// ep_open.cpp, binds and fi_enable in ep_control.cpp, fi_close in
// ep_close.cpp, data-path ops in ep_data.cpp. An FI_EP_MSG endpoint
// (msg_ep): connection calls in ep_msg.cpp, its connection state machine in
// ep_cm.cpp, its QP in ep_qp.cpp; listeners and connection requests in
// pep.cpp; the rdma_cm channels in cm.cpp. A datagram endpoint (ud_ep):
// dgram/ep_ud.cpp, dgram/ep_ud_data.cpp.
//
// How the control half (ep_control.cpp, ep_msg.cpp) and the data path
// (ep_data.cpp) share an endpoint:
//  * ep_open() makes the endpoint as its kind's type, sets fid.fid.ops /
//    fid.ops / fid.cm and calls ep_data_init(ep) once, which sets fid.msg,
//    fid.rma and fid.atomic (ep_atomic.cpp) and may use ep->dp (its own
//    state); a datagram endpoint then gets its own tables (ep_ud_set_ops).
//  * fi_ep_bind: the control half handles FI_CLASS_EQ, FI_CLASS_CQ (cq.h contract:
//    fills tx_cq/rx_cq/tx_flags/rx_flags, holds cq_bind_ref) and
//    FI_CLASS_SRX_CTX (srx_fid, srx_bind_ref); FI_CLASS_CNTR is handed to
//    ep_data_bind() (ep_counters.cpp), which validates the counter, fills
//    the *_cntr fields and takes its refs; ep_data_close() drops them at
//    fi_close.
//  * The kind's enable creates the QP (ibv_create_qp on the domain's PD; an
//    FI_EP_MSG endpoint's is handed to its cm_id) at fi_enable (or
//    fi_connect/fi_accept), with send_cq = cq_ibv(tx_cq), recv_cq =
//    cq_ibv(rx_cq), srq = srx_ibv(srx_fid). Once ep->qp is non-null (release
//    store on qp_ready) the data path may post to it. The kind's close
//    destroys it after ep_close_data(ep), which drops the data path's refs.
//  * Terminal-event rule: each ep delivers at most one terminal event
//    (FI_SHUTDOWN or a terminal error). Anyone that sees the end (a fatal
//    completion, an async QP event, rdma_cm) calls ep_terminal_error() (or
//    ep_claim_terminal() and posts itself only when it returns true).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

#include "cm/cm.h"  // cm_chan: connreq::id is guarded by its channel's lock
#include "cq/cq.h"  // wr_id_suppressed
#include "dgram/ud_addr.h"
#include "evd.h"
#include "lock.h"
#include "msg/qp_pool.h"
#include "owners.h"
#include "resume/resume_wire.h"  // token_t

namespace evd {

struct domain;
struct eq;
struct cq;    // data path (cq.cpp), opaque here
struct cntr;  // data path (cntr.cpp), opaque here
struct cm_chan;
struct connreq;
struct av;
struct ud_listener;
struct ep_dp;  // ep_dp.h
struct resume_tokens;  // pep_resume.h
struct ep_kind;  // below
extern const ep_kind kMsgKind;
struct ep_dp_free {
    void operator()(ep_dp* d) const noexcept;
};

// What an rdma_cm_id's context points at (cm.cpp dispatches on it).
enum class cm_owner_kind : uint32_t { pep = 1, connreq, ep, linger };
// `self` is the object holding it (cm.cpp dispatches to it).
struct cm_owner {
    cm_owner_kind okind;
    void* self;
};

// Connection state of an active endpoint.
enum class ep_state : int {
    idle = 0,      // opened, maybe bound/enabled, not connecting
    resolving,     // fi_connect: address/route resolution in progress
    connecting,    // rdma_connect sent, waiting for ESTABLISHED/REJECTED
    accepting,     // fi_accept called, waiting for ESTABLISHED
    connected,     // FI_CONNECTED delivered
    shutdown,      // terminal FI_SHUTDOWN delivered (or fi_shutdown in flight)
    error,         // terminal error delivered
};

struct pep : object_head<struct fid_pep, kind::pep> {
    cm_owner owner{cm_owner_kind::pep, this};
    struct fabric* fab = nullptr;
    struct fi_info* info = nullptr;       // fi_dupinfo of what was opened
    cm_id_ptr id;                         // created at bind (on the EQ's channel)
    eq* eq_bound = nullptr;
    cm_chan* chan = nullptr;
    int backlog EVD_GUARDED_BY(mu) = 0;   // fi_control(FI_BACKLOG)
    bool listening EVD_GUARDED_BY(mu) = false;
    std::atomic<bool> dead{false};        // DEVICE_REMOVAL seen: nothing more
    mutex mu;
    struct connreq* reqs EVD_GUARDED_BY(mu) = nullptr;  // every FI_CONNREQ handle it issued
    // The connections it accepted with a resume offer (pep_resume.h), made
    // at fi_listen; read by dispatch when a resume request arrives.
    resume_tokens* tokens = nullptr;
};

// The handle of an FI_CONNREQ: wraps the incoming rdma_cm_id until the app
// accepts (fi_endpoint adopts the id) or rejects it.
//
// Lifetime (see fi_evd(7), "Connection request handles"):
//  * refs: one held by the pep (dropped at fi_close(pep)), one by the ep that
//    adopted it (dropped when that ep binds its own EQ or closes). The memory
//    lives until both are gone, so fi_reject/fi_close/fi_endpoint on a handle
//    that was already answered are detected while its pep is open.
//  * st: pending -> adopted (fi_endpoint) | rejected (fi_reject, fi_close of
//    a pending handle) | ended (pep closed, or adoption found the peer gone).
//    Whoever moves it out of pending (CAS) owns the pending resources: id,
//    the chan ref and the eq_bind_ref.
//  * id is taken only under chan->mu (dispatch may destroy it when the peer
//    gives up before an answer).
enum class connreq_state : int { pending = 0, adopted, rejected, ended };

struct connreq {
    struct fid fid{0, nullptr, &unopened_fi_ops};  // fclass FI_CLASS_CONNREQ; first member
    cm_owner owner{cm_owner_kind::connreq, this};
    cm_chan* chan = nullptr;
    cm_id_ptr id EVD_GUARDED_BY(chan->mu);
    eq* eq_bound = nullptr;               // the pep's EQ (holds an eq_bind_ref)
    resume_tokens* tokens = nullptr;      // the pep's resume tokens (a ref; pep_resume.h)
    std::atomic<bool> gone{false};        // peer went away before accept
    std::atomic<int> st{static_cast<int>(connreq_state::pending)};
    std::atomic<bool> closed{false};      // fi_close(handle) was called
    std::atomic<int> refs{1};             // pep + adopting ep
    connreq* next = nullptr;              // the pep's list (pep::mu)
};

// Drops one reference; frees the handle at the last one. (pep.cpp)
void connreq_put(connreq* r);
// Moves r out of pending to `to`; true if this caller won. (pep.cpp)
bool connreq_claim(connreq* r, connreq_state to);
// After a successful claim: rejects (if reject) and destroys the id, drops
// the chan and EQ refs. Returns 0, or the error of the REJ with the data
// (destroying the id then rejects without it). (pep.cpp)
int connreq_release(connreq* r, bool reject, const void* data, size_t len);
const char* connreq_state_name(int st);

// What every active endpoint is, whatever its kind: its handle, bindings,
// QP and data-path state. An endpoint is made and freed as its kind's own
// type (msg_ep, ud_ep below; the destructor is protected, so nothing deletes
// it as an ep); ep_kind (below) says what differs.
struct ep : object_head<struct fid_ep, kind::ep> {
    refcount refs;
    domain* dom = nullptr;
    struct fi_info* info = nullptr;       // fi_dupinfo of what was opened (handle cleared)
    // --- what kind of endpoint it is (ep_kind below, `ekind`): set at fi_endpoint,
    // never changes.
    const ep_kind* ekind = nullptr;

    // --- events and state (ep_msg.cpp, ep_cm.cpp)
    std::atomic<eq*> eq_bound{nullptr};
    uint64_t eq_flags = 0;                // flags of fi_ep_bind(ep, eq, flags)
    std::atomic<int> state{static_cast<int>(ep_state::idle)};
    std::atomic<bool> terminal{false};    // one terminal event already posted
    std::atomic<uint64_t> suppressed{0};  // later terminal causes, dropped
    bool enabled = false;
    mutex mu;                             // serializes control calls on this ep

    // --- QP (created by the kind's fi_enable, used by the data path).
    // Written under mu; the data path reads it without a lock once qp_ready
    // is set (release/acquire), through ep_qp_of().
    ibv_qp_ptr qp EVD_GUARDED_BY(mu);  // destroyed by ep_destroy_qp
    qp_key qkey;    // what qp was made (or taken from the pool) for
    // A receive flush marker is queued behind the application's receives
    // (qp_flush.h), posted before the QP was moved to the error state; set
    // before the marker is posted. A receive posted after it (the data path
    // checks once its post succeeded) sets rq_after_marker: such a receive
    // may never be flushed, so the QP is not kept (qp_pool.h).
    std::atomic<bool> rq_marked{false};
    std::atomic<bool> rq_after_marker{false};
    // The connection ended (fi_shutdown, the peer's disconnect): the QP is on
    // its way to the error state and fi_recv refuses (ep_data.cpp), with or
    // without the QP pool's marker. Set under mu before rdma_disconnect.
    std::atomic<bool> rq_closed{false};
    std::atomic<bool> qp_ready{false};

    // --- bindings (CQ/SRX by ep_msg.cpp, counters by ep_data_bind)
    cq* tx_cq = nullptr;
    cq* rx_cq = nullptr;
    uint64_t tx_flags = 0;                // bind flags, e.g. FI_SELECTIVE_COMPLETION
    uint64_t rx_flags = 0;
    struct fid* srx_fid = nullptr;        // bound fi_srx_context (srx_ibv(srx_fid))
    cntr* send_cntr = nullptr;
    cntr* recv_cntr = nullptr;
    cntr* read_cntr = nullptr;
    cntr* write_cntr = nullptr;
    cntr* rem_read_cntr = nullptr;
    cntr* rem_write_cntr = nullptr;
    uint64_t op_flags_tx = 0;             // fi_control(FI_SETOPSFLAG) on FI_TRANSMIT
    uint64_t op_flags_rx = 0;             // ... on FI_RECV
    // The data path's own state (send signalling, counter slots; ep_dp.h),
    // ep_data.cpp's and ep_counters.cpp's alone; made by ep_data_init (fi_endpoint
    // fails without it, so the data path never finds it null),
    // dropped by ep_data_close.
    std::unique_ptr<ep_dp, ep_dp_free> dp;

  protected:
    explicit ep(const ep_kind* k) : ekind(k) {}
    ~ep() = default;
};

// An FI_EP_MSG endpoint: an RC QP driven by an rdma_cm id and its connection
// (ep_msg.cpp, ep_cm.cpp, ep_qp.cpp; linger.h, probe.h, cm_deadline.h).
struct msg_ep final : ep {
    msg_ep();
    cm_owner owner{cm_owner_kind::ep, this};
    cm_id_ptr id;
    connreq* creq = nullptr;              // adopted FI_CONNREQ handle (passive side)
    bool from_connreq = false;            // opened from an FI_CONNREQ info (fi_accept ok)
    bool keep_src_port = false;           // opened from a pep handle: connect from its port
    bool name_set = false;                // fi_setname: bind to exactly that address
    std::atomic<bool> gone{false};        // that request ended before fi_accept
    cm_chan* chan = nullptr;              // the channel `id` lives on
    bool disconnect_sent EVD_GUARDED_BY(mu) = false;  // rdma_disconnect already called
    bool migrating EVD_GUARDED_BY(mu) = false;  // fi_ep_bind(EQ) moves the id, mu released
    // rdma_cm's view of the connection (under mu, set by ep_cm_event): it was
    // established, and rdma_cm has since reported it over (DISCONNECTED, an
    // error, device removal). fi_close lingers while established and not over.
    bool cm_established EVD_GUARDED_BY(mu) = false;
    bool cm_disconnected EVD_GUARDED_BY(mu) = false;
    // ... and what ended it was a disconnect (DISCONNECTED with status 0),
    // not an error or the device's removal: the QP may be kept (qp_pool.h).
    bool cm_clean_end EVD_GUARDED_BY(mu) = false;
    bool cm_timewait_over EVD_GUARDED_BY(mu) = false;  // RDMA_CM_EVENT_TIMEWAIT_EXIT came
    // The kernel's CM has state for id: rdma_connect or rdma_accept was
    // called, or id came from a connection request. Destroying such an id
    // makes the CM send a message (REJ, DREQ), so fi_close keeps it while its
    // port is down (linger.h).
    bool cm_started EVD_GUARDED_BY(mu) = false;
    uint8_t conn_data[256];               // header + user data for rdma_connect
    size_t conn_data_len = 0;
    // A progress probe is posted and its deadline armed (probe.h).
    std::atomic<bool> probing{false};
    // A resumable connection's outage is under way (ep_outage.h): no probe is
    // posted, the outage's own steps run on the channel's timer.
    std::atomic<bool> in_outage{false};
    // The drain of the failed QP (ep_outage.cpp).
    struct outage_drain {
        bool on = false;          // begun: the QP is in the error state
        bool tx_posted = false;   // the send marker is queued
        bool rx_marker = false;   // a receive marker went in before the QP failed
        int want = 0;             // markers still to come out of the send CQ
        bool rx_seen = false;     // the receive marker came out (its own CQ)
        uint64_t t0_ms = 0;       // when the drain began
    };
    outage_drain drain EVD_GUARDED_BY(mu);
    uint64_t outage_t0_ms EVD_GUARDED_BY(mu) = 0;  // when the outage's first failure was handled
    // --- joining the peer again (ep_exchange.cpp)
    resume_tokens* rs_tokens = nullptr;  // passive: its listener's table (a ref), from the request
    cm_chan* rs_listen_chan = nullptr;   // passive: the listener's channel (compared only)
    bool rs_offered EVD_GUARDED_BY(mu) = false;  // resumable both ways: offer made / taken
    resume::token_t rs_token EVD_GUARDED_BY(mu){};
    struct sockaddr_storage rs_local EVD_GUARDED_BY(mu) {};  // the connection's addresses
    struct sockaddr_storage rs_peer EVD_GUARDED_BY(mu) {};
    // The attempt under way (active) or the request taken (passive): its
    // id (its events come to this endpoint: ep_cm_event tells it by
    // ev->id) and its QP, until the exchange moves the connection onto them.
    cm_id_ptr rid EVD_GUARDED_BY(mu);
    ibv_qp_ptr rqp EVD_GUARDED_BY(mu);
    uint32_t rgen EVD_GUARDED_BY(mu) = 0;           // its generation
    uint64_t r_peer_consumed EVD_GUARDED_BY(mu) = 0;  // passive: the request's count
    uint32_t r_refusal EVD_GUARDED_BY(mu) = 0;       // active: the peer's refusal, for the record
};

// An FI_EP_DGRAM endpoint (ep_ud.cpp, ep_ud_data.cpp): a UD QP, no id, no
// connection.
struct ud_ep final : ep {
    ud_ep();
    av* av_bound = nullptr;           // fi_ep_bind(AV); sends address it
    ud_name name{};                   // fi_getname (valid once enabled)
    int sgid_index = -1;              // the port's GID entry of the name
    ibv_ah_ptr self_ah;               // to itself: the closing flush's send marker
    ud_listener* listener = nullptr;  // answers SIDR for its IP and service (ud_cm.h)
    // Where the 40-byte header a UD receive starts with lands, never in
    // the user's buffer. Without FI_SOURCE one slot all receives share
    // (nobody reads it). With FI_SOURCE each receive takes the next
    // slot of a ring, and its wr_id is the slot, which keeps the user's
    // wr_id: the CQ finds the header and the context from the
    // completion itself, in error too, whatever the completion order.
    // The ring is larger than the receive queue plus the receive CQ plus
    // one poll batch, so a slot is never reused before the completion
    // of its last receive was read (ep_ud.cpp).
    struct rx_slot {
        uint8_t hdr[40];
        uint64_t wr_id;               // what the user's completion carries
    };
    std::unique_ptr<rx_slot[]> slots;
    ibv_mr_ptr slots_mr;
    uint32_t nslots = 1;
    bool source = false;              // FI_SOURCE: fi_cq_readfrom reports the sender
    mutex rx_mu;                      // FI_SOURCE: the ring's next slot, and the post
    uint64_t rx_posted EVD_GUARDED_BY(rx_mu) = 0;  // receives posted
    size_t max_msg = 0;               // payload limit (the port's MTU)
};

// What differs between the kinds of active endpoint, for the code every
// kind shares: it calls e->ekind's hooks, and reaches a kind's own state
// only through ep_msg()/ep_ud() (below). kMsgKind (ep_msg.cpp): a msg_ep,
// an RC QP driven by an rdma_cm id and its connection; kDgramKind
// (ep_ud.cpp): a ud_ep, a UD QP in RTS at fi_enable, no id.
struct ep_kind {
    const char* name;             // "FI_EP_MSG", "FI_EP_DGRAM"
    enum ibv_qp_type qp_type;     // IBV_QPT_RC, IBV_QPT_UD
    bool connected;               // has an rdma_cm id: fi_enable needs an EQ for its events
    int (*enable)(ep* e);         // fi_enable's QP, CQs checked, e->mu held
    // fi_close once nothing is bound to e: its kind's steps and those
    // every endpoint shares (ep_close_quiesce, ep_close_data,
    // ep_close_common), then frees e as its own type. 0 or -FI_E*.
    int (*close)(ep* e);
    const char* not_enabled;      // why fi_recv refuses before fi_enable (logged)
    // The closing flush's send marker needs an address: fills wr's, 0 or an
    // errno (may be null: none needed).
    int (*marker_dest)(ep* e, struct ibv_send_wr& wr);
};
extern const ep_kind kDgramKind;

// e as its kind's type: nullptr when it is not of that kind. The kind is
// fixed at fi_endpoint, so code that was handed e by its own kind's table or
// hook may rely on the answer.
inline msg_ep* ep_msg(ep* e) noexcept {
    return e && e->ekind == &kMsgKind ? static_cast<msg_ep*>(e) : nullptr;
}
inline ud_ep* ep_ud(ep* e) noexcept {
    return e && e->ekind == &kDgramKind ? static_cast<ud_ep*>(e) : nullptr;
}

// v within [lo, hi], as a QP size (ep_qp.cpp, ep_ud.cpp).
inline uint32_t clamp_u32(size_t v, uint32_t lo, uint32_t hi) noexcept {
    if (v < lo) return lo;
    if (v > hi) return hi;
    return static_cast<uint32_t>(v);
}

// The errno of an ibv_post_* failure. ibv_post_send(3) returns an errno
// value; libsiw returns it negated (a full send queue is -ENOMEM there).
inline int post_errno(int r) noexcept { return r < 0 ? -r : r; }

// The QP as the data path and the completion path see it: published by the
// release store on qp_ready (ep_create_qp, under mu) and read without the
// lock after an acquire load of it; taken away only at fi_close, after the
// data path's last call returned (fi_endpoint(3): no call may race fi_close).
inline ibv_qp* ep_qp_of(const ep* e) EVD_NO_LOCK_ANALYSIS { return e->qp.get(); }

inline ep_state ep_state_of(const ep* e) { return static_cast<ep_state>(e->state.load()); }
inline void ep_set_state(ep* e, ep_state s) { e->state.store(static_cast<int>(s)); }

// fabric op fi_passive_ep
int pep_open(struct fid_fabric* fab, struct fi_info* info, struct fid_pep** pep, void* context);
// domain op fi_endpoint
int ep_open(struct fid_domain* dom, struct fi_info* info, struct fid_ep** ep, void* context);

ep* ep_from_fid(struct fid* f);  // nullptr unless f is an evd active ep
// Sets a new endpoint's fid and ep ops, the ones every kind shares
// (ep_control.cpp); its kind then sets its own (cm ops, data ops).
void ep_set_ops(ep* e);
// fi_enable (FI_ENABLE, and fi_connect/fi_accept of an endpoint not enabled
// yet): its EQ (a connected kind) and CQs checked, its counters prepared,
// then its kind's enable. 0 once enabled (ep_control.cpp).
int ep_enable(ep* e) EVD_REQUIRES(e->mu);
// The cm ops of FI_EP_MSG endpoints (ep_msg.cpp).
extern struct fi_ops_cm ep_msg_cm_ops;
// fi_ep_bind(ep, eq) of an FI_EP_MSG endpoint: its id is made on the EQ's
// rdma_cm channel, or moved there (one adopted from a connection request
// lives on the listener's); ep_control.cpp's bind does the rest (ep_msg.cpp).
int ep_msg_bind_eq(msg_ep* e, eq* q) EVD_REQUIRES(e->mu);
// fi_close of an active endpoint (ep_close.cpp): its kind's close.
int ep_close(struct fid* f);
// The steps of fi_close every kind takes (ep_close.cpp), in this order:
// ep_close_quiesce: the QP's queued work completes in its CQs (true when
// the flush came out in full), then no async event or fatal completion is
// routed to e any more; ep_close_data: the data path lets go (its counter
// refs; no post reaches the QP); ep_close_common, after the QP is gone:
// what e holds of other objects (CQs, SRX, EQ) is let go, the EQs forget
// e's events, its info is freed.
bool ep_close_quiesce(ep* e) EVD_EXCLUDES(e->mu);
void ep_close_data(ep* e);
void ep_close_common(ep* e);
// fi_close of an FI_EP_MSG endpoint (ep_close.cpp).
int ep_msg_close(ep* e);
// The adopted FI_CONNREQ handle is let go: the id now lives on e's own
// binding, or e closes (ep_msg.cpp).
void ep_drop_connreq(msg_ep* e);

// ---- provided by ep_data.cpp (data path)
int ep_data_init(ep* e);                                    // set fid.msg, fid.rma, fid.atomic; -FI_ENOMEM
// ---- provided by ep_counters.cpp (the endpoint's counters)
int ep_data_bind(ep* e, struct fid* bfid, uint64_t flags);  // FI_CLASS_CNTR
void ep_data_close(ep* e);                                  // drop refs taken by ep_data_bind
// fi_enable, before the CQ check: prepares counting for an endpoint with
// counters (cntr.h) and gives a counter-only direction an internal CQ.
int ep_data_enable(ep* e);
struct cntr_route;
// The endpoint's counter route (cntr.h); nullptr when it has no counter.
cntr_route* ep_data_route(ep* e);

// Posts one send-queue work request built by the caller (ep_data.cpp,
// ep_atomic.cpp): decides its signaling and wr_id (comp: the user wants a
// completion; no_ctx: never report success, fi_inject*), counts it as `kind`
// when counters are bound (cntr.h), posts it. -FI_EAGAIN when the send queue
// (or the counter slot table) is full, -FI_EOPBADSTATE without a QP.
// more (FI_MORE): held in the endpoint's batch, posted with the next request
// posted without it (post_batch.h); resumable endpoints post at once.
enum class tx_kind : uint8_t;
ssize_t ep_post_sq(ep* e, struct ibv_send_wr& wr, tx_kind kind, bool comp, bool no_ctx,
                   void* context, bool more = false);
// The user wants a completion for a transmit with these flags (selective
// completion, FI_COMPLETION).
bool ep_tx_completion(ep* e, uint64_t flags);
// Bytes a send can carry inline on e (tx_attr->inject_size).
size_t ep_max_inline(ep* e);
// The atomic ops of MSG endpoints (ep_atomic.cpp).
extern struct fi_ops_atomic ep_atomic_ops;

// ---- receives, what every endpoint's fi_recv shares (ep_data.cpp)
// The first steps of every fi_recv: e takes receives itself (no shared
// receive context) and has its QP, then sge[first..] is filled from
// iov/desc (sge[0..first) are the kind's own, a UD endpoint's header).
// 0, or the error fi_recv returns (-FI_EOPBADSTATE, -FI_EINVAL), logged.
ssize_t ep_rx_prepare(ep* e, const struct iovec* iov, void* const* desc, size_t count,
                      struct ibv_sge* sge, size_t first, int& nsge);
// A receive's wr_id: its context, or the marker of a completion nobody
// asked for (selective completion).
inline uint64_t ep_rx_wr_id(const ep* e, uint64_t flags, void* context) {
    const bool comp = !(e->rx_flags & FI_SELECTIVE_COMPLETION) || (flags & FI_COMPLETION);
    return comp ? reinterpret_cast<uintptr_t>(context) : wr_id_suppressed();
}
// fi_recv's answer to a failed ibv_post_recv (its errno r): -FI_EAGAIN when
// the queue is full, else the error, with a warning naming `what`.
ssize_t ep_rx_post_failed(int r, const char* what);

// ---- the QP (ep_qp.cpp)
// How e's QP is registered for async events (devctx.h): its fid, context,
// EQ routing and terminal claim.
struct async_target;
async_target ep_async_target(ep* e);
// What every endpoint's QP is made with: its CQs (and SRQ), its type, its
// queue and SGE sizes from the endpoint's attributes within the device's
// limits; hdr_sge receive SGEs ahead of the user's (a UD receive's header).
// -FI_ENOCQ without both CQs.
int ep_qp_init_attr(ep* e, enum ibv_qp_type type, uint32_t hdr_sge, struct ibv_qp_init_attr* a);
// Creates e's RC QP with its CQs (and SRQ) bound, registers it for async
// events and fatal completions, and publishes it to the data path
// (qp_ready). Caller holds e->mu. The QP is made on the domain's PD, on evd's
// own device context (devctx.h: never librdmacm's), with the peer's ECE
// applied. An id already on a device (a connection request, an endpoint bound
// by fi_setname or to its pep's port) gets it at once (id->qp, INIT as
// rdma_cm says); an endpoint not yet bound hands it to its id at
// ADDR_RESOLVED (ep_cm_event), which spares the address queries binding
// first would cost. From then on rdma_cm moves it (RTR, RTS, ERR).
int ep_create_qp(msg_ep* e) EVD_REQUIRES(e->mu);
// Takes e->qp back from its id (id->qp) and destroys it. Caller holds e->mu,
// after qp_ready was cleared.
void ep_destroy_qp(msg_ep* e) EVD_REQUIRES(e->mu);
// A QP for the exchange (ep_exchange.cpp) on `id`, which is on e's device:
// made like e's own, in INIT for id, its ECE agreed, handed to id
// (id->qp), registered for async events and attached to e's CQs (which
// route its completions to the same ledgers). 0 with *out set, or -FI_E*.
int ep_make_resume_qp(msg_ep* e, struct rdma_cm_id* id, ibv_qp_ptr* out) EVD_REQUIRES(e->mu);
// Lets go of a QP the exchange no longer needs (the failed one, or an
// attempt's): out of id's hands and the async table, detached from e's CQs
// keeping the ledgers (cq_detach_qp_keep), destroyed.
void ep_drop_resume_qp(msg_ep* e, ibv_qp_ptr qp, struct rdma_cm_id* id) EVD_REQUIRES(e->mu);

// ---- the connection state machine (ep_cm.cpp), callable from anywhere
// Moves e to ep_state::error and posts its terminal error record (err is a
// positive FI_E* code) to its EQ; the caller has claimed the terminal event.
void ep_post_terminal_err(ep* e, int err, int prov_errno, const void* data, size_t len);
// Posts the endpoint's one terminal error (err = positive FI_E* code) to its
// EQ unless a terminal event was already delivered; later calls are counted
// and logged at debug. Never blocks; safe from any thread.
void ep_terminal_error(ep* e, int err, int prov_errno, const char* why);
// True exactly once per ep: the caller then owns posting the terminal event.
bool ep_claim_terminal(ep* e);
// Same, in the shape of async_target::claim_terminal (owner = the ep).
bool ep_claim_terminal_cb(void* owner);

// ---- ep_msg.cpp
// The EQ an ep's events go to: its bound EQ, else its domain's EQ.
eq* ep_route_eq(void* owner);

// ---- FI_EP_DGRAM endpoints (ep_ud.cpp, ep_ud_data.cpp)
// The Q_Key of evd's UD QPs: rdma_cm's RDMA_UDP_QKEY, which its SIDR tells
// peers.
inline constexpr uint32_t kUdQkey = RDMA_UDP_QKEY;
// fi_endpoint of an FI_EP_DGRAM info: the new endpoint's own ops.
void ep_ud_set_ops(ud_ep* e);
// fi_ep_bind(ep, av): the AV its sends address (one, of its domain).
int ep_ud_bind_av(ep* e, struct fid* bfid);
// A completion of e's UD QP, under its CQ's lock (cq.cpp): a receive's
// wr_id is turned back into the user's (FI_SOURCE slots, in error too);
// a successful receive loses the header from its length, and true is
// returned with the sender's fi_addr_t in *from (FI_ADDR_NOTAVAIL without
// FI_SOURCE or when the AV does not hold it).
bool ep_ud_completion(ud_ep* e, struct ibv_wc& wc, fi_addr_t* from);
extern struct fi_ops_msg ep_ud_msg_ops;
extern struct fi_ops_cm ep_ud_cm_ops;
// The endpoint behind an fi_ep of the data-path tables (every caller is in
// a table set on active endpoints only), and the most iovs one posted work
// request takes (the SGE array on the stack; the QP enforces its own limit).
inline ep* ep_of(struct fid_ep* f) { return self_of<ep>(f); }
constexpr size_t kMaxIov = 32;
// ep_data.cpp's helpers the UD data path shares: sge list from iov/desc
// (zero-length entries skipped; `inl`: no descriptors needed).
ssize_t ep_fill_sges(const struct iovec* iov, void* const* desc, size_t count, bool inl,
                     struct ibv_sge* sge, size_t max_sge, int& nsge, size_t& total);

}  // namespace evd
