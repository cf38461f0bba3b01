// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Device contexts: one per RDMA device of the process, shared by every domain
// on that device. librdmacm's ibv_context of the device names it (rdma_cm ids
// carry it) and is only ever queried; evd creates its PDs, CQs, QPs, SRQs and
// MRs on a context it opens itself (ibv_open_device), reads that context's
// async fd (one reader, serialized) and dispatches each event through
// async.cpp's translation table to the object registered for it. librdmacm's
// contexts belong to every user of librdmacm in the process: evd never reads
// their async fds or changes their flags.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "eq/eq.h"
#include "evd.h"
#include "lock.h"
#include "owners.h"

namespace evd {

struct eq;
struct eq_source;

// What an async event about one rdma-core object is delivered to.
struct async_target {
    struct fid* fid = nullptr;   // the evd object's fid (ep, cq, srx, domain)
    void* context = nullptr;     // that fid's user context
    // The EQ to deliver to, resolved at dispatch time (e.g. the EP's bound EQ,
    // else its domain's EQ). May return nullptr: the event is then counted as
    // undeliverable and logged.
    eq* (*route)(void* owner) = nullptr;
    void* owner = nullptr;       // the evd object, passed to route()
    // Optional consequence hook run after delivery (e.g. disable an EP on a
    // fatal QP event). Runs with the registry lock held: must not block.
    void (*consequence)(void* owner, const struct ibv_async_event& ev) = nullptr;
    // Endpoints only (async.cpp, one-terminal-event rule): called under the
    // registry lock before a terminal async record (QP_FATAL, QP_REQ_ERR,
    // QP_ACCESS_ERR, DEVICE_FATAL) is posted. Atomically marks the endpoint as
    // having had its one terminal event and returns true; returns false if it
    // already had one (FI_SHUTDOWN, a fatal completion, DEVICE_REMOVAL...), and
    // then async posts nothing for it. nullptr: no terminal semantics.
    bool (*claim_terminal)(void* owner) = nullptr;
    // Flags of the EQ binding the record goes to (fi_ep_bind(ep, eq, flags)):
    // FI_EVD_NOTIFY_ASYNC opts in to async FI_NOTIFY records. When the routed
    // EQ is a domain's EQ, that domain's eq_flags count too (async.cpp).
    uint64_t eq_flags = 0;
};

// The target of an evd object with a fid (its fid and context, set by
// fid_init) whose records go where `route` says.
template <class T>
inline async_target async_target_of(T* obj, eq* (*route)(void* owner)) noexcept {
    async_target t;
    t.fid = &obj->fid.fid;
    t.context = obj->fid.fid.context;
    t.route = route;
    t.owner = obj;
    return t;
}

struct devctx {
    // librdmacm's context (the one rdma_cm ids on this device carry): matched
    // against ids and queried, never read from, changed or closed by evd.
    struct ibv_context* verbs = nullptr;
    // evd's own context on the same device (ibv_open_device): every verbs
    // object evd creates lives here, and its async fd is the one evd reads.
    // Closed when the device is released (the kernel can then finish a
    // device removal).
    ibv_context_ptr ctx;
    std::string name;                     // ibv_get_device_name()
    bool iwarp = false;                   // transport_type is IBV_TRANSPORT_IWARP
    bool atomics = false;                 // atomic_cap is not IBV_ATOMIC_NONE (atomic_table.h)
    struct ibv_device_attr_ex attr {};
    mutex port_mu;  // guards `ports` refreshes
    std::vector<struct ibv_port_attr> ports EVD_GUARDED_BY(port_mu);  // index 0 = port 1

    mutex reg_mu;  // guards the maps below and the domain list
    std::unordered_map<const void*, async_target> qps EVD_GUARDED_BY(reg_mu);
    std::unordered_map<const void*, async_target> cqs EVD_GUARDED_BY(reg_mu);
    std::unordered_map<const void*, async_target> srqs EVD_GUARDED_BY(reg_mu);
    std::unordered_map<const void*, async_target> wqs EVD_GUARDED_BY(reg_mu);
    // evd::domain* on this device (port/device events)
    std::vector<void*> domains EVD_GUARDED_BY(reg_mu);

    mutex read_mu;  // one reader of the async fd at a time
    std::atomic<uint64_t> undeliverable{0};
    std::atomic<uint64_t> delivered{0};
    std::atomic<uint64_t> async_events{0};      // events read (async.cpp; also the err_data seq)
    std::atomic<uint64_t> async_suppressed{0};  // notifications nobody opted in to (async.cpp)

    // --- private to devctx.cpp
    std::once_flag inline_once;    // max_inline is probed once
    uint32_t max_inline = 0;
    std::once_flag inline_ud_once;  // the same for a UD QP, probed at the first DGRAM getinfo
    uint32_t max_inline_ud = 0;
    std::atomic<bool> nonblock{false};  // async fd made O_NONBLOCK (retried until it is)
    struct attachment {            // one per EQ reading this device's async fd
        eq* q = nullptr;
        int count = 0;
        std::unique_ptr<eq_source> src;
    };
    mutex attach_mu;
    std::vector<attachment> attached EVD_GUARDED_BY(attach_mu);
    // Lifetime (guarded by the table's lock, see devctx.cpp): holders (domains,
    // an fi_getinfo describing the device), whether the device is gone, and
    // whether evd gave its librdmacm reference back (verbs is then nullptr).
    int users = 0;
    std::atomic<bool> dead{false};
    bool released = false;
};

// Device lifetime. evd holds librdmacm's device lists (rdma_get_devices) only
// while they reference a device that is alive or still used by evd. When a
// device disappears (DEVICE_FATAL, or it is no longer listed by librdmacm),
// its devctx is marked dead: lookups skip it, and once its last user let go
// evd frees the lists that referenced it, so librdmacm can close the context
// and the kernel can finish removing the device. The devctx struct itself
// stays allocated until provider cleanup (pointers to it never dangle), with
// verbs == nullptr and ctx closed after the release.
//
// devctx_by_name: a live device by name, HELD (users + 1): the caller must
// devctx_put() it (a domain does so on close). nullptr if none.
// devctx_all: every live device, each HELD: devctx_put_all() them.
// devctx_get: the live device of this context, NOT held (lookups only).
devctx* devctx_get(struct ibv_context* verbs);
devctx* devctx_by_name(const char* name);
std::vector<devctx*> devctx_all();  // every device librdmacm can see
void devctx_put(devctx* d) noexcept;  // last user: re-reads the device list, releases dead ones
void devctx_put_all(const std::vector<devctx*>& v) noexcept;
void devctx_cleanup() noexcept;     // provider cleanup: frees the table

// Re-reads every port (ibv_query_port) and returns a copy of the result.
std::vector<struct ibv_port_attr> devctx_refresh_ports(devctx* d);
// The port's state as the device reports it now (ibv_query_port): true when
// it is ACTIVE, false when it is not or cannot be read.
bool port_active_now(struct ibv_context* verbs, uint8_t port);
// Largest max_inline_data an RC QP accepts on this device (probed once by
// creating QPs; 0 when the device inlines nothing).
uint32_t devctx_max_inline(devctx* d);
// The same for a UD QP (FI_EP_DGRAM's inject size).
uint32_t devctx_max_inline_ud(devctx* d);

// Reads and dispatches every pending async event (non-blocking). Safe from
// any thread; concurrent callers skip while another one reads.
void devctx_poll_async(devctx* d);

// Makes `q` read this device's async fd: the fd joins q's wait fd and q's
// progress drains it (refcounted per (device, EQ) pair). Domains call it on
// fi_domain_bind(EQ); endpoints/CQs bound to another EQ call it for theirs.
int devctx_attach_eq(devctx* d, eq* q);
void devctx_detach_eq(devctx* d, eq* q);

// Registration (call before the verbs object may raise events, unregister
// before destroying it).
void devctx_register(devctx* d, std::unordered_map<const void*, async_target> devctx::*map,
                     const void* key, const async_target& t);
void devctx_unregister(devctx* d, std::unordered_map<const void*, async_target> devctx::*map,
                       const void* key);

}  // namespace evd
