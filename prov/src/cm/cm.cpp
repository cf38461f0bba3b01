// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The per-EQ rdma_event_channel whose events are read when the application
// reads or waits on that EQ, their dispatch to the ids' owners, and the
// helpers every connection call shares (posting, parameters, addresses).
// The table that says what each event becomes: cm_table.cpp.
#include "cm/cm.h"
#include "cm/cm_deadline.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <infiniband/ib.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <unordered_map>

#include "cm/linger.h"
#include "eq/eq.h"
#include "msg/ep.h"

namespace evd {

// ------------------------------------------------------------------ addresses
size_t cm_addrlen(const struct sockaddr* sa) {
    if (!sa) return 0;
    switch (sa->sa_family) {
        case AF_INET: return sizeof(struct sockaddr_in);
        case AF_INET6: return sizeof(struct sockaddr_in6);
        case AF_IB: return sizeof(struct sockaddr_ib);
        default: return 0;
    }
}

int cm_copy_addr(const struct sockaddr* sa, void* addr, size_t* addrlen) {
    if (!addrlen) return -FI_EINVAL;
    size_t need = cm_addrlen(sa);
    if (!need) return -FI_EADDRNOTAVAIL;
    size_t have = *addrlen;
    *addrlen = need;
    if (have < need || !addr) {
        if (addr && have) std::memcpy(addr, sa, have);
        return -FI_ETOOSMALL;
    }
    std::memcpy(addr, sa, need);
    return 0;
}

int cm_getopt(int level, int optname, void* optval, size_t* optlen) {
    if (level != FI_OPT_ENDPOINT || optname != FI_OPT_CM_DATA_SIZE) return -FI_ENOPROTOOPT;
    if (*optlen < sizeof(size_t) || !optval) {
        *optlen = sizeof(size_t);
        return -FI_ETOOSMALL;
    }
    *static_cast<size_t*>(optval) = kCmDataMax;
    *optlen = sizeof(size_t);
    return 0;
}

int cm_setopt(int level, int optname) {
    if (level == FI_OPT_ENDPOINT && optname == FI_OPT_CM_DATA_SIZE)
        EVD_WARN(FI_LOG_EP_CTRL, "fi_setopt(FI_OPT_CM_DATA_SIZE): read-only option\n");
    return -FI_ENOPROTOOPT;
}

// ------------------------------------------------------------------ channels
namespace {

std::unordered_map<eq*, cm_chan*>& chan_table() EVD_REQUIRES(cm_chan_table_lock()) {
    static auto* t = new std::unordered_map<eq*, cm_chan*>();  // lives to exit
    return *t;
}

cm_stats g_stats;

// The object whose cm_owner member is o.
template <class T>
T* owner_of(cm_owner* o) {
    return static_cast<T*>(o->self);
}

// The event goes to the owner of its id (a connection request: of the
// listener's id), chan->mu held. Returns an id to destroy after the ack.
cm_id_ptr hand_to_owner(cm_chan* chan, struct rdma_cm_event* ev, const cm_action& a)
    EVD_REQUIRES(chan->mu) {
    struct rdma_cm_id* owner_id =
        ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->listen_id : ev->id;
    auto* owner = owner_id ? static_cast<cm_owner*>(owner_id->context) : nullptr;
    if (!owner) {
        g_stats.orphaned.fetch_add(1, std::memory_order_relaxed);
        EVD_DBG(FI_LOG_EP_CTRL, "rdma_cm %s for an id nobody owns anymore: dropped\n",
                a.row->name);
        if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) return nullptr;
        rdma_reject(ev->id, nullptr, 0);
        return cm_id_ptr(ev->id);
    }
    switch (owner->okind) {
        case cm_owner_kind::pep: return pep_cm_event(owner_of<pep>(owner), ev, a, chan);
        case cm_owner_kind::connreq: return connreq_cm_event(owner_of<connreq>(owner), ev, a);
        case cm_owner_kind::ep: return ep_cm_event(owner_of<msg_ep>(owner), ev, a);
        case cm_owner_kind::linger: return linger_cm_event(owner, ev, a);
    }
    return nullptr;
}

void dispatch(cm_chan* chan, struct rdma_cm_event* ev) {
    g_stats.events.fetch_add(1, std::memory_order_relaxed);
    cm_action a = cm_translate(*ev);
    EVD_DBG(FI_LOG_EP_CTRL, "rdma_cm %s status %d id %p\n", a.row->name, ev->status,
            static_cast<void*>(ev->id));
    if (a.row->outcome == cm_outcome::removal) {
        // The record itself cannot carry the device's name: say it here.
        struct ibv_context* v = ev->id ? ev->id->verbs : nullptr;
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_cm %s: device %s was removed; rdma_cm id %p gets "
                 "FI_ENODEV (prov_errno %d)\n", a.row->name,
                 v && v->device ? ibv_get_device_name(v->device) : "(unknown)",
                 static_cast<void*>(ev->id), a.prov_errno);
    }
    std::vector<cm_id_ptr> graves;  // destroyed last, outside chan->mu
    cm_id_ptr destroy;  // once the event is acknowledged, outside chan->mu
    hb_acquire(ev->id);  // what its owner did before handing it to the kernel (tsan_hb.h)
    hb_acquire(ev->listen_id);
    {
        evd::lock_guard lk(chan->mu);
        // The event is acknowledged whatever its handler did: one left
        // unacknowledged would block the rdma_destroy_id of its id forever.
        try {
            destroy = hand_to_owner(chan, ev, a);
        } catch (const std::exception& x) {
            g_stats.failed.fetch_add(1, std::memory_order_relaxed);
            EVD_WARN(FI_LOG_EP_CTRL, "rdma_cm %s for id %p: its handling failed (%s)\n",
                     a.row->name, static_cast<void*>(ev->id), x.what());
        }
        rdma_ack_cm_event(ev);
        if (!chan->dead.empty()) graves.swap(chan->dead);
    }
}

void chan_progress(eq_source* src) {
    auto* chan = static_cast<cm_chan*>(src->arg);
    for (;;) {
        struct rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(chan->ch.get(), &ev)) break;  // EAGAIN: drained
        dispatch(chan, ev);
    }
}

}  // namespace

cm_stats& cm_get_stats() { return g_stats; }

mutex& cm_chan_table_lock() {
    static mutex mu;  // constant-initialized: usable from any static constructor
    return mu;
}

void cm_detach_owner(cm_chan* chan, struct rdma_cm_id* id) {
    evd::lock_guard lk(chan->mu);  // a dispatch in progress finishes first
    id->context = nullptr;
}

void cm_chan_bury(cm_chan* chan, cm_id_ptr id) {
    if (!id) return;
    id->context = nullptr;  // no dispatch reaches its owner any more
    try {
        chan->dead.push_back(std::move(id));
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_EP_CTRL, "no memory to queue an rdma_cm id for destruction: leaked\n");
        (void)id.release();
    }
}

cm_id_ptr cm_chan_keep_one(cm_chan* chan, cm_id_ptr a, cm_id_ptr b) {
    if (!a) return b;
    cm_chan_bury(chan, std::move(b));
    return a;
}

namespace {

// One more reference to chan, with its slot in the deadline list.
int take_ref(cm_chan* chan) EVD_REQUIRES(cm_chan_table_lock()) {
    if (int ret = cm_deadline_reserve(chan, static_cast<size_t>(chan->refs) + 1)) return ret;
    chan->refs++;
    return 0;
}

}  // namespace

int cm_chan_ref(cm_chan* chan) {
    evd::lock_guard lk(cm_chan_table_lock());
    return take_ref(chan);
}

int cm_post_err(eq* q, struct fid* f, int err, int prov_errno, const void* data, size_t len) {
    if (!q) {
        EVD_WARN(FI_LOG_EP_CTRL, "error %d (%s) for fid %p: no EQ bound, dropped\n", err,
                 fi_strerror(err), static_cast<void*>(f));
        return -FI_ENOEQ;
    }
    struct fi_eq_err_entry e = {};
    e.fid = f;
    e.context = f ? f->context : nullptr;
    e.err = err;
    e.prov_errno = prov_errno;
    return eq_post_err(q, e, data, data ? len : 0);
}

int cm_post_cm(eq* q, uint32_t event, struct fid* f, struct fi_info* info, const void* data,
               size_t len) {
    if (!q) {
        EVD_WARN(FI_LOG_EP_CTRL, "event %u for fid %p: no EQ bound, dropped\n", event,
                 static_cast<void*>(f));
        return -FI_ENOEQ;
    }
    alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    if (len > 256) len = 256;
    auto* ent = reinterpret_cast<struct fi_eq_cm_entry*>(buf);
    ent->fid = f;
    ent->info = info;
    if (len && data) std::memcpy(ent->data, data, len);
    else len = 0;
    return eq_post(q, event, buf, sizeof(struct fi_eq_cm_entry) + len);
}

uint8_t cm_retry_count(uint32_t vendor_id) {
    int set = get_params().retry_count;
    if (set >= 0) return static_cast<uint8_t>(set);
    return vendor_id == kSoftRoceVendorId ? 6 : 7;
}

void cm_fill_conn_param(struct rdma_conn_param* p, const uint8_t* data, size_t len,
                        uint8_t retry_count) {
    std::memset(p, 0, sizeof(*p));
    p->private_data = data;
    p->private_data_len = static_cast<uint8_t>(len);
    p->responder_resources = RDMA_MAX_RESP_RES;  // librdmacm: the device maximum
    p->initiator_depth = RDMA_MAX_INIT_DEPTH;
    p->flow_control = 1;
    p->retry_count = retry_count;
    p->rnr_retry_count = 7;  // retry receiver-not-ready forever, like other MSG providers
}

int cm_create_id(cm_chan* chan, cm_owner* owner, cm_id_ptr* out) {
    struct rdma_cm_id* id = nullptr;
    if (rdma_create_id(chan->ch.get(), &id, owner, RDMA_PS_TCP)) {
        int e = errno;
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_create_id: %s\n", strerror(e));
        return fi_err(e);
    }
    hb_release(id);
    out->reset(id);
    return 0;
}

cm_chan* cm_chan_get(eq* q, int* err) {
    evd::lock_guard lk(cm_chan_table_lock());
    auto& t = chan_table();
    auto it = t.find(q);
    if (it != t.end()) {
        if (int ret = take_ref(it->second)) {
            *err = ret;
            return nullptr;
        }
        return it->second;
    }
    auto fail = [err](int e) -> cm_chan* {
        *err = e;
        return nullptr;
    };
    std::unique_ptr<cm_chan> chan(new (std::nothrow) cm_chan());
    if (!chan) return fail(-FI_ENOMEM);
    chan->ch.reset(rdma_create_event_channel());
    if (!chan->ch) {
        int e = errno;
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_create_event_channel: %s\n", strerror(e));
        return fail(fi_err(e));
    }
    int fl = fcntl(chan->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(chan->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) return fail(fi_err(errno));
    chan->q = q;
    chan->src.fd = chan->ch->fd;
    chan->src.progress = chan_progress;
    chan->src.arg = chan.get();
    // The table slot first: the one step that can throw comes before
    // anything is registered with the EQ.
    auto slot = t.emplace(q, nullptr).first;
    undo_on_exit unslot([&] { t.erase(slot); });
    if (int ret = eq_add_source(q, &chan->src)) return fail(ret);
    undo_on_exit unsource([&] { eq_remove_source(q, &chan->src); });
    if (int ret = cm_deadline_open(chan.get())) return fail(ret);
    undo_on_exit untimer([&] { cm_deadline_close(chan.get()); });
    if (int ret = cm_deadline_reserve(chan.get(), 1)) return fail(ret);
    untimer.dismiss();
    unsource.dismiss();
    unslot.dismiss();
    chan->refs = 1;
    slot->second = chan.get();
    return chan.release();
}

void cm_chan_put(cm_chan* chan) {
    if (!chan) return;
    {
        evd::lock_guard lk(cm_chan_table_lock());
        if (--chan->refs > 0) return;
        chan_table().erase(chan->q);
    }
    cm_deadline_close(chan);
    eq_remove_source(chan->q, &chan->src);
    // Every id on the channel is gone (each holds a ref), so this succeeds.
    // Events still queued for destroyed ids were acked by rdma_destroy_id.
    struct rdma_cm_event* ev = nullptr;
    while (!rdma_get_cm_event(chan->ch.get(), &ev)) rdma_ack_cm_event(ev);
    delete chan;  // and its event channel
}

}  // namespace evd
