// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The FI_EVD_ASYNC_OPS domain extension (fi_ext_evd.h): port state, the
// async counters, arming an SRQ's limit.
#include "config.h"

#include "device/async.h"

#include <time.h>

#include <cstdio>
#include <cstring>
#include <iterator>

#include "domain.h"
#include "msg/ep.h"
#include "msg/srx.h"

namespace evd {

// ---------------------------------------------------------------- FI_EVD_ASYNC_OPS
namespace {

int op_port_state(struct fid_domain* f, struct fi_evd_port_state* st) {
    return guard([&]() -> int {
        domain* dom = from_fid<domain>(f);
        if (!dom || !st) {
            EVD_WARN(FI_LOG_DOMAIN, "port_state: %s\n", !dom ? "not an evd domain" : "state is NULL");
            return -FI_EINVAL;
        }
        *st = {};
        if (dom->dev) async_copy_name(st->device, dom->dev->name.c_str());
        st->port_num = dom->port_num;
        int s = dom->port_state.load(std::memory_order_acquire);
        if (s == IBV_PORT_NOP && dom->dev && dom->dev->ctx) {
            // No port event seen yet and the domain did not record the state.
            struct ibv_port_attr pa {};
            if (ibv_query_port(dom->dev->ctx.get(), dom->port_num, &pa) == 0) {
                int expected = IBV_PORT_NOP;
                dom->port_state.compare_exchange_strong(expected, pa.state);
                s = dom->port_state.load(std::memory_order_acquire);
            }
        }
        st->changes = dom->port_changes.load(std::memory_order_acquire);
        st->state = s;
        st->last_event = dom->port_last_event.load(std::memory_order_relaxed);
        st->last_change_ns = dom->port_change_ns.load(std::memory_order_relaxed);
        return 0;
    });
}

int op_counters(struct fid_domain* f, struct fi_evd_async_counters* c) {
    return guard([&]() -> int {
        domain* dom = from_fid<domain>(f);
        if (!dom || !c || !dom->dev) {
            EVD_WARN(FI_LOG_DOMAIN, "counters: %s\n",
                     !dom ? "not an evd domain" : (!c ? "counters is NULL" : "domain has no device"));
            return -FI_EINVAL;
        }
        devctx* d = dom->dev;
        c->events = d->async_events.load(std::memory_order_relaxed);
        c->delivered = d->delivered.load(std::memory_order_relaxed);
        c->undeliverable = d->undeliverable.load(std::memory_order_relaxed);
        c->suppressed = d->async_suppressed.load(std::memory_order_relaxed);
        return 0;
    });
}

int op_srq_arm(struct fid_domain* f, struct fid_ep* srx, size_t limit) {
    return guard([&]() -> int {
        domain* dom = from_fid<domain>(f);
        if (!dom || !dom->dev || !srx) {
            EVD_WARN(FI_LOG_DOMAIN, "srq_arm: %s\n", !srx ? "srx is NULL" : "not an evd domain");
            return -FI_EINVAL;
        }
        if (limit > UINT32_MAX) {
            EVD_WARN(FI_LOG_DOMAIN, "srq_arm: limit %zu too large\n", limit);
            return -FI_EINVAL;
        }
        struct ibv_srq* srq = srx_ibv(&srx->fid);
        devctx* d = dom->dev;
        {
            evd::lock_guard lk(d->reg_mu);
            auto it = srq ? d->srqs.find(srq) : d->srqs.end();
            if (it == d->srqs.end() || it->second.fid != &srx->fid) {
                EVD_WARN(FI_LOG_DOMAIN, "srq_arm: not a shared rx context of device %s\n",
                         d->name.c_str());
                return -FI_EINVAL;
            }
        }
        struct ibv_srq_attr attr {};
        attr.srq_limit = static_cast<uint32_t>(limit);
        int ret = ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT);
        if (ret) {
            EVD_WARN(FI_LOG_DOMAIN, "srq_arm: ibv_modify_srq(limit %zu) failed: %d\n", limit, ret);
            return ret == EOPNOTSUPP || ret == ENOSYS ? -FI_ENOSYS : fi_err(ret);
        }
        return 0;
    });
}

struct fi_evd_async_ops g_async_ops = {
    sizeof(struct fi_evd_async_ops),
    op_port_state,
    op_counters,
    op_srq_arm,
};

}  // namespace

int async_domain_ops_open(struct fid* fid, const char* name, uint64_t flags, void** ops,
                          void* context) {
    return guard([&]() -> int {
        if (!name || !ops) return -FI_EINVAL;
        if (std::strcmp(name, FI_EVD_ASYNC_OPS) != 0) return -FI_ENOSYS;
        if (!fid || fid->fclass != FI_CLASS_DOMAIN ||
            !from_fid<domain>(reinterpret_cast<struct fid_domain*>(fid))) {
            EVD_WARN(FI_LOG_DOMAIN, "%s asked of something that is not an evd domain\n", name);
            return -FI_EINVAL;
        }
        if (flags) {
            EVD_WARN(FI_LOG_DOMAIN, "%s: flags must be 0\n", name);
            return -FI_EBADFLAGS;
        }
        *ops = &g_async_ops;
        return 0;
    });
}

}  // namespace evd
