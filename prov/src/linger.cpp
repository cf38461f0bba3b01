// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Lingering disconnects (see linger.h): records, their list, and the three
// ways one ends (rdma_cm says the disconnect is done, the EQ closes, the
// DREQ cannot be sent).
#include "linger.h"

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <mutex>
#include <algorithm>
#include <new>
#include <vector>

#include "devctx.h"
#include "domain.h"
#include "ep.h"
#include "eq.h"

namespace evd {

struct linger {
    cm_owner owner{cm_owner_kind::linger};  // what the id's context points at
    cm_id_ptr id;             // from linger_arm (or linger_hold_request) on
    cm_chan* chan = nullptr;  // the channel id lives on (the endpoint's reference)
    eq* q = nullptr;          // chan's EQ: reads dev's async fd while the record lives
    devctx* dev = nullptr;    // held (devctx_by_name)
    uint8_t port = 1;
    // Under chan->mu:
    bool armed = false;      // the endpoint's QP is gone; the record owns the id
    bool dreq_sent = false;  // rdma_disconnect was called (by fi_shutdown or here)
    // No DREQ of ours is due (the connection never came up in evd's view, or
    // rdma_cm reported it over), but the kernel's CM still has state for the
    // id and destroying it makes the CM send a DREQ or REJ: the id is only
    // held until the port is active.
    bool hold_only = false;
    bool ended = false;      // rdma_cm reported the connection over
    std::atomic<bool> done{false};  // nothing left but freeing the record
};

namespace {

std::mutex g_mu;  // guards g_list; before any cm_chan::mu
std::vector<linger*>& list() {
    // Lives to exit (provider cleanup order), in static storage: the first
    // use (a close reaping) must not fail for want of memory.
    alignas(std::vector<linger*>) static unsigned char storage[sizeof(std::vector<linger*>)];
    static auto* v = new (storage) std::vector<linger*>();
    return *v;
}

bool port_active(const linger* l) { return port_active_now(l->dev->verbs, l->port); }

// Sends the DREQ. chan->mu held. False when it could not be sent: the id is
// then handed back for destruction (the kernel sends one DREQ as it goes).
bool send_dreq(linger* l) {
    hb_release(l->id.get());
    if (rdma_disconnect(l->id.get()) == 0) {
        l->dreq_sent = true;
        EVD_DBG(FI_LOG_EP_CTRL, "linger %p: DREQ sent\n", static_cast<void*>(l));
        return true;
    }
    EVD_INFO(FI_LOG_EP_CTRL, "linger %p: rdma_disconnect: %s; destroying the id\n",
             static_cast<void*>(l), strerror(errno));
    return false;
}

// Takes the id away from the channel (chan->mu held): nothing if it is gone
// (destroyed, or handed to dispatch to destroy) or not armed yet.
cm_id_ptr take_id(linger* l) {
    if (!l->id) return nullptr;
    l->id->context = nullptr;
    l->done.store(true);
    return std::move(l->id);
}

// Destroys l's id if it is still there, then frees l and what it holds.
// l is no longer listed.
void finish(linger* l) {
    cm_id_ptr id;
    {
        std::lock_guard lk(l->chan->mu);
        id = take_id(l);
    }
    if (id) {
        EVD_DBG(FI_LOG_EP_CTRL, "linger %p: id destroyed before the disconnect was done\n",
                static_cast<void*>(l));
        id.reset();  // before the channel reference goes
    }
    devctx_detach_eq(l->dev, l->q);
    cm_chan_put(l->chan);
    devctx_put(l->dev);
    delete l;
}

// Takes the first record `pick` selects off the list, or nullptr. One at a
// time and without allocating: fi_close of endpoints and EQs reaps through
// it, and a close must not fail for want of memory.
template <class F>
linger* unlist_one(F pick) {
    std::lock_guard lk(g_mu);
    auto& v = list();
    auto it = std::find_if(v.begin(), v.end(), pick);
    if (it == v.end()) return nullptr;
    linger* l = *it;
    v.erase(it);
    return l;
}

// Frees the records that ended (ids already destroyed or handed back).
void reap() {
    while (linger* l = unlist_one([](const linger* x) { return x->done.load(); })) finish(l);
}

}  // namespace

linger* linger_begin(ep* e) {
    reap();
    if (!e->id || !e->chan) return nullptr;
    devctx* dev = devctx_by_name(e->dom->dev->name.c_str());
    if (!dev) return nullptr;  // the device is gone: nobody to tell
    auto* l = new (std::nothrow) linger;
    if (!l) {
        devctx_put(dev);
        return nullptr;
    }
    l->chan = e->chan;
    l->q = e->chan->q;
    l->dev = dev;
    l->port = e->dom->port_num;
    if (devctx_attach_eq(dev, l->q)) {  // without it PORT_ACTIVE may never be read
        devctx_put(dev);
        delete l;
        return nullptr;
    }
    // A CM message sent from a port that is down is lost, and on rxe its
    // failed send also leaves the device's QP1 unable to carry connection
    // management again until the device is re-created (docs/link-failures.md).
    const bool port_down = e->id->verbs && e->id->port_num &&
                           !port_active_now(e->id->verbs, e->id->port_num);
    try {
        std::lock_guard lk(g_mu);
        list().push_back(l);  // before arming: PORT_ACTIVE from now on finds it (and skips it)
    } catch (const std::bad_alloc&) {  // no record: fi_close destroys the id at once
        devctx_detach_eq(dev, l->q);
        devctx_put(dev);
        delete l;
        return nullptr;
    }
    bool keep = false;
    {
        std::lock_guard lk(e->chan->mu);  // dispatch reads the context and e's flags under it
        const bool want_dreq = e->cm_established && !e->cm_disconnected;
        keep = want_dreq || (port_down && e->cm_started);
        if (keep) {
            l->hold_only = !want_dreq;
            l->dreq_sent = want_dreq && e->disconnect_sent;  // a held id sends none of its own
            if (e->id->port_num) l->port = e->id->port_num;
            e->id->context = &l->owner;
        } else {
            e->id->context = nullptr;  // no more dispatch to e
        }
    }
    if (!keep) {
        (void)unlist_one([l](const linger* x) { return x == l; });
        devctx_detach_eq(dev, l->q);
        devctx_put(dev);
        delete l;
        return nullptr;
    }
    return l;
}

void linger_arm(linger* l, cm_id_ptr id) {
    cm_id_ptr destroy;
    bool dreq_sent = false;
    {
        std::lock_guard lk(l->chan->mu);
        l->id = std::move(id);
        l->armed = true;
        if (l->ended)
            destroy = take_id(l);
        else if (l->hold_only ? port_active(l) : !l->dreq_sent && port_active(l) && !send_dreq(l))
            destroy = take_id(l);
        dreq_sent = l->dreq_sent;  // l may be freed by another thread once unlocked
    }
    const bool ended = destroy != nullptr;
    destroy.reset();
    EVD_DBG(FI_LOG_EP_CTRL, "linger %p: %s\n", static_cast<void*>(l),
            ended       ? "ended at once"
            : dreq_sent ? "waiting for the peer's answer"
                        : "waiting for the port");
}

bool linger_hold_request(cm_id_ptr& id, cm_chan* chan) {
    reap();
    if (!id->verbs || !chan->q) return false;
    devctx* dev = devctx_by_name(ibv_get_device_name(id->verbs->device));
    if (!dev) return false;
    auto* l = new (std::nothrow) linger;
    if (!l) {
        devctx_put(dev);
        return false;
    }
    l->chan = chan;
    l->q = chan->q;
    l->dev = dev;
    l->port = id->port_num ? id->port_num : 1;
    l->hold_only = true;
    if (devctx_attach_eq(dev, l->q)) {
        devctx_put(dev);
        delete l;
        return false;
    }
    try {
        std::lock_guard lk(g_mu);
        list().push_back(l);  // unarmed: PORT_ACTIVE skips it, nothing reaps it
    } catch (const std::bad_alloc&) {  // no record: the caller keeps the id and rejects now
        devctx_detach_eq(dev, l->q);
        devctx_put(dev);
        delete l;
        return false;
    }
    {
        std::lock_guard lk(chan->mu);
        id->context = &l->owner;  // its events reach the record from now on
        l->id = std::move(id);
    }
    // Armed once listed; the port may have come back in between.
    cm_id_ptr destroy;
    {
        std::lock_guard lk(chan->mu);
        l->armed = true;
        if (l->ended || port_active(l)) destroy = take_id(l);
    }
    const bool ended = destroy != nullptr;
    destroy.reset();
    EVD_DBG(FI_LOG_EP_CTRL, "linger %p: request refused while the port is down: %s\n",
            static_cast<void*>(l), ended ? "ended at once" : "waiting for the port");
    return true;
}

cm_id_ptr linger_cm_event(cm_owner* owner, struct rdma_cm_event* ev, const cm_action& a) {
    auto* l = reinterpret_cast<linger*>(reinterpret_cast<char*>(owner) - offsetof(linger, owner));
    bool over = a.row->outcome == cm_outcome::shutdown || a.row->outcome == cm_outcome::error ||
                a.row->outcome == cm_outcome::removal ||
                ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT;
    EVD_DBG(FI_LOG_EP_CTRL, "linger %p: %s%s\n", static_cast<void*>(l), a.row->name,
            over ? ": the disconnect is done" : "");
    if (!over) return nullptr;
    l->ended = true;
    // Before arming, fi_close still uses the id: linger_arm destroys it.
    return l->armed ? take_id(l) : nullptr;
}

void linger_port_active(devctx* d, uint8_t port) {
    // The event may be read long after it was raised: act only if the port is
    // still active now (else the next PORT_ACTIVE does).
    if (!port_active_now(d->verbs, port)) return;
    // Ids to destroy are taken in batches of a fixed size and destroyed
    // outside the locks (nothing allocated: this runs on the async path); a
    // taken record has no id, so the next pass skips it.
    for (bool more = true; more;) {
        cm_id_ptr destroy[16];
        size_t n = 0;
        more = false;
        {
            std::lock_guard lk(g_mu);
            for (linger* l : list()) {
                if (l->dev != d || l->port != port || l->done.load()) continue;
                std::lock_guard clk(l->chan->mu);
                if (!l->armed || l->ended || !l->id || (l->dreq_sent && !l->hold_only)) continue;
                if (n == std::size(destroy)) {
                    more = true;
                    break;
                }
                if (l->hold_only || !send_dreq(l))
                    if (cm_id_ptr id = take_id(l)) destroy[n++] = std::move(id);
            }
        }
        for (size_t i = 0; i < n; ++i) destroy[i].reset();
    }
}

void linger_end_eq(eq* q) {
    while (linger* l = unlist_one([q](const linger* x) { return x->q == q; })) finish(l);
}

size_t linger_count() {
    std::lock_guard lk(g_mu);
    return list().size();
}

}  // namespace evd
