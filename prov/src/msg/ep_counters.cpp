// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Counters of an active endpoint, of either kind (fi_cntr(3)): fi_ep_bind
// of a counter, the slots fi_enable sets up so that every send-queue
// completion finds the counter of its kind (cntr.h), the CQ of its own a
// counter-only direction completes into, and the references dropped at
// fi_close. The MSG data path (ep_data.cpp) fills a slot per work request.
#include <algorithm>

#include "cq/cntr.h"
#include "cq/cq.h"
#include "domain.h"
#include "msg/ep.h"
#include "msg/ep_dp.h"

namespace evd {

void ep_dp_free::operator()(ep_dp* d) const noexcept { delete d; }

int ep_data_bind(ep* e, struct fid* bfid, uint64_t flags) {
    cntr* c = cntr_from_fid(bfid);
    if (!c) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: not an evd counter\n");
        return -FI_EINVAL;
    }
    if (cntr_domain(c) != &e->dom->fid) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: the counter belongs to another domain\n");
        return -FI_EINVAL;
    }
    if (flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): FI_REMOTE_READ/FI_REMOTE_WRITE counters need "
                                 "FI_RMA_EVENT, which evd does not offer (verbs reports no "
                                 "completion for RMA it is the target of)\n");
        return -FI_EINVAL;
    }
    const uint64_t ok = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    if (!flags || (flags & ~ok)) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): flags 0x%llx: give a non-empty set of "
                                 "FI_SEND, FI_RECV, FI_READ, FI_WRITE\n",
                 static_cast<unsigned long long>(flags));
        return -FI_EINVAL;
    }
    if (e->enabled) {
        EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): bind counters before fi_enable\n");
        return -FI_EOPBADSTATE;
    }
    struct {
        uint64_t bit;
        cntr** slot;
        const char* name;
    } dirs[] = {{FI_SEND, &e->send_cntr, "FI_SEND"},
                {FI_RECV, &e->recv_cntr, "FI_RECV"},
                {FI_READ, &e->read_cntr, "FI_READ"},
                {FI_WRITE, &e->write_cntr, "FI_WRITE"}};
    for (auto& d : dirs)
        if ((flags & d.bit) && *d.slot) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_ep_bind(cntr): a %s counter is already bound\n", d.name);
            return -FI_EINVAL;
        }
    for (auto& d : dirs)
        if (flags & d.bit) {
            *d.slot = c;
            cntr_bind_ref(c);
        }
    return 0;
}

int ep_data_enable(ep* e) {
    bool tx = e->send_cntr || e->read_cntr || e->write_cntr;
    bool rx = e->recv_cntr != nullptr;
    if (!tx && !rx) return 0;
    ep_dp* d = e->dp.get();
    if (!d) return -FI_ENOMEM;
    if (!d->counted) {
        size_t n = e->info && e->info->tx_attr && e->info->tx_attr->size ? e->info->tx_attr->size
                                                                        : 256;
        n = std::min<size_t>(n, kMaxTxSlots);
        d->slots.reset(new (std::nothrow) tx_slot[n]);
        if (!d->slots) return -FI_ENOMEM;
        d->route.slots = d->slots.get();
        d->route.nslots = static_cast<uint32_t>(n);
        d->route.send = e->send_cntr;
        d->route.recv = e->recv_cntr;
        d->route.read = e->read_cntr;
        d->route.write = e->write_cntr;
        d->counted = true;
    }
    // A direction with a counter but no CQ completes into a CQ of its own,
    // which counter progress polls (freed with the endpoint: cq_bind_unref).
    bool need_tx = tx && !e->tx_cq, need_rx = rx && !e->rx_cq;
    if (need_tx || need_rx) {
        size_t sz = 0;
        if (need_tx) sz += e->info && e->info->tx_attr ? e->info->tx_attr->size : 256;
        if (need_rx) sz += e->info && e->info->rx_attr ? e->info->rx_attr->size : 256;
        cq* q = nullptr;
        if (int r = cq_open_internal(&e->dom->fid, std::max<size_t>(sz, 1), &q)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: internal CQ for a counter-only endpoint: %d\n", r);
            return r;
        }
        if (need_tx) {
            e->tx_cq = q;
            cq_bind_ref(q);
        }
        if (need_rx) {
            e->rx_cq = q;
            cq_bind_ref(q);
        }
    }
    return 0;
}

cntr_route* ep_data_route(ep* e) {
    ep_dp* d = e->dp.get();
    return d && (d->counted || d->rs) ? &d->route : nullptr;
}

void ep_data_close(ep* e) {
    for (cntr** k : {&e->send_cntr, &e->recv_cntr, &e->read_cntr, &e->write_cntr})
        if (*k) {
            cntr_bind_unref(*k);
            *k = nullptr;
        }
    e->dp.reset();
}

}  // namespace evd
