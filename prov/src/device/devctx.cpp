// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Device contexts: the process-wide table of RDMA devices (named by
// librdmacm's ibv_contexts), evd's own context on each, and the single
// serialized reader of that context's async fd.
//
// Why a context of its own: librdmacm opens one context per device for the
// whole process, and anyone may read its async fd (an application's own
// async thread, another provider). Two readers of one async fd each get some
// of the events, and a reader that finds the fd switched to non-blocking
// under it fails. evd's objects live on the context it opened, so the kernel
// delivers their events there, port and device events reach every context of
// the device, and librdmacm's contexts stay exactly as their users left them.
//
// Why one reader: evd's context is shared by every domain of the process on
// that device. Here its fd is made non-blocking once, readers try_lock read_mu
// and leave when another thread is already draining, and every event read is
// dispatched to its owner (async.cpp) before it is acknowledged.
#include "config.h"
#include "device/devctx.h"

#include <fcntl.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cstring>
#include <cerrno>

#include "device/async.h"
#include "device/device_netlink.h"
#include "device/inline_probe.h"
#include "eq/eq.h"
#include "msg/qp_pool.h"
#include "owners.h"

namespace evd {

namespace {

// The table is never destroyed by static destructors: libfabric calls the
// provider's cleanup from its own destructor, which may run after ours.
//
// librdmacm (rdma-core cma.c) counts, per device, the lists returned by
// rdma_get_devices() and the rdma_cm ids bound to it; it closes the device's
// context only when that count is zero AND it has noticed (on its next
// rdma_get_devices, which re-reads the verbs device list) that the device is
// gone. So evd keeps one "generation" per list it obtained and frees a list
// as soon as every device it references is either referenced by the newest
// list too or no longer used by evd.
// rdma_get_devices' list: its contexts stay open while the list lives.
using device_list_ptr = std::unique_ptr<struct ibv_context*, call_deleter<rdma_free_devices>>;

struct generation {
    device_list_ptr list;
    std::vector<devctx*> members;  // the devctx of each non-null entry
};
struct table {
    mutex mu;
    std::vector<std::unique_ptr<devctx>> devs EVD_GUARDED_BY(mu);  // never shrinks before cleanup
    std::vector<generation> gens EVD_GUARDED_BY(mu);  // oldest first; back() is the newest
};
table& tab() {
    static table* t = new table;
    return *t;
}

std::unique_ptr<devctx> make_devctx(struct ibv_context* verbs) {
    auto d = std::make_unique<devctx>();
    d->verbs = verbs;
    d->name = ibv_get_device_name(verbs->device);
    d->iwarp = verbs->device->transport_type == IBV_TRANSPORT_IWARP;
    d->ctx.reset(ibv_open_device(verbs->device));
    if (!d->ctx) {
        EVD_WARN(FI_LOG_DOMAIN, "%s: ibv_open_device failed: %s; device not used\n",
                 d->name.c_str(), strerror(errno));
        return nullptr;
    }
    if (ibv_query_device_ex(d->ctx.get(), nullptr, &d->attr)) {
        d->attr = {};
        if (ibv_query_device(d->ctx.get(), &d->attr.orig_attr)) {
            EVD_WARN(FI_LOG_DOMAIN, "ibv_query_device(%s) failed: %d\n", d->name.c_str(), errno);
            return nullptr;
        }
    }
    d->atomics = d->attr.orig_attr.atomic_cap != IBV_ATOMIC_NONE;
    {
        evd::lock_guard lk(d->port_mu);  // d is not listed yet; for the analysis
        d->ports.resize(d->attr.orig_attr.phys_port_cnt);
        for (size_t p = 0; p < d->ports.size(); ++p)
            if (ibv_query_port(d->ctx.get(), static_cast<uint8_t>(p + 1), &d->ports[p]))
                d->ports[p] = {};
    }
    return d;
}

bool in_gen(const generation& g, const devctx* d) {
    return std::find(g.members.begin(), g.members.end(), d) != g.members.end();
}

// Frees every list but the newest whose devices are all listed by the newest
// too or unused, then releases the devices no list references any more.
// Holding tab().mu.
void collect_locked() EVD_REQUIRES(tab().mu) {
    auto& gens = tab().gens;
    if (gens.empty()) return;
    for (size_t k = 0; k + 1 < gens.size();) {
        bool busy = false;
        for (devctx* m : gens[k].members)
            if (m->users > 0 && (m->dead.load() || !in_gen(gens.back(), m))) busy = true;
        if (busy) {
            ++k;
            continue;
        }
        gens.erase(gens.begin() + static_cast<std::ptrdiff_t>(k));
    }
    for (auto& d : tab().devs) {
        if (d->released) continue;
        bool ref = false;
        for (auto& g : gens) ref = ref || in_gen(g, d.get());
        if (ref) continue;
        // users == 0 here (a used device keeps its list), so nothing reads
        // verbs or ctx: no object of evd is left on the context.
        d->dead.store(true);
        d->released = true;
        d->verbs = nullptr;
        d->ctx.reset();
        EVD_INFO(FI_LOG_DOMAIN, "%s: device gone, context released\n", d->name.c_str());
    }
}

// Takes a fresh list from librdmacm (which also lets it notice removed and
// added devices), marks the devices it no longer lists dead, and frees the
// lists no longer needed. Holding tab().mu.
// The devctx of verbs context v, made and listed when v is new.
devctx* devctx_for(struct ibv_context* v) EVD_REQUIRES(tab().mu) {
    for (auto& d : tab().devs)
        if (!d->released && d->verbs == v) return d.get();
    std::unique_ptr<devctx> d = make_devctx(v);
    if (!d) return nullptr;
    tab().devs.push_back(std::move(d));
    return tab().devs.back().get();
}

void refresh_locked() EVD_REQUIRES(tab().mu) {
    // Ask libibverbs first: librdmacm complains on stderr when there is no
    // device, and a host without RDMA must stay quiet.
    int n = 0;
    struct ibv_device** vdevs = ibv_get_device_list(&n);
    if (vdevs) ibv_free_device_list(vdevs);
    generation g;
    if (n > 0) {
        int num = 0;
        g.list.reset(rdma_get_devices(&num));
        if (!g.list) return;  // keep what we have
    }
    tab().devs.reserve(tab().devs.size() + static_cast<size_t>(n > 0 ? n : 0));
    for (int i = 0; g.list && g.list.get()[i]; ++i)
        if (devctx* found = devctx_for(g.list.get()[i])) g.members.push_back(found);
    for (auto& d : tab().devs) {
        if (d->released || d->dead.load() || in_gen(g, d.get())) continue;
        d->dead.store(true);
        EVD_INFO(FI_LOG_DOMAIN, "%s: no longer listed by librdmacm (removed)\n", d->name.c_str());
    }
    // With no device at all the generation is empty: librdmacm keeps its
    // (dead) contexts until it sees a device list again, and evd lets go of
    // its own references.
    tab().gens.push_back(std::move(g));
    collect_locked();
    if (!tab().gens.empty() && !tab().gens.back().list) tab().gens.pop_back();
}

// True while the device is still registered with the kernel.
bool still_present(const devctx* d) {
    int index = ibv_get_device_index(d->verbs->device);
    if (index >= 0) {
        int r = rdma_nl_device_registered(static_cast<uint32_t>(index));
        if (r >= 0) return r == 1;
    }
    // Fallback: libibverbs enumerates over netlink too (allocates).
    int n = 0;
    struct ibv_device** list = ibv_get_device_list(&n);
    if (!list) return false;
    bool found = false;
    for (int i = 0; i < n && list[i]; ++i) found = found || list[i] == d->verbs->device;
    ibv_free_device_list(list);
    return found;
}

devctx* live_by_name_locked(const char* name) EVD_REQUIRES(tab().mu) {
    for (auto& d : tab().devs)
        if (!d->released && !d->dead.load() && d->name == name) return d.get();
    return nullptr;
}

void source_progress(eq_source* src) { devctx_poll_async(static_cast<devctx*>(src->arg)); }

// Makes the async fd non-blocking; false (errno set) while it is not: it is
// then never read (ibv_get_async_event would block the progressing thread)
// and the next caller tries again.
bool set_nonblock(devctx* d) {
    if (d->nonblock.load(std::memory_order_acquire)) return true;
    int fd = d->ctx->async_fd;  // evd's own context: its flags are evd's
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int err = errno;
        EVD_WARN(FI_LOG_DOMAIN, "%s: cannot make the async fd non-blocking: %d\n",
                 d->name.c_str(), err);
        errno = err;
        return false;
    }
    d->nonblock.store(true, std::memory_order_release);
    return true;
}

// Keeps ports[] current on port events (the domains' port snapshots are
// updated by async.cpp when it routes the event).
void note_port_event(devctx* d, const struct ibv_async_event& ev) {
    int port = ev.element.port_num;
    if (port < 1) return;
    struct ibv_port_attr pa {};
    if (ibv_query_port(d->ctx.get(), static_cast<uint8_t>(port), &pa) != 0) return;
    evd::lock_guard lk(d->port_mu);
    if (static_cast<size_t>(port) <= d->ports.size()) d->ports[port - 1] = pa;
}

}  // namespace

bool port_active_now(struct ibv_context* verbs, uint8_t port) {
    struct ibv_port_attr pa {};
    return verbs && port && ibv_query_port(verbs, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
}

std::vector<devctx*> devctx_all() {
    evd::lock_guard lk(tab().mu);
    refresh_locked();
    std::vector<devctx*> out;
    out.reserve(tab().devs.size());
    for (auto& d : tab().devs) {
        if (d->released || d->dead.load()) continue;
        out.push_back(d.get());
        ++d->users;
    }
    return out;
}

devctx* devctx_get(struct ibv_context* verbs) {
    if (!verbs) return nullptr;
    evd::lock_guard lk(tab().mu);
    for (int pass = 0; pass < 2; ++pass) {
        for (auto& d : tab().devs)
            if (!d->released && !d->dead.load() && d->verbs == verbs) return d.get();
        if (pass == 0) refresh_locked();  // a device librdmacm opened since
    }
    return nullptr;
}

devctx* devctx_by_name(const char* name) {
    if (!name) return nullptr;
    evd::lock_guard lk(tab().mu);
    devctx* d = live_by_name_locked(name);
    if (!d) {
        refresh_locked();  // added (or re-created) since the last look
        d = live_by_name_locked(name);
    }
    if (d) ++d->users;
    return d;
}

void devctx_put(devctx* d) noexcept {
    if (!d) return;
    evd::lock_guard lk(tab().mu);
    if (d->users <= 0) {
        EVD_WARN(FI_LOG_DOMAIN, "%s: devctx_put without a hold\n", d->name.c_str());
        return;
    }
    if (--d->users > 0) return;
    // The last user of this device left: if the device was removed meanwhile,
    // this is the moment evd can give it back (a fresh list lets librdmacm
    // notice the removal; freeing the old list drops evd's reference). A
    // fresh list costs two device scans, so only when the device looks gone.
    try {
        if (!d->dead.load() && d->verbs && still_present(d))
            collect_locked();
        else
            refresh_locked();
    } catch (...) {
        EVD_WARN(FI_LOG_DOMAIN, "%s: device list refresh failed (out of memory)\n", d->name.c_str());
    }
}

void devctx_put_all(const std::vector<devctx*>& v) noexcept {
    evd::lock_guard lk(tab().mu);
    for (devctx* d : v)
        if (d && d->users > 0) --d->users;
    collect_locked();
}

namespace {
// An EQ still reads d's async fd, or a domain is still open on it (provider
// cleanup; each lock is taken alone).
bool in_use(devctx* d) {
    {
        evd::lock_guard lk(d->attach_mu);
        if (!d->attached.empty()) return true;
    }
    evd::lock_guard lk(d->reg_mu);
    return !d->domains.empty();
}
}  // namespace

void devctx_cleanup() noexcept {
    evd::lock_guard lk(tab().mu);
    for (auto& d : tab().devs)
        if (in_use(d.get()))
            EVD_WARN(FI_LOG_DOMAIN, "%s: provider cleanup with objects still open\n", d->name.c_str());
    tab().devs.clear();
    tab().gens.clear();
}

std::vector<struct ibv_port_attr> devctx_refresh_ports(devctx* d) {
    evd::lock_guard lk(d->port_mu);
    for (size_t p = 0; p < d->ports.size(); ++p) {
        struct ibv_port_attr pa {};
        if (ibv_query_port(d->ctx.get(), static_cast<uint8_t>(p + 1), &pa) == 0) d->ports[p] = pa;
    }
    return d->ports;
}

uint32_t devctx_max_inline(devctx* d) {
    std::call_once(d->inline_once, [d] {
        d->max_inline = probe_max_inline(d->ctx.get());
        EVD_INFO(FI_LOG_DOMAIN, "%s: max_inline_data %u\n", d->name.c_str(), d->max_inline);
    });
    return d->max_inline;
}

uint32_t devctx_max_inline_ud(devctx* d) {
    std::call_once(d->inline_ud_once, [d] {
        d->max_inline_ud = probe_max_inline(d->ctx.get(), IBV_QPT_UD);
        EVD_INFO(FI_LOG_DOMAIN, "%s: max_inline_data %u (UD)\n", d->name.c_str(), d->max_inline_ud);
    });
    return d->max_inline_ud;
}

void devctx_poll_async(devctx* d) {
    if (!d || !d->ctx) return;  // released: only reachable after every user left
    if (!set_nonblock(d)) return;
    if (!d->read_mu.try_lock()) return;  // another thread is draining this fd
    evd::lock_guard lk(d->read_mu, std::adopt_lock);
    for (;;) {
        struct ibv_async_event ev;
        if (ibv_get_async_event(d->ctx.get(), &ev)) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                EVD_WARN(FI_LOG_DOMAIN, "%s: ibv_get_async_event: %d\n", d->name.c_str(), errno);
            break;
        }
        switch (ev.event_type) {
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
#if HAVE_DECL_IBV_EVENT_GID_CHANGE
        case IBV_EVENT_GID_CHANGE:
#endif
            note_port_event(d, ev);
            break;
        case IBV_EVENT_DEVICE_FATAL:
            // The context is unusable from now on: no new domain or fi_getinfo
            // entry on it; it is released once its last user closed.
            d->dead.store(true);
            qp_pool_purge_context(d->ctx.get());  // nothing kept holds the device
            break;
        default:
            break;
        }
        async_dispatch(d, ev);
        ibv_ack_async_event(&ev);
    }
}

int devctx_attach_eq(devctx* d, eq* q) {
    return guard([&]() -> int {
        if (!d || !q) return -FI_EINVAL;
        set_nonblock(d);
        evd::lock_guard lk(d->attach_mu);
        for (auto& a : d->attached) {
            if (a.q == q) {
                ++a.count;
                return 0;
            }
        }
        devctx::attachment a;
        a.q = q;
        a.count = 1;
        a.src = std::make_unique<eq_source>();
        a.src->fd = d->ctx->async_fd;
        a.src->progress = source_progress;
        a.src->arg = d;
        d->attached.reserve(d->attached.size() + 1);  // no throw after eq_add_source
        if (int rc = eq_add_source(q, a.src.get())) return rc;
        d->attached.push_back(std::move(a));
        return 0;
    });
}

void devctx_detach_eq(devctx* d, eq* q) {
    if (!d || !q) return;
    evd::lock_guard lk(d->attach_mu);
    for (auto it = d->attached.begin(); it != d->attached.end(); ++it) {
        if (it->q != q) continue;
        if (--it->count == 0) {
            eq_remove_source(q, it->src.get());
            d->attached.erase(it);
        }
        return;
    }
}

void devctx_register(devctx* d, std::unordered_map<const void*, async_target> devctx::*map,
                     const void* key, const async_target& t) {
    evd::lock_guard lk(d->reg_mu);
    (d->*map)[key] = t;
}

void devctx_unregister(devctx* d, std::unordered_map<const void*, async_target> devctx::*map,
                       const void* key) {
    evd::lock_guard lk(d->reg_mu);
    (d->*map).erase(key);
}

}  // namespace evd
