// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Passive endpoints (fi_passive_ep, fi_listen, fi_reject) and the FI_CONNREQ
// handle that wraps an incoming rdma_cm_id until it is accepted or rejected.
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <cstdlib>
#include <cstring>

#include "cm/cm.h"
#include "cm/linger.h"
#include "device/devctx.h"
#include "eq/eq.h"
#include "fabric.h"
#include "msg/ep.h"
#include "msg/ep_exchange.h"
#include "msg/pep_resume.h"

namespace evd {

namespace {

pep* pep_of(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_PEP) return nullptr;
    return from_fid<pep>(reinterpret_cast<struct fid_pep*>(f));
}

uint32_t addr_format_of(const struct sockaddr* sa) {
    switch (sa ? sa->sa_family : 0) {
        case AF_INET: return FI_SOCKADDR_IN;
        case AF_INET6: return FI_SOCKADDR_IN6;
        case AF_IB: return FI_SOCKADDR_IB;
        default: return FI_FORMAT_UNSPEC;
    }
}

int set_addr(void** slot, size_t* slot_len, const struct sockaddr* sa) {
    size_t n = cm_addrlen(sa);
    if (!n) return -FI_EINVAL;
    void* p = std::malloc(n);
    if (!p) return -FI_ENOMEM;
    std::memcpy(p, sa, n);
    std::free(*slot);
    *slot = p;
    *slot_len = n;
    return 0;
}

int connreq_close(struct fid* f) {
    return guard([&] {
        if (!f || f->fclass != FI_CLASS_CONNREQ) return -FI_EINVAL;
        auto* r = reinterpret_cast<connreq*>(f);
        if (r->closed.exchange(true)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_close: connection request handle %p already closed\n",
                     static_cast<void*>(r));
            return -FI_EINVAL;
        }
        // Closing an unanswered request refuses it; closing an answered one
        // only records that the app is done with the handle (its memory stays
        // until the pep, and an adopting ep, are closed).
        if (connreq_claim(r, connreq_state::rejected)) {
            EVD_INFO(FI_LOG_EP_CTRL, "fi_close of an unanswered connection request: rejected\n");
            connreq_release(r, true, nullptr, 0);
        }
        return 0;
    });
}

// Ops tables (defined at the end of the file).
extern struct fi_ops connreq_fi_ops;

// ------------------------------------------------------------------ entry points
int pep_close(struct fid* f) {
    return guard([&] {
        pep* p = pep_of(f);
        if (!p) return -FI_EINVAL;
        if (p->id) {
            evd::lock_guard lk(p->chan->mu);
            p->id->context = nullptr;  // no new requests after this
        }
        // Its requests end with it: unanswered ones are rejected, and the
        // handles are invalid afterwards (the pep's ref is dropped).
        connreq* list = nullptr;
        {
            evd::lock_guard lk(p->mu);
            list = p->reqs;
            p->reqs = nullptr;
        }
        while (list) {
            connreq* r = list;
            list = r->next;
            if (connreq_claim(r, connreq_state::ended)) {
                EVD_INFO(FI_LOG_EP_CTRL,
                         "fi_close(pep): connection request %p never answered: rejected\n",
                         static_cast<void*>(r));
                connreq_release(r, true, nullptr, 0);
            }
            connreq_put(r);
        }
        p->id.reset();  // before its channel can go
        resume_tokens_unref(p->tokens);  // its endpoints keep theirs
        p->tokens = nullptr;
        if (p->chan) cm_chan_put(p->chan);
        if (p->eq_bound) eq_bind_unref(p->eq_bound);
        fi_freeinfo(p->info);
        return retire(p, p->fab ? &p->fab->refs : nullptr);
    });
}

int pep_bind(struct fid* f, struct fid* bfid, uint64_t flags) {
    return guard([&] {
        pep* p = pep_of(f);
        if (!p || !bfid) return -FI_EINVAL;
        if (bfid->fclass != FI_CLASS_EQ) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_pep_bind: only an EQ can be bound (fclass %zu)\n",
                     bfid->fclass);
            return -FI_EINVAL;
        }
        eq* q = eq_from_fid(bfid);
        if (!q) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_pep_bind: not an evd EQ\n");
            return -FI_EINVAL;
        }
        evd::lock_guard lk(p->mu);
        if (p->eq_bound) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_pep_bind: an EQ is already bound\n");
            return -FI_EINVAL;
        }
        int err = 0;
        cm_chan* chan = cm_chan_get(q, &err);
        if (!chan) return err;
        if (int rc = cm_create_id(chan, &p->owner, &p->id)) {
            cm_chan_put(chan);
            return rc;
        }
        p->chan = chan;
        p->eq_bound = q;
        eq_bind_ref(q);
        return 0;
    });
}

int pep_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        pep* p = pep_of(f);
        if (!p) return -FI_EINVAL;
        if (command == FI_BACKLOG) {
            if (!arg) return -FI_EINVAL;
            int b = *static_cast<int*>(arg);
            if (b < 0) return -FI_EINVAL;
            evd::lock_guard lk(p->mu);
            p->backlog = b;
            hb_release(p->id.get());
            if (p->listening && rdma_listen(p->id.get(), b)) return fi_err(errno);
            return 0;
        }
        return -FI_ENOSYS;
    });
}

int pep_setname(fid_t f, void* addr, size_t addrlen) {
    return guard([&] {
        pep* p = pep_of(f);
        auto* sa = static_cast<const struct sockaddr*>(addr);
        if (!p || !sa || addrlen < cm_addrlen(sa) || !cm_addrlen(sa)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_setname(pep): bad address or length %zu\n", addrlen);
            return -FI_EINVAL;
        }
        evd::lock_guard lk(p->mu);
        if (p->listening) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_setname(pep): already listening\n");
            return -FI_EOPBADSTATE;
        }
        int ret = set_addr(&p->info->src_addr, &p->info->src_addrlen, sa);
        if (!ret) p->info->addr_format = addr_format_of(sa);
        return ret;
    });
}

int pep_getname(fid_t f, void* addr, size_t* addrlen) {
    return guard([&] {
        pep* p = pep_of(f);
        if (!p || !addrlen) return -FI_EINVAL;
        evd::lock_guard lk(p->mu);
        if (p->listening) return cm_copy_addr(rdma_get_local_addr(p->id.get()), addr, addrlen);
        return cm_copy_addr(static_cast<const struct sockaddr*>(p->info->src_addr), addr,
                            addrlen);
    });
}

int pep_listen(struct fid_pep* pf) {
    return guard([&] {
        pep* p = pep_of(&pf->fid);
        if (!p) return -FI_EINVAL;
        evd::lock_guard lk(p->mu);
        if (!p->eq_bound) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_listen: no EQ bound\n");
            return -FI_ENOEQ;
        }
        if (p->listening) return 0;
        if (p->dead.load()) return -FI_ENODEV;
        struct sockaddr_in any = {};
        any.sin_family = AF_INET;
        auto* src = static_cast<struct sockaddr*>(p->info->src_addr);
        if (!src) src = reinterpret_cast<struct sockaddr*>(&any);
        if (rdma_bind_addr(p->id.get(), src)) {
            int e = errno;
            EVD_WARN(FI_LOG_EP_CTRL, "fi_listen: rdma_bind_addr: %s\n", strerror(e));
            return e == EADDRINUSE ? -FI_EADDRINUSE : fi_err(e);
        }
        hb_release(p->id.get());
        if (rdma_listen(p->id.get(), p->backlog)) {
            int e = errno;
            EVD_WARN(FI_LOG_EP_CTRL, "fi_listen: rdma_listen: %s\n", strerror(e));
            return fi_err(e);
        }
        p->listening = true;
        if (!p->tokens) p->tokens = resume_tokens_new();  // null: no resumption offered
        EVD_INFO(FI_LOG_EP_CTRL, "listening (device %s)\n",
                 p->id->verbs ? ibv_get_device_name(p->id->verbs->device) : "any");
        return 0;
    });
}

int pep_reject(struct fid_pep* pf, fid_t handle, const void* param, size_t paramlen) {
    return guard([&] {
        pep* p = pep_of(&pf->fid);
        if (!p || !fid_is_evd(handle) || handle->fclass != FI_CLASS_CONNREQ) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_reject: not a connection request handle\n");
            return -FI_EINVAL;
        }
        if (paramlen > kCmDataMax || (paramlen && !param)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_reject: %zu bytes of data, at most %zu allowed\n",
                     paramlen, kCmDataMax);
            return -FI_EINVAL;
        }
        auto* r = reinterpret_cast<connreq*>(handle);
        if (!connreq_claim(r, connreq_state::rejected)) {
            EVD_WARN(FI_LOG_EP_CTRL,
                     "fi_reject: connection request %p was already answered (%s)\n",
                     static_cast<void*>(r), connreq_state_name(r->st.load()));
            return -FI_EINVAL;
        }
        // The request is answered either way; an error says the peer got a
        // REJ without the application's data.
        return connreq_release(r, true, param, paramlen);
    });
}

int pep_getopt(fid_t f, int level, int optname, void* optval, size_t* optlen) {
    return guard([&] {
        if (!pep_of(f) || !optlen) return -FI_EINVAL;
        return cm_getopt(level, optname, optval, optlen);
    });
}

int pep_setopt(fid_t, int level, int optname, const void*, size_t) {
    return cm_setopt(level, optname);
}

int pep_no_connect(struct fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; }
int pep_no_accept(struct fid_ep*, const void*, size_t) { return -FI_ENOSYS; }
int pep_no_getpeer(struct fid_ep*, void*, size_t*) { return -FI_ENOSYS; }
int pep_no_shutdown(struct fid_ep*, uint64_t) { return -FI_ENOSYS; }
int pep_no_join(struct fid_ep*, const void*, uint64_t, struct fid_mc**, void*) {
    return -FI_ENOSYS;
}
ssize_t pep_no_cancel(fid_t, void*) { return -FI_ENOSYS; }
int pep_no_ctx(struct fid_ep*, int, void*, struct fid_ep**, void*) { return -FI_ENOSYS; }
ssize_t pep_no_size_left(struct fid_ep*) { return -FI_ENOSYS; }

// Ops tables (defined at the end of the file).
extern struct fi_ops pep_fi_ops;
extern struct fi_ops_ep pep_ep_ops;
extern struct fi_ops_cm pep_cm_ops;

}  // namespace

// ------------------------------------------------------------------ rdma_cm events
namespace {

// The fi_info an FI_CONNREQ carries: the listener's, with the device and the
// two addresses of this request; nullptr when out of memory.
info_ptr connreq_info(const pep* p, struct rdma_cm_id* id) {
    info_ptr info(fi_dupinfo(p->info));
    if (!info || !info->domain_attr || !id->verbs) return nullptr;
    char* dom_name = strdup(ibv_get_device_name(id->verbs->device));
    if (!dom_name) return nullptr;
    std::free(info->domain_attr->name);
    info->domain_attr->name = dom_name;
    auto* src = rdma_get_local_addr(id);
    auto* dst = rdma_get_peer_addr(id);
    if (set_addr(&info->src_addr, &info->src_addrlen, src) ||
        set_addr(&info->dest_addr, &info->dest_addrlen, dst))
        return nullptr;
    info->addr_format = addr_format_of(src);
    return info;
}

// CONNECT_REQUEST carrying a resume request (ep_exchange.h): it attaches
// only to the connection its token names, from that connection's peer, for
// a newer generation, or it is refused (counted, logged, and told only
// "unknown token" when the token was not the problem's whole story). Never
// an FI_CONNREQ. Returns the id to destroy, or nothing when an endpoint
// took it.
cm_id_ptr on_resume_request(pep* p, struct rdma_cm_event* ev, cm_id_ptr id, cm_chan* chan) {
    resume::resume_msg m;
    const auto err = resume::resume_unpack(ev->param.conn.private_data,
                                           ev->param.conn.private_data_len, &m);
    if (err != resume::wire_error::none || m.kind != resume::resume_kind::request) {
        EVD_WARN(FI_LOG_EP_CTRL, "resume request refused: malformed (%s)\n",
                 err == resume::wire_error::none ? "not a request" : resume::wire_error_name(err));
        if (p->tokens) {
            evd::lock_guard g(p->tokens->mu);
            p->tokens->tbl.count(resume::resume_refusal::malformed);
        }
        ep_exchange_refuse(id.get(), 0, resume::resume_refusal::malformed);
        return id;
    }
    resume::token_table::decision d;
    if (p->tokens) {
        const struct sockaddr* from = rdma_get_peer_addr(id.get());
        evd::lock_guard g(p->tokens->mu);
        d = p->tokens->tbl.check(m.token, resume::peer_ip_of(from, cm_addrlen(from)),
                                 m.generation);
    }
    if (!d.ok || !d.owner) {
        EVD_WARN(FI_LOG_EP_CTRL, "resume request for generation %u refused: %s\n",
                 m.generation, resume::resume_refusal_name(static_cast<uint32_t>(d.why)));
        ep_exchange_refuse(id.get(), m.generation, d.why);
        return id;
    }
    // The owner is open: an endpoint leaves its listener's table at fi_close
    // under this channel's lock, which dispatch holds (it shares the
    // listener's channel, or it made no offer).
    chan->mu.assert_held();
    return ep_exchange_request(static_cast<msg_ep*>(d.owner), std::move(id), m);
}

void unlist(pep* p, connreq* r) {
    evd::lock_guard plk(p->mu);
    for (connreq** pp = &p->reqs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

// CONNECT_REQUEST on a listener: an FI_CONNREQ with its handle, or a
// rejection (listener gone, a request without evd's header, no memory, a
// full EQ). Returns the id to destroy, or nothing when the handle took it.
cm_id_ptr on_connreq(pep* p, struct rdma_cm_event* ev, const cm_action& a, cm_chan* chan) {
    cm_id_ptr id(ev->id);  // the request's id: dispatch destroys it unless a handle takes it
    if (p->dead.load()) {
        rdma_reject(id.get(), nullptr, 0);
        return id;
    }
    if (resume::looks_like_resume(ev->param.conn.private_data, ev->param.conn.private_data_len))
        return on_resume_request(p, ev, std::move(id), chan);
    if (!a.data_ok) {
        cm_get_stats().bad_connreq.fetch_add(1, std::memory_order_relaxed);
        EVD_WARN(FI_LOG_EP_CTRL,
                 "connection request without a valid evd header (%u bytes of private "
                 "data): rejected\n",
                 static_cast<unsigned>(ev->param.conn.private_data_len));
        rdma_reject(id.get(), nullptr, 0);
        return id;
    }
    std::unique_ptr<connreq> r(new (std::nothrow) connreq());
    info_ptr info = r ? connreq_info(p, id.get()) : nullptr;
    if (!r || !info) {
        EVD_WARN(FI_LOG_EP_CTRL, "connection request: out of memory, rejected\n");
        rdma_reject(id.get(), nullptr, 0);
        return id;
    }
    if (cm_chan_ref(chan)) {  // the request's id lives on chan from here
        EVD_WARN(FI_LOG_EP_CTRL, "connection request: out of memory, rejected\n");
        rdma_reject(id.get(), nullptr, 0);
        return id;
    }
    r->fid.fclass = FI_CLASS_CONNREQ;
    r->fid.context = p->fid.fid.context;
    r->fid.ops = &connreq_fi_ops;
    r->chan = chan;
    r->chan->mu.assert_held();  // dispatch holds chan->mu
    id->context = &r->owner;
    r->id = std::move(id);
    r->eq_bound = p->eq_bound;
    r->tokens = p->tokens;
    resume_tokens_ref(r->tokens);
    eq_bind_ref(r->eq_bound);
    info->handle = &r->fid;
    {
        evd::lock_guard plk(p->mu);
        r->next = p->reqs;
        p->reqs = r.get();
    }
    if (int ret = cm_post_cm(p->eq_bound, FI_CONNREQ, &p->fid.fid, info.get(), a.data,
                             a.data_len)) {
        EVD_WARN(FI_LOG_EP_CTRL, "FI_CONNREQ could not be queued (%d): rejected\n", ret);
        unlist(p, r.get());
        resume_tokens_unref(r->tokens);  // r is freed here, not by connreq_put
        r->tokens = nullptr;
        r->id->context = nullptr;
        rdma_reject(r->id.get(), nullptr, 0);
        eq_bind_unref(r->eq_bound);
        r->fid.fclass = 0;
        cm_chan_put(chan);  // the pep still holds a ref on chan: never the last
        return std::move(r->id);  // r and info are freed by their owners
    }
    (void)info.release();  // the application's now (fi_freeinfo)
    (void)r.release();     // the listener's list holds it
    return nullptr;
}

}  // namespace

cm_id_ptr pep_cm_event(pep* p, struct rdma_cm_event* ev, const cm_action& a, cm_chan* chan) {
    switch (a.row->outcome) {
        case cm_outcome::connreq:
            return on_connreq(p, ev, a, chan);
        case cm_outcome::removal:
            if (!p->dead.exchange(true))
                cm_post_err(p->eq_bound, &p->fid.fid, a.row->fi_err, a.prov_errno, nullptr, 0);
            return nullptr;
        default:
            EVD_DBG(FI_LOG_EP_CTRL, "listener: %s (status %d) ignored\n", a.row->name,
                    a.prov_errno);
            return nullptr;
    }
}

cm_id_ptr connreq_cm_event(connreq* r, struct rdma_cm_event* ev, const cm_action& a) {
    // Called with chan->mu held. Before fi_endpoint adopts the id only the
    // end of the request can arrive: the peer gave up (or timed out). The
    // kernels evd runs on report none (rdma_ucm drops a request's events
    // until rdma_accept; fi_enable then finds the request over), so this is
    // for one that does. The id
    // is then useless, so free it now rather than when the app answers (it
    // may never: fi_freeinfo does not close info->handle).
    EVD_DBG(FI_LOG_EP_CTRL, "pending connection request: %s (status %d)\n", a.row->name,
            a.prov_errno);
    if (!a.row->terminal) return nullptr;
    r->gone.store(true);
    r->chan->mu.assert_held();  // dispatch holds it: the pending id lives on r->chan
    if (r->id.get() != ev->id) return nullptr;
    r->id->context = nullptr;
    return std::move(r->id);  // destroyed by dispatch after the ack
}

void connreq_put(connreq* r) {
    if (r->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    resume_tokens_unref(r->tokens);
    r->fid.fclass = 0;
    r->fid.ops = nullptr;
    delete r;
}

bool connreq_claim(connreq* r, connreq_state to) {
    int expect = static_cast<int>(connreq_state::pending);
    return r->st.compare_exchange_strong(expect, static_cast<int>(to), std::memory_order_acq_rel);
}

int connreq_release(connreq* r, bool reject, const void* data, size_t len) {
    int ret = 0;
    cm_id_ptr id;
    {
        evd::lock_guard lk(r->chan->mu);
        id = std::move(r->id);
        if (id) id->context = nullptr;
    }
    const unsigned port = id ? id->port_num : 0;
    if (id && reject && id->verbs && !port_active_now(id->verbs, id->port_num) &&
        linger_hold_request(id, r->chan)) {
        // A REJ from a port that is down is lost (and on rxe its failed send
        // disables the device's connection management): it goes out when
        // the port is back. The record owns the id now (it may be gone).
        EVD_INFO(FI_LOG_EP_CTRL, "reject: port %u is down: the REJ waits for it\n", port);
        r->chan = nullptr;  // the linger record holds that reference now
    }
    if (id) {
        if (reject) {
            uint8_t buf[kCmHdrLen + kCmDataMax];
            int n = cm_pack(buf, sizeof(buf), data, len);
            if (n < 0) {
                ret = n;
            } else if (rdma_reject(id.get(), buf, static_cast<uint8_t>(n))) {
                ret = fi_err(errno);
                EVD_WARN(FI_LOG_EP_CTRL,
                         "rdma_reject: %s (the id's destruction rejects it without the data)\n",
                         strerror(errno));
            }
        }
        id.reset();  // before its channel can go
    }
    if (r->chan) cm_chan_put(r->chan);
    r->chan = nullptr;
    if (r->eq_bound) eq_bind_unref(r->eq_bound);
    r->eq_bound = nullptr;
    return ret;
}

const char* connreq_state_name(int st) {
    switch (static_cast<connreq_state>(st)) {
        case connreq_state::pending: return "pending";
        case connreq_state::adopted: return "adopted by fi_endpoint";
        case connreq_state::rejected: return "rejected or closed";
        case connreq_state::ended: return "ended: its listener closed or the peer gave up";
    }
    return "unknown";
}

// ------------------------------------------------------------------ fi_passive_ep
int pep_open(struct fid_fabric* fab_fid, struct fi_info* info, struct fid_pep** out,
             void* context) {
    return guard([&] {
        auto* fab = from_fid<fabric>(fab_fid);
        if (!fab || !info || !out) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: fabric, info and pep must be valid\n");
            return -FI_EINVAL;
        }
        if (info->ep_attr && info->ep_attr->type != FI_EP_MSG &&
            info->ep_attr->type != FI_EP_UNSPEC) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: only FI_EP_MSG is supported\n");
            return -FI_EINVAL;
        }
        if (info->src_addr && !cm_addrlen(static_cast<struct sockaddr*>(info->src_addr))) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_passive_ep: unsupported source address format\n");
            return -FI_EINVAL;
        }
        info_ptr dup(fi_dupinfo(info));
        if (!dup) return -FI_ENOMEM;
        dup->handle = nullptr;
        auto p = std::make_unique<pep>();
        p->info = dup.release();  // nothing can fail from here on
        fid_init(*p, FI_CLASS_PEP, context, &pep_fi_ops, &pep_ep_ops);
        p->fid.cm = &pep_cm_ops;
        p->fab = fab;
        return hand_out(std::move(p), fab->refs, out);
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops connreq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = connreq_close,
    .bind = op_no_bind,
    .control = op_no_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops pep_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = pep_close,
    .bind = pep_bind,
    .control = pep_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_ep pep_ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = pep_no_cancel,
    .getopt = pep_getopt,
    .setopt = pep_setopt,
    .tx_ctx = reinterpret_cast<int (*)(struct fid_ep*, int, struct fi_tx_attr*,
                                       struct fid_ep**, void*)>(pep_no_ctx),
    .rx_ctx = reinterpret_cast<int (*)(struct fid_ep*, int, struct fi_rx_attr*,
                                       struct fid_ep**, void*)>(pep_no_ctx),
    .rx_size_left = pep_no_size_left,
    .tx_size_left = pep_no_size_left,
};

struct fi_ops_cm pep_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = pep_setname,
    .getname = pep_getname,
    .getpeer = pep_no_getpeer,
    .connect = pep_no_connect,
    .listen = pep_listen,
    .accept = pep_no_accept,
    .reject = pep_reject,
    .shutdown = pep_no_shutdown,
    .join = pep_no_join,
};

}  // namespace

}  // namespace evd
