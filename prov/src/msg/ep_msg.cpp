// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// FI_EP_MSG endpoints (msg_ep, ep.h): the connection half (fi_connect,
// fi_accept, fi_shutdown, names) driven by rdma_cm events read on the bound
// EQ (ep_cm.cpp), its fi_enable (bound to its source, its QP: ep_qp.cpp) and
// its EQ binding (its id moves to the EQ's channel). What every endpoint
// shares: ep_control.cpp; fi_endpoint: ep_open.cpp; fi_close: ep_close.cpp;
// data ops: ep_data.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cm/cm.h"
#include "cm/cm_deadline.h"
#include "cm/linger.h"
#include "cq/cq.h"
#include "device/async.h"
#include "device/devctx.h"
#include "device/route_source.h"
#include "domain.h"
#include "eq/eq.h"
#include "msg/ep.h"
#include "msg/ep_exchange.h"
#include "msg/ep_outage.h"
#include "msg/qp_flush.h"
#include "msg/srx.h"

namespace evd {

namespace {

// Binds an active endpoint's id to its source address now, for the cases
// that need the address itself before fi_connect: fi_setname, an endpoint
// that reuses its pep's port, fi_getname after fi_enable. Otherwise the id
// is bound by rdma_resolve_addr (see ep_create_qp).
int bind_source(msg_ep* e, const struct sockaddr* dst) {
    if (e->id->verbs) return 0;
    struct sockaddr_storage src = {};
    auto* given = static_cast<const struct sockaddr*>(e->info->src_addr);
    if (given && cm_addrlen(given)) {
        std::memcpy(&src, given, cm_addrlen(given));
        // an active endpoint takes an ephemeral port, unless it was opened
        // from a passive endpoint's handle (fi_endpoint(3): it reuses the
        // pep's address)
        if (!e->keep_src_port && src.ss_family == AF_INET)
            reinterpret_cast<struct sockaddr_in*>(&src)->sin_port = 0;
        else if (!e->keep_src_port && src.ss_family == AF_INET6)
            reinterpret_cast<struct sockaddr_in6*>(&src)->sin6_port = 0;
    } else if (!dst || !route_source(dst, &src)) {
        return 0;  // the device becomes known at ADDR_RESOLVED
    }
    if (rdma_bind_addr(e->id.get(), reinterpret_cast<struct sockaddr*>(&src))) {
        int err = errno;
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_bind_addr(source): %s\n", strerror(err));
        return fi_err(err);
    }
    return 0;
}

// fi_enable of an FI_EP_MSG endpoint: bound to its source when it must
// connect from one, then its QP (handed to its id once the id is on a device).
int msg_enable(ep* base) EVD_REQUIRES(base->mu) {
    msg_ep* e = ep_msg(base);
    e->mu.assert_held();  // base's own lock
    if (e->keep_src_port || e->name_set) {
        int ret = bind_source(e, static_cast<const struct sockaddr*>(e->info->dest_addr));
        if (ret) return ret;
    }
    return ep_create_qp(e);
}

// Moves e's id to chan (an id adopted from a connection request still
// lives on the listener's channel). rdma_migrate_id waits until every
// event already read from the old channel for the id is acknowledged, and
// that channel's dispatcher acknowledges only after ep_cm_event, which
// takes e->mu: so e->mu (held by the caller) is released meanwhile.
int migrate_id(msg_ep* e, cm_chan* chan) EVD_REQUIRES(e->mu) {
    struct rdma_cm_id* id = e->id.get();
    e->migrating = true;  // a concurrent fi_ep_bind(EQ) is refused meanwhile
    e->mu.unlock();
    hb_release(id);
    int rc = rdma_migrate_id(id, chan->ch.get());
    int m = errno;
    e->mu.lock();
    e->migrating = false;
    if (rc) {
        EVD_WARN(FI_LOG_EP_CTRL, "rdma_migrate_id: %s\n", strerror(m));
        return fi_err(m);
    }
    cm_chan* old = e->chan;
    e->chan = chan;
    cm_chan_put(old);
    return 0;
}

}  // namespace

// The EQ's rdma_cm channel for e's id: a new id there, or e's id moved
// there (one adopted from a connection request on the listener's EQ).
int ep_msg_bind_eq(msg_ep* e, eq* q) {
    int err = 0;
    cm_chan* chan = cm_chan_get(q, &err);
    if (!chan) return err;
    if (e->id && e->chan != chan) {
        // adopted from a connection request on the listener's EQ: move it
        if (int rc = migrate_id(e, chan)) {
            cm_chan_put(chan);
            return rc;
        }
    } else if (e->id) {
        cm_chan_put(chan);  // already on this channel (holds its ref)
    } else {
        if (int rc = cm_create_id(chan, &e->owner, &e->id)) {
            cm_chan_put(chan);
            return rc;
        }
        e->chan = chan;
    }
    if (e->creq) ep_drop_connreq(e);  // the id now lives on e's own binding
    return 0;
}

namespace {

int ep_setname(fid_t f, void* addr, size_t addrlen) {
    return guard([&] {
        msg_ep* e = ep_msg(ep_from_fid(f));
        auto* sa = static_cast<const struct sockaddr*>(addr);
        size_t n = cm_addrlen(sa);
        if (!e || !n || addrlen < n) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_setname(ep): bad address or length %zu\n", addrlen);
            return -FI_EINVAL;
        }
        evd::lock_guard lk(e->mu);
        if (e->enabled || (e->id && e->id->verbs)) return -FI_EOPBADSTATE;
        void* p = std::malloc(n);
        if (!p) return -FI_ENOMEM;
        std::memcpy(p, sa, n);
        std::free(e->info->src_addr);
        e->info->src_addr = p;
        e->info->src_addrlen = n;
        e->name_set = true;
        return 0;
    });
}

int ep_getname(fid_t f, void* addr, size_t* addrlen) {
    return guard([&] {
        msg_ep* e = ep_msg(ep_from_fid(f));
        if (!e || !addrlen) return -FI_EINVAL;
        evd::lock_guard lk(e->mu);
        // an enabled endpoint has a local address (and port) to tell: take it
        // now if fi_connect has not yet
        if (e->enabled && e->id && !e->id->verbs && ep_state_of(e) == ep_state::idle &&
            !e->terminal.load()) {
            if (int ret = bind_source(e, static_cast<const struct sockaddr*>(e->info->dest_addr)))
                return ret;
        }
        if (e->id && e->id->verbs)
            return cm_copy_addr(rdma_get_local_addr(e->id.get()), addr, addrlen);
        return cm_copy_addr(static_cast<const struct sockaddr*>(e->info->src_addr), addr,
                            addrlen);
    });
}

int ep_getpeer(struct fid_ep* f, void* addr, size_t* addrlen) {
    return guard([&] {
        msg_ep* e = ep_msg(ep_from_fid(&f->fid));
        if (!e || !addrlen) return -FI_EINVAL;
        evd::lock_guard lk(e->mu);
        auto st = ep_state_of(e);
        if (e->id && (st == ep_state::connected || st == ep_state::accepting ||
                      st == ep_state::connecting))
            return cm_copy_addr(rdma_get_peer_addr(e->id.get()), addr, addrlen);
        return cm_copy_addr(static_cast<const struct sockaddr*>(e->info->dest_addr), addr,
                            addrlen);
    });
}

// fi_connect on an endpoint not enabled yet: dst becomes its destination
// address (unless it has one) and it is enabled.
int enable_for_connect(msg_ep* e, const struct sockaddr* dst) EVD_REQUIRES(e->mu) {
    if (!e->info->dest_addr) {
        size_t n = cm_addrlen(dst);
        e->info->dest_addr = std::malloc(n);
        if (!e->info->dest_addr) return -FI_ENOMEM;
        std::memcpy(e->info->dest_addr, dst, n);
        e->info->dest_addrlen = n;
    }
    return ep_enable(e);
}

// The source address rdma_resolve_addr binds an id that is not bound yet:
// the endpoint's src_addr with an ephemeral port, in *src, when it has one
// of dst's family; nullptr lets the route choose.
struct sockaddr* connect_source(const msg_ep* e, const struct sockaddr* dst,
                                struct sockaddr_storage* src) {
    auto* given = static_cast<const struct sockaddr*>(e->info->src_addr);
    if (e->id->verbs || !given || !cm_addrlen(given) || given->sa_family != dst->sa_family)
        return nullptr;
    std::memcpy(src, given, cm_addrlen(given));
    if (src->ss_family == AF_INET)
        reinterpret_cast<struct sockaddr_in*>(src)->sin_port = 0;
    else if (src->ss_family == AF_INET6)
        reinterpret_cast<struct sockaddr_in6*>(src)->sin6_port = 0;
    return reinterpret_cast<struct sockaddr*>(src);
}

int ep_connect(struct fid_ep* f, const void* addr, const void* param, size_t paramlen) {
    return guard([&] {
        msg_ep* e = ep_msg(ep_from_fid(&f->fid));
        if (!e) return -FI_EINVAL;
        if (paramlen > kCmDataMax || (paramlen && !param)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: %zu bytes of data, at most %zu allowed\n",
                     paramlen, kCmDataMax);
            return -FI_EINVAL;
        }
        evd::lock_guard lk(e->mu);
        if (e->creq) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_connect on an endpoint made for a connection request\n");
            return -FI_EOPBADSTATE;
        }
        auto* dst = static_cast<const struct sockaddr*>(addr ? addr : e->info->dest_addr);
        if (!cm_addrlen(dst)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: no (or unsupported) destination address\n");
            return -FI_EINVAL;
        }
        if (ep_state_of(e) != ep_state::idle || e->terminal.load()) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: endpoint is not idle\n");
            return -FI_EOPBADSTATE;
        }
        if (!e->enabled) {
            // like other MSG providers, fi_connect enables an endpoint the
            // application did not enable itself
            if (int ret = enable_for_connect(e, dst)) return ret;
        }
        int n = cm_pack(e->conn_data, sizeof(e->conn_data), param, paramlen);
        if (n < 0) return n;
        e->conn_data_len = static_cast<size_t>(n);
        struct sockaddr_storage src = {};
        struct sockaddr* srcp = connect_source(e, dst, &src);
        ep_set_state(e, ep_state::resolving);
        hb_release(e->id.get());
        if (rdma_resolve_addr(e->id.get(), srcp, const_cast<struct sockaddr*>(dst),
                              get_params().cm_timeout_ms)) {
            int err = errno;
            ep_set_state(e, ep_state::idle);
            EVD_WARN(FI_LOG_EP_CTRL, "fi_connect: rdma_resolve_addr: %s\n", strerror(err));
            return fi_err(err);
        }
        return 0;
    });
}

int ep_accept(struct fid_ep* f, const void* param, size_t paramlen) {
    return guard([&] {
        msg_ep* e = ep_msg(ep_from_fid(&f->fid));
        if (!e) return -FI_EINVAL;
        if (paramlen > kCmDataMax || (paramlen && !param)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_accept: %zu bytes of data, at most %zu allowed\n",
                     paramlen, kCmDataMax);
            return -FI_EINVAL;
        }
        evd::lock_guard lk(e->mu);
        if (!e->from_connreq) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_accept: endpoint was not opened from an FI_CONNREQ\n");
            return -FI_EOPBADSTATE;
        }
        if (ep_state_of(e) != ep_state::idle || e->terminal.load()) return -FI_EOPBADSTATE;
        if (e->gone.load()) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_accept: the peer gave up on this request\n");
            return -FI_ECONNABORTED;
        }
        if (e->id && !port_active_now(e->id->verbs, e->id->port_num)) {
            // The REP would be lost (and on rxe disable the device's connection
            // management); closing the endpoint answers the request once the
            // port is back (linger.h).
            EVD_WARN(FI_LOG_EP_CTRL, "fi_accept: port %u is down\n", e->id->port_num);
            return -FI_ENETDOWN;
        }
        int ret = ep_enable(e);
        if (ret) return ret;
        uint8_t buf[kCmHdrLen + kCmDataMax + resume::kResumeMsgLen];
        int n = cm_pack(buf, sizeof(buf), param, paramlen);
        if (n < 0) return n;
        size_t len = static_cast<size_t>(n);
        ep_exchange_offer(e, buf, &len, sizeof(buf));  // resumable: the token behind the user's data
        struct rdma_conn_param cp;
        cm_fill_conn_param(&cp, buf, len, cm_retry_count(e->dom->dev->attr.orig_attr.vendor_id));
        ep_set_state(e, ep_state::accepting);
        hb_release(e->id.get());
        if (rdma_accept(e->id.get(), &cp)) {
            int err = errno;
            ep_set_state(e, ep_state::idle);
            EVD_WARN(FI_LOG_EP_CTRL, "fi_accept: rdma_accept: %s\n", strerror(err));
            return fi_err(err);
        }
        cm_deadline_set(e->chan, e);
        return 0;
    });
}

int ep_shutdown(struct fid_ep* f, uint64_t flags) {
    return guard([&] {
        msg_ep* e = ep_msg(ep_from_fid(&f->fid));
        if (!e) return -FI_EINVAL;
        evd::lock_guard lk(e->mu);
        if (e->terminal.load()) return 0;  // already ended: its one event was delivered
        auto st = ep_state_of(e);
        if (st == ep_state::idle || !e->id) return -FI_EOPBADSTATE;
        // FI_SHUTDOWN arrives on both sides from RDMA_CM_EVENT_DISCONNECTED.
        if (e->disconnect_sent) return 0;  // already on its way (the peer's DREQ was answered)
        // The application ends the connection: its QP's flush is no outage,
        // and an outage under way ends at its next step, at once (ep_outage.h).
        ep_outage_disarm(e);
        if (e->id->verbs && e->id->port_num && !port_active_now(e->id->verbs, e->id->port_num)) {
            // A DREQ from a port that is down is lost, and on rxe its failed
            // send disables the device's connection management. This side is
            // shut down now; the DREQ goes out from fi_close once the port is
            // back (linger.h).
            EVD_INFO(FI_LOG_EP_CTRL, "fi_shutdown: port %u is down: DREQ deferred to fi_close\n",
                     e->id->port_num);
            if (ep_claim_terminal(e)) {
                ep_set_state(e, ep_state::shutdown);
                cm_post_cm(ep_route_eq(e), FI_SHUTDOWN, &e->fid.fid, nullptr, nullptr, 0);
            }
            return 0;
        }
        qp_mark_receives(e);  // rdma_disconnect moves the QP to the error state
        hb_release(e->id.get());
        if (rdma_disconnect(e->id.get())) {
            int err = errno;
            EVD_INFO(FI_LOG_EP_CTRL, "fi_shutdown: rdma_disconnect: %s\n", strerror(err));
            return fi_err(err);
        }
        e->disconnect_sent = true;
        return 0;
    });
}

int ep_no_listen(struct fid_pep*) { return -FI_ENOSYS; }
int ep_no_reject(struct fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; }
int ep_no_join(struct fid_ep*, const void*, uint64_t, struct fid_mc**, void*) {
    return -FI_ENOSYS;
}

}  // namespace

// The adopted request's listener-EQ ref came to e with the id; the handle
// itself stays alive for its pep.
void ep_drop_connreq(msg_ep* e) {
    connreq* r = e->creq;
    e->creq = nullptr;
    if (r->eq_bound) eq_bind_unref(r->eq_bound);
    r->eq_bound = nullptr;
    connreq_put(r);
}

const ep_kind kMsgKind = {
    .name = "FI_EP_MSG",
    .qp_type = IBV_QPT_RC,
    .connected = true,
    .enable = msg_enable,
    .close = ep_msg_close,
    .not_enabled = "endpoint has no queue pair yet (fi_enable first)",
    .marker_dest = nullptr,
};

msg_ep::msg_ep() : ep(&kMsgKind) {}

struct fi_ops_cm ep_msg_cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = ep_setname,
    .getname = ep_getname,
    .getpeer = ep_getpeer,
    .connect = ep_connect,
    .listen = ep_no_listen,
    .accept = ep_accept,
    .reject = ep_no_reject,
    .shutdown = ep_shutdown,
    .join = ep_no_join,
};

}  // namespace evd
