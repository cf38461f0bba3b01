// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The domain: one RDMA device (its librdmacm context) and one protection
// domain; parent of CQs, endpoints, MRs, counters, poll sets, shared rx
// contexts. Domain-level asynchronous events (port and device events) go to
// the EQ bound with fi_domain_bind.
#include "domain.h"

#include "dgram/av.h"
#include "msg/atomic_table.h"

#include "api.h"
#include "device/async.h"

#include <rdma/fi_ext_evd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "cq/cntr.h"
#include "cq/cq.h"
#include "eq/eq.h"
#include "eq/poll_set.h"
#include "eq/wait.h"
#include "mr/mem_monitor.h"
#include "mr/mr.h"
#include "msg/ep.h"
#include "msg/qp_pool.h"
#include "msg/srx.h"
#include "owners.h"

namespace evd {

namespace {


uint8_t first_active_port(devctx* d) {
    std::vector<ibv_port_attr> ports = devctx_refresh_ports(d);
    for (size_t p = 0; p < ports.size(); ++p)
        if (ports[p].state == IBV_PORT_ACTIVE) return static_cast<uint8_t>(p + 1);
    return 1;
}

void unbind_eq(domain* dom) {
    eq* q = dom->eq_bound.exchange(nullptr);
    if (!q) return;
    devctx_detach_eq(dom->dev, q);
    eq_bind_unref(q);
}

int domain_close(struct fid* f) {
    return guard([&] {
        domain* dom = domain_from_fid(reinterpret_cast<struct fid_domain*>(f));
        if (!dom) return -FI_EINVAL;
        if (dom->refs.busy()) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_close(domain %s): %d objects still open on it\n",
                     dom->dev->name.c_str(), dom->refs.n.load());
            return -FI_EBUSY;
        }
        {
            evd::lock_guard lk(dom->dev->reg_mu);
            auto& v = dom->dev->domains;
            for (auto it = v.begin(); it != v.end(); ++it)
                if (*it == dom) {
                    v.erase(it);
                    break;
                }
        }
        unbind_eq(dom);
        if (dom->mrc) {
            struct fi_evd_mr_cache_stats st;
            dom->mrc->stats(&st);
            EVD_INFO(FI_LOG_MR,
                     "%s: registration cache: %llu hits, %llu misses, %llu registrations, %llu "
                     "invalidations, %llu evictions, %llu uncached\n",
                     dom->dev->name.c_str(), static_cast<unsigned long long>(st.hits),
                     static_cast<unsigned long long>(st.misses),
                     static_cast<unsigned long long>(st.registrations),
                     static_cast<unsigned long long>(st.invalidations),
                     static_cast<unsigned long long>(st.evictions),
                     static_cast<unsigned long long>(st.uncached));
            dom->mrc.reset();  // deregisters what it kept, before the PD goes
            mem_monitor_put();
        }
        {
            struct fi_evd_qp_pool_stats st;
            qp_pool_stats(dom, &st);
            if (st.reused || st.retired)
                EVD_INFO(FI_LOG_DOMAIN,
                         "%s: QP reuse: %llu reused, %llu created, %llu kept, %llu discarded\n",
                         dom->dev->name.c_str(), static_cast<unsigned long long>(st.reused),
                         static_cast<unsigned long long>(st.created),
                         static_cast<unsigned long long>(st.retired),
                         static_cast<unsigned long long>(st.discarded));
        }
        qp_pool_purge_pd(dom->pd.get());  // kept QPs go before the PD
        dom->atomic_sink_mr.reset();
        if (int rc = release_with(dom->pd, ibv_dealloc_pd)) {
            EVD_WARN(FI_LOG_DOMAIN, "ibv_dealloc_pd: %d (a child object still uses it?)\n", rc);
            (void)dom->pd.release();  // left to the device context's close
        }
        devctx_put(dom->dev);  // held by devctx_by_name in domain_open
        fi_freeinfo(dom->info);
        return retire(dom, &dom->fab->refs);
    });
}

// The page base atomics discard their fetched value into (domain.h). A
// failure is logged and leaves base FI_SUM unavailable, nothing else.
void open_atomic_sink(domain* dom, struct ibv_pd* pd) {
    const long ps = sysconf(_SC_PAGESIZE);
    const size_t page = ps > 0 ? static_cast<size_t>(ps) : 4096;
    dom->atomic_sink.reset(static_cast<uint64_t*>(std::aligned_alloc(page, page)));
    if (!dom->atomic_sink) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_domain: no memory for the atomic sink: base FI_SUM off\n");
        return;
    }
    dom->atomic_sink_mr.reset(ibv_reg_mr(pd, dom->atomic_sink.get(), page, IBV_ACCESS_LOCAL_WRITE));
    if (!dom->atomic_sink_mr)
        EVD_WARN(FI_LOG_DOMAIN, "fi_domain: ibv_reg_mr(atomic sink) on %s: %s: base FI_SUM off\n",
                 dom->dev->name.c_str(), strerror(errno));
}

// The domain's registration cache, when FI_EVD_MR_CACHE* allow one and the
// memory monitor runs; without one every fi_mr_reg registers.
void open_mr_cache(domain* dom) {
    const params& p = get_params();
    if (!p.mr_cache || !p.mr_cache_max_count) return;
    if (mem_monitor_get()) return;  // logged: no userfaultfd
    mr_cache_limits lim;
    lim.max_count = p.mr_cache_max_count;
    lim.max_bytes = p.mr_cache_max_size;
    if (!lim.max_bytes) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
        if (pages > 0 && psize > 0)
            lim.max_bytes = static_cast<size_t>(pages) * static_cast<size_t>(psize) /
                            static_cast<size_t>(cpus) / 2;
    }
    for (size_t s = 0; s < kMrAccessSets; ++s)
        dom->mr_access[s] = mr_ibv_access(static_cast<uint64_t>(s) << kMrAccessShift,
                                          dom->dev->iwarp, dom->dev->atomics);
    try {
        dom->mrc = std::make_unique<mr_cache>(dom->pd.get(), lim,
                                              dom->dev->atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
    } catch (const std::bad_alloc&) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_domain: no memory for the registration cache: none\n");
        mem_monitor_put();
    }
}

int domain_bind(struct fid* f, struct fid* bfid, uint64_t flags) {
    return guard([&] {
        domain* dom = domain_from_fid(reinterpret_cast<struct fid_domain*>(f));
        if (!dom || !bfid) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain_bind: %s is not an evd object\n",
                     dom ? "the bound fid" : "the domain");
            return -FI_EINVAL;
        }
        if (bfid->fclass != FI_CLASS_EQ) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain_bind: only an EQ binds to a domain (fclass %zu)\n",
                     bfid->fclass);
            return -FI_EINVAL;
        }
        if (flags & ~static_cast<uint64_t>(api::kBindRegMr | FI_EVD_NOTIFY_ASYNC)) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain_bind: unknown flags 0x%llx\n",
                     static_cast<unsigned long long>(flags & ~static_cast<uint64_t>(api::kBindRegMr | FI_EVD_NOTIFY_ASYNC)));
            return -FI_EINVAL;
        }
        eq* q = eq_from_fid(bfid);
        if (!q) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain_bind: the EQ is not an evd EQ\n");
            return -FI_EINVAL;
        }
        eq* expected = nullptr;
        eq_bind_ref(q);
        // eq_flags is read by async dispatch once eq_bound is seen: write it
        // before publishing the EQ (not when the domain is already bound).
        if (!dom->eq_bound.load()) dom->eq_flags = flags;
        if (!dom->eq_bound.compare_exchange_strong(expected, q)) {
            eq_bind_unref(q);
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain_bind: domain %s already has an EQ\n",
                     dom->dev->name.c_str());
            return -FI_EINVAL;
        }
        if (int rc = devctx_attach_eq(dom->dev, q)) {
            dom->eq_bound.store(nullptr);
            eq_bind_unref(q);
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain_bind: cannot watch %s's async events: %d\n",
                     dom->dev->name.c_str(), rc);
            return rc;
        }
        return 0;
    });
}

// fi_control(FI_EVD_RESUME_TIMEOUT_SET/GET): arg points at an int, ms.
int resume_control(domain* dom, int command, int* v) {
    if (!v) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_control(domain, resume timeout): arg must point at an int\n");
        return -FI_EINVAL;
    }
    if (command == FI_EVD_RESUME_TIMEOUT_GET) {
        *v = static_cast<int>(dom->resume_timeout_ms.load());
        return 0;
    }
    if (*v < 0 || *v > FI_EVD_RESUME_TIMEOUT_MAX) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_control(FI_EVD_RESUME_TIMEOUT_SET): %d ms is outside "
                 "0..%d\n", *v, FI_EVD_RESUME_TIMEOUT_MAX);
        return -FI_EINVAL;
    }
    dom->resume_timeout_ms.store(static_cast<uint32_t>(*v));
    return 0;
}

// fi_control on a domain: the fail-fast switch, resumable connections and the
// counters of the cache and the QP pool (fi_ext_evd.h).
int domain_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        domain* dom = domain_from_fid(reinterpret_cast<struct fid_domain*>(f));
        if (!dom) return -FI_EINVAL;
        if (command == FI_EVD_QP_POOL_STATS) {
            auto* st = static_cast<struct fi_evd_qp_pool_stats*>(arg);
            if (!st) {
                EVD_WARN(FI_LOG_DOMAIN, "fi_control(FI_EVD_QP_POOL_STATS): NULL arg\n");
                return -FI_EINVAL;
            }
            qp_pool_stats(dom, st);
            return 0;
        }
        if (command == FI_EVD_MR_CACHE_STATS) {
            auto* st = static_cast<struct fi_evd_mr_cache_stats*>(arg);
            if (!st) {
                EVD_WARN(FI_LOG_DOMAIN, "fi_control(FI_EVD_MR_CACHE_STATS): NULL arg\n");
                return -FI_EINVAL;
            }
            if (!dom->mrc) return -FI_ENOSYS;
            dom->mrc->stats(st);
            return 0;
        }
        if (command == FI_EVD_RESUME_TIMEOUT_SET || command == FI_EVD_RESUME_TIMEOUT_GET)
            return resume_control(dom, command, static_cast<int*>(arg));
        if (command != FI_EVD_FAIL_FAST_SET && command != FI_EVD_FAIL_FAST_GET) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_control(domain): unsupported command %d\n", command);
            return -FI_ENOSYS;
        }
        auto* v = static_cast<int*>(arg);
        if (!v) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_control(domain, fail-fast): arg must point at an int\n");
            return -FI_EINVAL;
        }
        if (command == FI_EVD_FAIL_FAST_GET) {
            *v = dom->fail_fast.load() ? 1 : 0;
            return 0;
        }
        if (*v != 0 && *v != 1) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_control(FI_EVD_FAIL_FAST_SET): %d is not 0 or 1\n", *v);
            return -FI_EINVAL;
        }
        dom->fail_fast.store(*v == 1);
        return 0;
    });
}

int no_scalable_ep(struct fid_domain*, struct fi_info*, struct fid_ep**, void*) {
    EVD_WARN(FI_LOG_DOMAIN, "fi_scalable_ep: not supported (max_ep_tx_ctx is 1)\n");
    return -FI_ENOSYS;
}
int no_stx_ctx(struct fid_domain*, struct fi_tx_attr*, struct fid_stx**, void*) {
    EVD_WARN(FI_LOG_DOMAIN, "fi_stx_context: not supported (max_ep_stx_ctx is 0)\n");
    return -FI_ENOSYS;
}
int domain_query_atomic(struct fid_domain* f, enum fi_datatype dt, enum fi_op op,
                        struct fi_atomic_attr* attr, uint64_t flags) {
    domain* d = domain_from_fid(f);
    if (!d) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_query_atomic: not an evd domain\n");
        return -FI_EINVAL;
    }
    return atomic_query(d->dev->attr.orig_attr.atomic_cap, dt, op, attr, flags);
}
int no_query_collective(struct fid_domain*, enum fi_collective_op, struct fi_collective_attr*,
                        uint64_t) {
    return -FI_ENOSYS;
}

// Ops tables (defined at the end of the file).
extern struct fi_ops domain_fi_ops;
extern struct fi_ops_domain domain_ops;

}  // namespace

domain* domain_from_fid(struct fid_domain* f) {
    domain* d = from_fid<domain>(f);
    if (d && d->fid.fid.fclass != FI_CLASS_DOMAIN) return nullptr;
    return d;
}

namespace {

int check_domain_info(const struct fi_info* info) {
    if (!info->domain_attr || !info->domain_attr->name) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_domain: info->domain_attr->name must name the device\n");
        return -FI_EINVAL;
    }
    if (info->ep_attr && info->ep_attr->type != FI_EP_UNSPEC && info->ep_attr->type != FI_EP_MSG &&
        info->ep_attr->type != FI_EP_DGRAM) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_domain: info->ep_attr->type must be FI_EP_MSG or FI_EP_DGRAM\n");
        return -FI_EINVAL;
    }
    return 0;
}

// The domain's port (the device's first active one) and its state now.
void take_port(domain* dom, devctx* dev) {
    dom->port_num = first_active_port(dev);
    evd::lock_guard lk(dev->port_mu);
    if (dom->port_num <= dev->ports.size())
        dom->port_state.store(dev->ports[dom->port_num - 1].state);
}

}  // namespace

int domain_open(struct fid_fabric* fabfid, struct fi_info* info, struct fid_domain** out,
                void* context) {
    return guard([&]() -> int {
        fabric* fab = from_fid<fabric>(fabfid);
        if (!fab || !info || !out) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain: %s is NULL or not evd's\n",
                     !fab ? "fabric" : !info ? "info" : "domain");
            return -FI_EINVAL;
        }
        if (int r = check_domain_info(info)) return r;
        devctx* dev = devctx_by_name(info->domain_attr->name);
        if (!dev) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain: no RDMA device named '%s'\n",
                     info->domain_attr->name);
            return -FI_ENODEV;
        }
        struct dev_hold {  // devctx_by_name held it; the domain keeps it on success
            devctx* d;
            ~dev_hold() { devctx_put(d); }
        } hold{dev};
        info_ptr dup(fi_dupinfo(info));
        if (!dup) return -FI_ENOMEM;
        ibv_pd_ptr pd(ibv_alloc_pd(dev->ctx.get()));
        if (!pd) {
            int e = errno;
            EVD_WARN(FI_LOG_DOMAIN, "fi_domain: ibv_alloc_pd(%s): %d\n", dev->name.c_str(), e);
            return fi_err(e ? e : ENOMEM);
        }
        auto dom = std::make_unique<domain>();
        fid_init(*dom, FI_CLASS_DOMAIN, context, &domain_fi_ops, &domain_ops);
        dom->fid.mr = &mr_ops;
        dom->fab = fab;
        dom->dev = dev;
        dom->fail_fast.store(get_params().fail_fast);
        dom->resume_timeout_ms.store(static_cast<uint32_t>(get_params().resume_timeout_ms));
        if (dev->atomics) open_atomic_sink(dom.get(), pd.get());
        // Async events the device queued before this domain existed belong to
        // the domains already open (or to nobody): dispatch them now so the
        // new domain never receives stale port events (async.cpp).
        devctx_poll_async(dev);
        take_port(dom.get(), dev);
        {
            evd::lock_guard lk(dev->reg_mu);
            dev->domains.push_back(dom.get());  // may throw: nothing to undo yet
        }
        dom->pd = std::move(pd);
        open_mr_cache(dom.get());
        dom->info = dup.release();
        hold.d = nullptr;
        return hand_out(std::move(dom), fab->refs, out);
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops domain_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = domain_close,
    .bind = domain_bind,
    .control = domain_control,
    .ops_open = async_domain_ops_open,  // FI_EVD_ASYNC_OPS (async.cpp)
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_domain domain_ops = {
    .size = sizeof(struct fi_ops_domain),
    .av_open = av_open,
    .cq_open = cq_open,
    .endpoint = ep_open,
    .scalable_ep = no_scalable_ep,
    .cntr_open = cntr_open,
    .poll_open = poll_open,
    .stx_ctx = no_stx_ctx,
    .srx_ctx = srx_open,
    .query_atomic = domain_query_atomic,
    .query_collective = no_query_collective,
    .endpoint2 = nullptr,
};

}  // namespace

}  // namespace evd
