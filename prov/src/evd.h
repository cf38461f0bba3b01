// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evd: private header shared by every file of the provider.
//
// Conventions (docs/design.md):
//  * every libfabric entry point is a small function near the bottom of its
//    object's .cpp; the control path's are wrapped in evd::guard() so no
//    exception escapes; the data path's (the msg, rma and atomic ops of
//    endpoints and shared receive contexts) allocate nothing and call
//    nothing that throws, so they are not (docs/design.md, "Errors and
//    allocation");
//  * every object embeds its libfabric fid first and carries an evd::kind tag,
//    checked by from_fid<T>() before a fid handed in by the user is trusted;
//  * objects count the children bound to them (refs) so fi_close() can answer
//    -FI_EBUSY while anything still points at them.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <source_location>
#include <type_traits>
#include <utility>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include "api.h"
#include "rdma/fi_ext_evd.h"

namespace evd {

// ------------------------------------------------------------------ identity
inline constexpr const char* kProvName = "evd";
// The libfabric API evd implements (the newest of the headers it is built
// with, api.h), and evd's own version (major.minor).
inline constexpr uint32_t kFiVersion = api::kHeaders;
inline constexpr uint32_t kProvVersion = FI_VERSION(0, 1);

extern struct fi_provider g_prov;  // prov.cpp

// ------------------------------------------------------------------ logging
// A function on the data path inlined into each caller, so that what the
// caller passes as constants (one iov, the opcode) folds away.
#define EVD_ALWAYS_INLINE inline __attribute__((always_inline))
#define EVD_WARN(subsys, ...) FI_WARN(&::evd::g_prov, subsys, __VA_ARGS__)
#define EVD_INFO(subsys, ...) FI_INFO(&::evd::g_prov, subsys, __VA_ARGS__)
#define EVD_DBG(subsys, ...) FI_LOG(&::evd::g_prov, FI_LOG_DEBUG, subsys, __VA_ARGS__)

// ------------------------------------------------------------------ tunables
// Read once at fi_prov_ini (prov.cpp); each is an FI_EVD_* variable shown by
// `fi_info -e`.
struct params {
    size_t eq_size = 1024;          // FI_EVD_EQ_SIZE: default EQ depth when attr.size == 0
    size_t eq_max_write = 4096;     // FI_EVD_EQ_MAX_WRITE: largest fi_eq_write payload (bytes)
    int cm_timeout_ms = 2000;       // FI_EVD_CM_TIMEOUT: address/route resolution timeout
    size_t cq_size = 4096;          // FI_EVD_CQ_SIZE: default CQ depth when attr.size == 0
    size_t inject_size = 0;         // FI_EVD_INJECT_SIZE: 0 = device's max_inline_data
    size_t tx_size = 384;           // FI_EVD_TX_SIZE: default tx_attr->size (clamped to max_qp_wr); 0 = max_qp_wr
    size_t rx_size = 384;           // FI_EVD_RX_SIZE: default rx_attr->size (clamped to max_qp_wr); 0 = max_qp_wr
    bool fail_fast = false;         // FI_EVD_FAIL_FAST: new domains end connections on PORT_ERR
    int flush_timeout_ms = 1000;    // FI_EVD_FLUSH_TIMEOUT: fi_close waits this long for a QP's flush
    int connect_timeout_ms = 0;     // FI_EVD_CONNECT_TIMEOUT: connect/accept to ESTABLISHED; 0 = rdma_cm's
    int probe_timeout_ms = 2000;    // FI_EVD_PROBE_TIMEOUT: progress probe after PORT_ACTIVE; 0 = none
    bool mr_cache = true;           // FI_EVD_MR_CACHE: domains cache registrations (mr_cache.h)
    size_t mr_cache_max_count = 1024;  // FI_EVD_MR_CACHE_MAX_COUNT: entries per domain; 0 = no cache
    size_t mr_cache_max_size = 0;   // FI_EVD_MR_CACHE_MAX_SIZE: bytes per domain; 0 = RAM / CPUs / 2
    size_t qp_pool_size = 256;      // FI_EVD_QP_POOL_SIZE: closed QPs a domain keeps for reuse; 0 = none
    int qp_pool_timewait_ms = 10000;  // FI_EVD_QP_POOL_TIMEWAIT: longest wait for TIMEWAIT_EXIT
    int retry_count = -1;           // FI_EVD_RETRY_COUNT: transport retries a connection asks
                                    // for (0..7); -1 = 7, but 6 on Soft-RoCE (cm.cpp)
    bool dgram = true;              // FI_EVD_DGRAM: fi_getinfo answers hints asking FI_EP_DGRAM
    int resume_timeout_ms = 0;      // FI_EVD_RESUME_TIMEOUT: new domains resume connections; 0 = no
    int resume_keepalive_ms = -1;   // FI_EVD_RESUME_KEEPALIVE: an idle resumable connection
                                    // proves its path this often; -1 = a tenth of its deadline
};
const params& get_params();

// ------------------------------------------------------------------ object tags
enum class kind : uint32_t {
    fabric = 0x65766430u,  // "evd0"
    domain,
    eq,
    cq,
    mr,
    pep,
    ep,
    wait,
    poll,
    srx,
    cntr,
    av,
};

// How a fid handed in by the application is recognised as evd's before
// anything beyond its struct fid is read: every fi_ops table of an evd
// object has .tostr = fid_tostr, and an object carries unopened_fi_ops
// (the same mark) from its construction until its open sets the real
// table. A foreign fid's own fi_ops is read only as far as its size says.
int fid_tostr(const struct fid* fid, char* buf, size_t len);
extern struct fi_ops unopened_fi_ops;
inline bool fid_is_evd(const struct fid* f) noexcept {
    return f && f->ops && f->ops->size >= offsetof(struct fi_ops, tostr) + sizeof f->ops->tostr &&
           f->ops->tostr == &fid_tostr;
}

// Every evd object the application holds derives from object_head: its fid
// comes first, so the handle the application holds is the head's address,
// and the tag says which object it is. The head alone is standard-layout,
// so a fid is reinterpreted only as a head; the object is then reached by
// static_cast from its base (never by layout assumptions about T).
template <class Fid, kind K>
struct object_head {
    using head_type = object_head;
    static constexpr kind kTag = K;
    Fid fid{{0, nullptr, &unopened_fi_ops}};  // the application's handle
    kind tag = K;  // cleared by retire()
};

// A fid handed in by the application as T, or nullptr when it is not one.
// The tag is read only once the fid is known to be evd's.
template <class T, class Fid>
inline T* from_fid(Fid* f) noexcept {
    if (!fid_is_evd(reinterpret_cast<const struct fid*>(f))) return nullptr;
    auto* h = reinterpret_cast<typename T::head_type*>(f);
    if (h->tag != T::kTag) return nullptr;
    return static_cast<T*>(h);
}

// For entry points reached only through an evd object's own ops tables
// (fi_cq_read(cq, ...) calls cq->ops->read(cq, ...), fi_send(ep, ...) calls
// ep->msg->send(ep, ...)): the fid is the object whose table it is, so
// nothing of it is read to recognise it, which keeps the data path to its
// own loads. Entry points that take another object's fid (binds, fi_poll_add,
// fi_trywait's list, wait set members) use from_fid.
template <class T, class Fid>
inline T* self_of(Fid* f) noexcept {
    return static_cast<T*>(reinterpret_cast<typename T::head_type*>(f));
}

// ------------------------------------------------------------------ entry guard
// Where an entry point is: std::source_location, or (clang 14 with
// libstdc++ 12, which the fuzz build uses, lacks it) the same from the
// compiler's builtins.
#if defined(__cpp_lib_source_location)
using code_location = std::source_location;
#else
struct code_location {
    const char* fn = "";
    static constexpr code_location current(const char* f = __builtin_FUNCTION()) noexcept {
        code_location l;
        l.fn = f;
        return l;
    }
    constexpr const char* function_name() const noexcept { return fn; }
};
#endif

// Runs an entry point body; an exception never crosses into libfabric. What
// was caught is logged with the entry point's name, then returned as an
// error code: -FI_ENOMEM for an allocation failure, -FI_EOTHER otherwise.
template <class F>
inline auto guard(F&& f, code_location at = code_location::current()) noexcept
    -> decltype(f()) {
    try {
        return f();
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_CORE, "%s: out of memory\n", at.function_name());
        return static_cast<decltype(f())>(-FI_ENOMEM);
    } catch (const std::exception& e) {
        EVD_WARN(FI_LOG_CORE, "%s: internal error: %s\n", at.function_name(), e.what());
        return static_cast<decltype(f())>(-FI_EOTHER);
    } catch (...) {
        EVD_WARN(FI_LOG_CORE, "%s: internal error (unknown exception)\n", at.function_name());
        return static_cast<decltype(f())>(-FI_EOTHER);
    }
}

// Converts a negative/positive errno from rdma-core into a negative FI_E* code.
inline int fi_err(int e) noexcept { return e > 0 ? -e : (e < 0 ? e : -FI_EOTHER); }

// ------------------------------------------------------------------ refs
// Counts children bound to an object; fi_close answers -FI_EBUSY while > 0.
struct refcount {
    std::atomic<int> n{0};
    void get() noexcept { n.fetch_add(1, std::memory_order_relaxed); }
    void put() noexcept { n.fetch_sub(1, std::memory_order_acq_rel); }
    bool busy() const noexcept { return n.load(std::memory_order_acquire) > 0; }
};

// ------------------------------------------------------------------ lifetime
// Every evd object the application holds goes through the same three steps
// (docs/design.md, "Objects").
//
// fid_init: its fid gets the class, the application's context and the ops
// tables (`ops`: the class's own table; none for a class without one, such
// as an MR), before anything that hands &obj.fid to another object.
template <class T, class Ops = std::nullptr_t>
inline void fid_init(T& obj, size_t fclass, void* context, struct fi_ops* fops,
                     Ops* ops = nullptr) noexcept {
    obj.fid.fid.fclass = fclass;
    obj.fid.fid.context = context;
    obj.fid.fid.ops = fops;
    if constexpr (!std::is_same_v<Ops, std::nullptr_t>) obj.fid.ops = ops;
}

// hand_out: the last step of a successful open. The object, complete, takes
// a reference on the parent it was opened on (which then refuses to close,
// -FI_EBUSY) and *out takes it over from its owner. Nothing can fail after
// this; every failure before it leaves nothing behind.
template <class T, class Out>
inline int hand_out(std::unique_ptr<T> obj, refcount& parent, Out** out) noexcept {
    parent.get();
    *out = &obj.release()->fid;
    return 0;
}

// retire: the last step of a successful close. The tag is cleared (the same
// handle passed again is refused while the memory is not reused), the object
// freed, then the parent's reference dropped: whatever the object's members
// release while they are destroyed still has its parent.
template <class T>
inline int retire(T* obj, refcount* parent) noexcept {
    obj->tag = kind{0};
    delete obj;
    if (parent) parent->put();
    return 0;
}

// Default no-op / unsupported ops used to fill ops tables.
int op_no_control(struct fid*, int, void*);
int op_no_bind(struct fid*, struct fid*, uint64_t);
int op_no_ops_open(struct fid*, const char*, uint64_t, void**, void*);

}  // namespace evd
