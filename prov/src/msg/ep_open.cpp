// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// fi_endpoint: a new active endpoint, from an fi_info alone, from a pending
// FI_CONNREQ handle (its id adopted), or from a passive endpoint's handle
// (its address taken).
#include <cstring>
#include <memory>

#include "cm/cm.h"
#include "domain.h"
#include "msg/ep.h"
#include "msg/pep_resume.h"

namespace evd {

// ------------------------------------------------------------------ fi_endpoint
namespace {
// Takes over a pending request's id: its events now go to e. The request's
// chan ref and listener-EQ ref move to e; e holds a ref on the handle.
int adopt_connreq(msg_ep* e, connreq* r, domain* d) {
    if (!connreq_claim(r, connreq_state::adopted)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: connection request %p was already answered (%s)\n",
                 static_cast<void*>(r), connreq_state_name(r->st.load()));
        return -FI_EINVAL;
    }
    {
        evd::lock_guard lk(r->chan->mu);
        if (r->id && r->id->verbs != d->dev->verbs) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: the request arrived on %s, the domain is %s\n",
                     ibv_get_device_name(r->id->verbs->device), d->dev->name.c_str());
            r->st.store(static_cast<int>(connreq_state::pending));  // still answerable
            return -FI_EINVAL;
        }
        if (r->id) {
            // the kernel's CM holds the request (REQ received); set before
            // dispatch can reach e (order: cm_chan::mu -> ep::mu)
            evd::lock_guard elk(e->mu);
            e->cm_started = true;
            r->id->context = &e->owner;
            e->id = std::move(r->id);
            e->gone.store(r->gone.load());
        }
    }
    if (!e->id) {  // the peer gave up and dispatch freed the id
        EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: the peer abandoned connection request %p\n",
                 static_cast<void*>(r));
        r->st.store(static_cast<int>(connreq_state::ended));
        connreq_release(r, false, nullptr, 0);
        return -FI_ECONNABORTED;
    }
    e->rs_listen_chan = r->chan;  // where a resume request for e would arrive
    e->rs_tokens = r->tokens;     // and the table that would name e (pep_resume.h)
    resume_tokens_ref(e->rs_tokens);
    e->chan = r->chan;  // the request's channel ref moves to e
    r->chan = nullptr;
    r->refs.fetch_add(1, std::memory_order_relaxed);
    e->creq = r;  // keeps the listener's EQ bound until e binds its own
    e->from_connreq = true;
    return 0;
}
}  // namespace

namespace {

// info->handle of fi_endpoint: a pending FI_CONNREQ handle (*r), a passive
// endpoint whose address the new endpoint takes (*from_pep), or none.
int take_handle(const struct fi_info* info, connreq** r, pep** from_pep) {
    if (!info->handle) return 0;
    if (info->handle->fclass == FI_CLASS_PEP) {
        *from_pep = from_fid<pep>(reinterpret_cast<struct fid_pep*>(info->handle));
        return *from_pep ? 0 : -FI_EINVAL;
    }
    if (info->handle->fclass != FI_CLASS_CONNREQ || !fid_is_evd(info->handle)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: info->handle is not evd's FI_CONNREQ handle\n");
        return -FI_EINVAL;
    }
    *r = reinterpret_cast<connreq*>(info->handle);
    if ((*r)->st.load() != static_cast<int>(connreq_state::pending)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: connection request %p was already answered (%s)\n",
                 static_cast<void*>(*r), connreq_state_name((*r)->st.load()));
        return -FI_EINVAL;
    }
    return 0;
}

// The active endpoint takes the passive endpoint's address, port included.
int take_pep_address(pep* p, struct fi_info* dup, bool* keep_src_port) {
    evd::lock_guard plk(p->mu);
    auto* sa = static_cast<const struct sockaddr*>(p->info->src_addr);
    size_t n = cm_addrlen(sa);
    if (!n) return 0;
    void* a = std::malloc(n);
    if (!a) return -FI_ENOMEM;
    std::memcpy(a, sa, n);
    std::free(dup->src_addr);
    dup->src_addr = a;
    dup->src_addrlen = n;
    *keep_src_port = true;
    return 0;
}

}  // namespace

int ep_open(struct fid_domain* dom_fid, struct fi_info* info, struct fid_ep** out,
            void* context) {
    return guard([&] {
        domain* d = domain_from_fid(dom_fid);
        if (!d || !info || !out) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: domain, info and ep must be valid\n");
            return -FI_EINVAL;
        }
        const bool dgram = info->ep_attr && info->ep_attr->type == FI_EP_DGRAM;
        if (info->ep_attr && info->ep_attr->type != FI_EP_MSG && !dgram &&
            info->ep_attr->type != FI_EP_UNSPEC) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: only FI_EP_MSG and FI_EP_DGRAM are supported\n");
            return -FI_EINVAL;
        }
        if (dgram && (info->handle || d->dev->iwarp)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_endpoint: FI_EP_DGRAM needs an InfiniBand or RoCE device "
                     "and no connection handle\n");
            return -FI_EINVAL;
        }
        connreq* r = nullptr;
        pep* from_pep = nullptr;
        if (int ret = take_handle(info, &r, &from_pep)) return ret;
        info_ptr dup(fi_dupinfo(info));
        if (!dup) return -FI_ENOMEM;
        dup->handle = nullptr;
        bool keep_src_port = false;
        if (from_pep)
            if (int ret = take_pep_address(from_pep, dup.get(), &keep_src_port)) return ret;
        // The endpoint, made as its kind's type; what follows is shared
        // or its kind's own.
        auto fill = [&](auto& e) {
            e->info = dup.get();  // e owns it once it is handed out
            e->fid.fid.fclass = FI_CLASS_EP;
            e->fid.fid.context = context;
            e->dom = d;
            ep_set_ops(e.get());
        };
        if (dgram) {
            auto e = std::make_unique<ud_ep>();
            fill(e);
            if (int ret = ep_data_init(e.get())) return ret;
            ep_ud_set_ops(e.get());
            (void)dup.release();
            return hand_out(std::move(e), d->refs, out);
        }
        auto e = std::make_unique<msg_ep>();
        fill(e);
        e->keep_src_port = keep_src_port;
        e->fid.cm = &ep_msg_cm_ops;
        // before the request is adopted: a failure leaves it answerable
        if (int ret = ep_data_init(e.get())) return ret;
        if (r) {
            if (int ret = adopt_connreq(e.get(), r, d)) return ret;
        }
        (void)dup.release();
        return hand_out(std::move(e), d->refs, out);
    });
}

}  // namespace evd
