// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Lingering disconnects (see linger.h): records, their list, and the three
// ways one ends (rdma_cm says the disconnect is done, the EQ closes, the
// DREQ cannot be sent).
#include "cm/linger.h"

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <memory>
#include <algorithm>
#include <new>
#include <vector>

#include "device/devctx.h"
#include "domain.h"
#include "eq/eq.h"
#include "lock.h"
#include "msg/ep.h"
#include "msg/qp_pool.h"

namespace evd {

struct linger {
    cm_owner owner{cm_owner_kind::linger, this};  // what the id's context points at
    cm_id_ptr id;             // from linger_arm (or linger_hold_request) on
    cm_chan* chan = nullptr;  // the channel id lives on (the endpoint's reference)
    eq* q = nullptr;          // chan's EQ: reads dev's async fd while the record lives
    devctx* dev = nullptr;    // held (devctx_by_name)
    uint8_t port = 1;
    // Under chan->mu:
    bool armed EVD_GUARDED_BY(chan->mu) = false;  // the endpoint's QP is gone; the record owns the id
    bool dreq_sent EVD_GUARDED_BY(chan->mu) = false;  // rdma_disconnect was called (by fi_shutdown or here)
    // No DREQ of ours is due (the connection never came up in evd's view, or
    // rdma_cm reported it over), but the kernel's CM still has state for the
    // id and destroying it makes the CM send a DREQ or REJ: the id is only
    // held until the port is active.
    bool hold_only EVD_GUARDED_BY(chan->mu) = false;
    bool ended EVD_GUARDED_BY(chan->mu) = false;  // rdma_cm reported the connection over
    // The QP may be kept (qp_pool.h): the record lives on after the
    // disconnect until RDMA_CM_EVENT_TIMEWAIT_EXIT. Set at begin; cleared at
    // arm when the QP was not kept after all.
    bool timewait EVD_GUARDED_BY(chan->mu) = false;
    // kept for a DREQ of ours (not only for the time-wait)
    bool dreq_due EVD_GUARDED_BY(chan->mu) = false;
    // rdma_cm reported the disconnect done (time-wait runs)
    bool disconnected EVD_GUARDED_BY(chan->mu) = false;
    bool timewait_over EVD_GUARDED_BY(chan->mu) = false;  // RDMA_CM_EVENT_TIMEWAIT_EXIT came
    uint64_t token = 0;          // the kept QP's (qp_pool.h), from linger_arm
    // steady_clock ns after which a record waiting for TIMEWAIT_EXIT gives
    // up: give_up_at from the disconnect on; published to give_up_ns (which
    // reap reads) only once the record is armed, so that reap never frees a
    // record fi_close is still filling.
    int64_t give_up_at = 0;
    std::atomic<int64_t> give_up_ns{0};
    std::atomic<bool> done{false};  // nothing left but freeing the record
    bool attached = false;          // q reads dev's async fd for the record
};

namespace {

mutex g_mu;  // guards g_list; before any cm_chan::mu
std::vector<linger*>& list() EVD_REQUIRES(g_mu) {
    // Lives to exit (provider cleanup order), in static storage: the first
    // use (a close reaping) must not fail for want of memory.
    alignas(std::vector<linger*>) static unsigned char storage[sizeof(std::vector<linger*>)];
    static auto* v = new (storage) std::vector<linger*>();
    return *v;
}

bool port_active(const linger* l) { return port_active_now(l->dev->verbs, l->port); }

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// The disconnect is done; the time-wait runs from now (chan->mu held).
void note_disconnected(linger* l) EVD_REQUIRES(l->chan->mu) {
    l->disconnected = true;
    l->dreq_sent = true;  // nothing more to send
    const int64_t wait = get_params().qp_pool_timewait_ms;
    l->give_up_at = now_ns() + wait * 1000000;
    if (l->armed) l->give_up_ns.store(l->give_up_at);
}

// The kept QP's wait ends: reset for reuse after TIMEWAIT_EXIT, destroyed
// otherwise. chan->mu held (qp_pool's lock comes after it).
void end_wait(linger* l) EVD_REQUIRES(l->chan->mu) {
    if (!l->token) return;
    if (l->timewait_over)
        qp_pool_release(l->token);
    else
        qp_pool_drop(l->token);
    l->token = 0;
}

// Sends the DREQ. chan->mu held. False when it could not be sent: the id is
// then handed back for destruction (the kernel sends one DREQ as it goes).
bool send_dreq(linger* l) EVD_REQUIRES(l->chan->mu) {
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
cm_id_ptr take_id(linger* l) EVD_REQUIRES(l->chan->mu) {
    end_wait(l);
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
        evd::lock_guard lk(l->chan->mu);
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
    evd::lock_guard lk(g_mu);
    auto& v = list();
    auto it = std::find_if(v.begin(), v.end(), pick);
    if (it == v.end()) return nullptr;
    linger* l = *it;
    v.erase(it);
    return l;
}

// Frees the records that ended (ids already destroyed or handed back), and
// those whose TIMEWAIT_EXIT is overdue (rdma_cm may never report it).
void reap() {
    const int64_t now = now_ns();
    while (linger* l = unlist_one([now](const linger* x) {
               const int64_t g = x->give_up_ns.load();
               return x->done.load() || (g && now > g);
           })) {
        if (!l->done.load())
            EVD_INFO(FI_LOG_EP_CTRL,
                     "linger %p: no RDMA_CM_EVENT_TIMEWAIT_EXIT within %d ms of the disconnect "
                     "(FI_EVD_QP_POOL_TIMEWAIT): its QP is not reused\n",
                     static_cast<void*>(l), get_params().qp_pool_timewait_ms);
        finish(l);
    }
}

// A record being made: until it is listed and handed out, letting go of it
// undoes what it holds (its EQ's attachment to the device, the device).
struct record_undo {
    void operator()(linger* l) const noexcept {
        if (l->attached) devctx_detach_eq(l->dev, l->q);
        devctx_put(l->dev);
        delete l;
    }
};
using record_ptr = std::unique_ptr<linger, record_undo>;

// A record for an id on chan, on device dev (whose reference it takes) and
// port, its EQ reading the device's async fd (without it PORT_ACTIVE may
// never be read). nullptr when no record can be made (no memory, the EQ
// not attachable); dev's reference is then given back.
record_ptr new_record(devctx* dev, cm_chan* chan, uint8_t port) {
    auto* raw = new (std::nothrow) linger;
    if (!raw) {
        devctx_put(dev);
        return nullptr;
    }
    raw->chan = chan;
    raw->q = chan->q;
    raw->dev = dev;
    raw->port = port;
    record_ptr l(raw);
    if (devctx_attach_eq(dev, l->q)) return nullptr;
    l->attached = true;
    return l;
}

// Lists l: PORT_ACTIVE and reaping find it from now on. False, l not
// listed, when the list has no room.
bool list_record(linger* l) noexcept {
    try {
        evd::lock_guard lk(g_mu);
        list().push_back(l);
        return true;
    } catch (const std::bad_alloc&) {
        return false;
    }
}

}  // namespace

linger* linger_begin(msg_ep* e, bool keepable, qp_verdict* verdict) {
    *verdict = qp_verdict::destroy;
    reap();
    if (!e->id || !e->chan) return nullptr;
    devctx* dev = devctx_by_name(e->dom->dev->name.c_str());
    if (!dev) return nullptr;  // the device is gone: nobody to tell
    record_ptr l = new_record(dev, e->chan, e->dom->port_num);
    if (!l) return nullptr;
    // A CM message sent from a port that is down is lost, and on rxe its
    // failed send also leaves the device's QP1 unable to carry connection
    // management again until the device is re-created (docs/link-failures.md).
    const bool port_down = e->id->verbs && e->id->port_num &&
                           !port_active_now(e->id->verbs, e->id->port_num);
    // listed before arming: PORT_ACTIVE from now on finds it (and skips it);
    // no record: fi_close destroys the id at once
    if (!list_record(l.get())) return nullptr;
    bool keep = false;
    {
        evd::lock_guard lk(l->chan->mu);  // e->chan: dispatch reads the context under it
        evd::lock_guard elk(e->mu);        // and sets e's flags under this one too
        const bool want_dreq = e->cm_established && !e->cm_disconnected;
        // The QP is kept when nothing but a clean disconnect ended (or ends)
        // the connection; it waits here unless its time-wait is over.
        const bool clean = !e->cm_disconnected || e->cm_clean_end;
        if (keepable && clean && !port_down)
            *verdict = e->cm_timewait_over ? qp_verdict::keep_now : qp_verdict::keep_wait;
        l->timewait = *verdict == qp_verdict::keep_wait;
        keep = want_dreq || (port_down && e->cm_started) || l->timewait;
        if (keep) {
            l->hold_only = !want_dreq && !l->timewait;
            l->dreq_due = want_dreq;
            l->dreq_sent = want_dreq && e->disconnect_sent;  // a held id sends none of its own
            if (l->timewait && e->cm_disconnected) note_disconnected(l.get());
            if (e->id->port_num) l->port = e->id->port_num;
            e->id->context = &l->owner;
        } else {
            e->id->context = nullptr;  // no more dispatch to e
        }
    }
    if (!keep) {
        (void)unlist_one([p = l.get()](const linger* x) { return x == p; });
        return nullptr;
    }
    return l.release();
}

void linger_arm(linger* l, cm_id_ptr id, uint64_t token) {
    cm_id_ptr destroy;
    bool dreq_sent = false;
    {
        evd::lock_guard lk(l->chan->mu);
        l->id = std::move(id);
        l->armed = true;
        if (l->timewait && token) {
            l->token = token;
            if (l->disconnected) l->give_up_ns.store(l->give_up_at);
        } else {  // the QP was not kept after all
            if (token) qp_pool_drop(token);
            l->timewait = false;
        }
        // Nothing left to wait for: no DREQ of ours due or it was answered
        // (the record waited only for the time-wait of a QP not kept).
        const bool idle = !l->timewait && ((!l->dreq_due && !l->hold_only) || l->disconnected);
        if (l->ended || idle)
            destroy = take_id(l);  // (a kept QP's wait ends in it)
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
    record_ptr owned = new_record(dev, chan, id->port_num ? id->port_num : 1);
    if (!owned) return false;
    // unarmed: PORT_ACTIVE skips it, nothing reaps it; no record: the caller
    // keeps the id and rejects now
    if (!list_record(owned.get())) return false;
    linger* l = owned.release();  // listed: the list owns it
    {
        evd::lock_guard lk(l->chan->mu);
        l->hold_only = true;
        id->context = &l->owner;  // its events reach the record from now on
        l->id = std::move(id);
    }
    // Armed once listed; the port may have come back in between.
    cm_id_ptr destroy;
    {
        evd::lock_guard lk(l->chan->mu);
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
    auto* l = static_cast<linger*>(owner->self);
    l->chan->mu.assert_held();  // dispatch took it: the id lives on l->chan
    const bool tw_exit = ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT;
    const bool shutdown = a.row->outcome == cm_outcome::shutdown;
    // A kept QP waits on after a clean disconnect, for the time-wait's end.
    const bool wait_on = shutdown && l->timewait && ev->status == 0;
    bool over = (shutdown && !wait_on) || a.row->outcome == cm_outcome::error ||
                a.row->outcome == cm_outcome::removal || tw_exit;
    EVD_DBG(FI_LOG_EP_CTRL, "linger %p: %s%s\n", static_cast<void*>(l), a.row->name,
            over      ? ": the disconnect is done"
            : wait_on ? ": the disconnect is done; waiting for the time-wait's end"
                      : "");
    if (wait_on) note_disconnected(l);
    if (!over) return nullptr;
    l->ended = true;
    l->timewait_over = tw_exit && l->timewait && l->disconnected;
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
            evd::lock_guard lk(g_mu);
            for (linger* l : list()) {
                if (l->dev != d || l->port != port || l->done.load()) continue;
                evd::lock_guard clk(l->chan->mu);
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
    evd::lock_guard lk(g_mu);
    return list().size();
}

}  // namespace evd
