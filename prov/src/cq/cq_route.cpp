// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Which QPs complete into a CQ and which counters they count on
// (fi_ep_bind, fi_close of an endpoint; a resumable endpoint's leftovers
// cancelled when it lets go of its QP, and the CQ grown for its signaled
// requests), counter progress, and the pulls of the closing flush's markers
// and of progress probes.
#include "cq/cq_state.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "cq/cntr.h"
#include "device/devctx.h"
#include "domain.h"
#include "msg/ep.h"
#include "msg/ep_resume.h"

namespace evd {

namespace {
// The counters of route r whose completions land in c (per direction).
template <class F>
void for_cntrs(cq* c, ep* owner, cntr_route* r, F&& f) {
    if (c == owner->tx_cq)
        for (cntr* k : {r->send, r->read, r->write})
            if (k) f(k);
    if (c == owner->rx_cq && r->recv) f(r->recv);
}
}  // namespace

namespace {

// Forgets qp_num in c's tables (its owner, counter route, datagram entry,
// noted markers and probes); counters are the caller's to release.
void unlist_qp(cq* c, uint32_t qp_num) {
    {
        evd::lock_guard g(c->reg_mu);
        std::erase_if(c->qps, [&](const auto& p) { return p.first == qp_num; });
    }
    evd::lock_guard g(c->mu);
    std::erase_if(c->routes, [&](const auto& e) { return e.qpn == qp_num; });
    std::erase_if(c->ud, [&](const auto& e) { return e.first == qp_num; });
    // a later QP may get the same number
    std::erase(c->markers, qp_num);
    std::erase(c->probes, qp_num);
}

// Below, with the other steps of a resumable endpoint's QP.
void grow_for_resumable(cq* c, size_t depth) EVD_REQUIRES(c->mu);

}  // namespace

int cq_attach_qp(cq* c, uint32_t qp_num, ep* owner) {
    // A failed attach leaves nothing behind: the counters it added are
    // released, its entries forgotten (the caller does not publish the QP).
    const int rc = guard([&] {
        size_t n = 0;
        {
            evd::lock_guard g(c->reg_mu);
            n = c->qps.size() + 1;
        }
        {  // room for each QP's flush markers (send and receive, when the QP
           // has this CQ for both) and probe (admit does not allocate)
            evd::lock_guard g(c->mu);
            c->markers.reserve(2 * n);
            c->probes.reserve(n);
        }
        {
            evd::lock_guard g(c->reg_mu);
            c->qps.emplace_back(qp_num, owner);
        }
        if (ud_ep* u = ep_ud(owner); u && c == owner->rx_cq) {  // its receives carry a header
            evd::lock_guard g(c->mu);
            c->ud.emplace_back(qp_num, u);
        }
        cntr_route* r = ep_data_route(owner);
        if (!r) return 0;
        {
            evd::lock_guard g(c->mu);
            c->routes.push_back({qp_num, r});
            if (r->rs) grow_for_resumable(c, rs_depth(*r->rs, c == owner->tx_cq, c == owner->rx_cq));
        }
        int ret = 0;
        cntr* added[4] = {};
        size_t nadded = 0;
        for_cntrs(c, owner, r, [&](cntr* k) {
            if (!ret && !(ret = cntr_add_source(k, c))) added[nadded++] = k;
        });
        if (ret)
            for (size_t i = 0; i < nadded; ++i) cntr_del_source(added[i], c);
        return ret;
    });
    if (rc) unlist_qp(c, qp_num);
    return rc;
}

namespace {

// cq_attach_qp of a resumable endpoint's QP, under c->mu: its `depth`
// signaled requests may sit unread in c besides what c was opened for, so
// the ibv_cq grows to hold them (within the device's max_cqe). A device
// that cannot resize keeps its size, with a warning: the application must
// then size the CQ for every request (fi_evd(7), RESUMABLE CONNECTIONS).
void grow_for_resumable(cq* c, size_t depth) EVD_REQUIRES(c->mu) {
    c->rs_depth += depth;
    size_t want = c->base_cqe + c->rs_depth;
    const size_t max_cqe = static_cast<size_t>(c->dom->dev->attr.orig_attr.max_cqe);
    if (max_cqe && want > max_cqe) want = max_cqe;
    if (static_cast<size_t>(c->ibcq->cqe) >= want) return;
    if (int rc = ibv_resize_cq(c->ibcq.get(), static_cast<int>(want))) {
        if (!c->resize_warned)  // once per CQ: siw cannot resize at all
            EVD_WARN(FI_LOG_CQ, "ibv_resize_cq(%zu) for resumable endpoints: %s; the CQ holds "
                     "%d completions, and every request of a resumable endpoint is signaled: "
                     "size the CQ for all of them\n", want, strerror(rc < 0 ? -rc : rc),
                     c->ibcq->cqe);
        c->resize_warned = true;
        return;
    }
    EVD_DBG(FI_LOG_CQ, "CQ grown to %d completions for resumable endpoints\n", c->ibcq->cqe);
}

// cq_detach_qp of a resumable endpoint's QP (msg/ep_resume.h), under c->mu,
// once the QP carries out nothing more (ep_close_quiesce): what the ibv_cq
// holds is pulled into the backlog. False when the pull stopped early (the
// fatal notes are full: the caller delivers them and calls again); true
// once the ibv_cq is empty.
bool pull_for_detach(cq* c, fatal_note* notes, size_t& nnotes, int& pushed) EVD_REQUIRES(c->mu) {
    for (;;) {
        // one batch of notes at most (a batch makes at most kBatch): the
        // caller delivers them and calls again, so none is ever dropped
        if (nnotes) return false;
        try {
            cq_ring_reserve(c, kBatch);
        } catch (const std::bad_alloc&) {
            EVD_WARN(FI_LOG_CQ, "closing a resumable endpoint: no memory to pull its CQ\n");
            return true;  // what stays in the ibv_cq is read by fi_cq_read later
        }
        struct ibv_wc wcs[kBatch];
        const int got = ibv_poll_cq(c->ibcq.get(), static_cast<int>(kBatch), wcs);
        for (int i = 0; i < got; ++i) {
            if (!cq_admit(c, wcs[i], notes, nnotes) || c->internal) continue;
            cq_ring_push(c, wcs[i]);
            ++pushed;
        }
        if (got < static_cast<int>(kBatch)) return true;
    }
}

// A completion the ledgers made (cancelled, or found done at a resume) is
// counted as admit would count it and, unless hidden, pushed behind what c
// holds; `lost` counts the ones no memory could be had for.
void push_settled(cq* c, cntr_route* r, const struct ibv_wc& wc, uint8_t counter, bool recv,
                  size_t& lost, int& pushed) EVD_REQUIRES(c->mu) {
    const bool ok = wc.status == IBV_WC_SUCCESS;
    cntr* k = route_cntr(*r, static_cast<tx_kind>(counter), recv);
    if (k) ok ? cntr_inc(k) : cntr_inc_err(k);
    // hidden: never shown, flushed or not (cq_admit's rule)
    if (wc.wr_id == wr_id_suppressed() || c->internal) return;
    try {
        cq_ring_reserve(c, 1);
    } catch (const std::bad_alloc&) {
        ++lost;
        return;
    }
    cq_ring_push(c, wc);
    ++pushed;
}

// Then what the ledgers of this CQ's direction(s) still hold completes as
// flushed behind it, counted as admit would count it, and the route goes in
// the same hold: no completion of the QP is both reported by the device
// and cancelled here (one the device makes later names no route and is
// dropped by acct).
void cancel_resumable(cq* c, ep* owner, cntr_route* r, uint32_t qp_num, int& pushed,
                      bool keep_route = false) EVD_REQUIRES(c->mu) {
    size_t lost = 0;
    rs_cancel(*r->rs, c == owner->tx_cq, c == owner->rx_cq, qp_num,
              [&](const struct ibv_wc& wc, uint8_t counter, bool recv) {
                  c->mu.assert_held();  // rs_cancel runs under it (above)
                  push_settled(c, r, wc, counter, recv, lost, pushed);
              });
    if (lost)
        EVD_WARN(FI_LOG_CQ, "QP %u: no memory for %zu cancelled completions of a "
                 "resumable endpoint: not reported\n", qp_num, lost);
    if (!keep_route) std::erase_if(c->routes, [&](const auto& e) { return e.qpn == qp_num; });
}

}  // namespace

namespace {
// The depth a resumable QP added to c (cq_attach_qp) is given back.
void shrink_need(cq* c, ep* owner, cntr_route* r) EVD_REQUIRES(c->mu) {
    const size_t d = rs_depth(*r->rs, c == owner->tx_cq, c == owner->rx_cq);
    c->rs_depth -= std::min(c->rs_depth, d);
}
}  // namespace

namespace {

// The endpoint and counter route of QP qp_num in c (either may be null).
void lookup_qp(cq* c, uint32_t qp_num, ep*& owner, cntr_route*& r) {
    owner = nullptr;
    r = nullptr;
    {
        evd::lock_guard g(c->reg_mu);
        for (auto& [qpn, o] : c->qps)
            if (qpn == qp_num) owner = o;
    }
    evd::lock_guard g(c->mu);
    for (auto& e : c->routes)
        if (e.qpn == qp_num) r = e.r;
}

// A resumable endpoint's QP: c is pulled, then (cancel) what the ledgers of
// c's direction(s) hold completes as cancelled behind it. detach: the route
// goes with it and the depth it added is given back (cq_detach_qp,
// cq_detach_qp_keep); otherwise the QP stays attached (cq_cancel_resumable).
void pull_and_cancel(cq* c, ep* owner, cntr_route* r, uint32_t qp_num, bool detach,
                     bool cancel = true) {
    for (bool done = false; !done;) {
        fatal_note notes[kBatch] = {};
        size_t nnotes = 0;
        int pushed = 0;
        {
            evd::lock_guard g(c->mu);
            done = pull_for_detach(c, notes, nnotes, pushed);
            if (done) {
                if (detach) shrink_need(c, owner, r);
                if (cancel)
                    cancel_resumable(c, owner, r, qp_num, pushed, !detach);
                else
                    std::erase_if(c->routes, [&](const auto& e) { return e.qpn == qp_num; });
            }
        }
        if (pushed) cq_signal_backlog(c);
        cq_deliver_fatal(c, notes, nnotes);
    }
}

}  // namespace

void cq_detach_qp(cq* c, uint32_t qp_num) {
    ep* owner = nullptr;
    cntr_route* r = nullptr;
    lookup_qp(c, qp_num, owner, r);
    if (r && r->rs && owner) pull_and_cancel(c, owner, r, qp_num, true);
    unlist_qp(c, qp_num);
    if (r && owner) for_cntrs(c, owner, r, [&](cntr* k) { cntr_del_source(k, c); });
}

void cq_cancel_resumable(cq* c, uint32_t qp_num) {
    ep* owner = nullptr;
    cntr_route* r = nullptr;
    lookup_qp(c, qp_num, owner, r);
    if (r && r->rs && owner) pull_and_cancel(c, owner, r, qp_num, false);
}

void cq_detach_qp_keep(cq* c, uint32_t qp_num) {
    ep* owner = nullptr;
    cntr_route* r = nullptr;
    lookup_qp(c, qp_num, owner, r);
    if (r && r->rs && owner) pull_and_cancel(c, owner, r, qp_num, true, false);
    unlist_qp(c, qp_num);
    if (r && owner) for_cntrs(c, owner, r, [&](cntr* k) { cntr_del_source(k, c); });
}

void cq_retire_resumed(cq* c, uint32_t qp_num) {
    ep* owner = nullptr;
    cntr_route* r = nullptr;
    lookup_qp(c, qp_num, owner, r);
    if (!r || !r->rs || !owner || c != owner->tx_cq) return;
    int pushed = 0;
    size_t lost = 0;
    {
        evd::lock_guard g(c->mu);
        rs_retire_done(*r->rs, qp_num, [&](const struct ibv_wc& wc, uint8_t counter) {
            c->mu.assert_held();  // rs_retire_done runs under it (above)
            push_settled(c, r, wc, counter, false, lost, pushed);
        });
    }
    if (lost)
        EVD_WARN(FI_LOG_CQ, "QP %u: no memory for %zu completions of a resumed connection: "
                 "not reported\n", qp_num, lost);
    if (pushed) cq_signal_backlog(c);
}

int cq_progress(cq* c) {
    fatal_note notes[kBatch];
    size_t nnotes = 0;
    int pulled = 0, ret = 0, pushed = 0;
    {
        evd::lock_guard g(c->mu);
        // bounded: at most one CQ's worth per call
        for (size_t rounds = c->ring_cap / kBatch + 1; rounds; --rounds) {
            size_t room = c->internal ? kBatch : c->ring_cap - c->ring_count;
            if (!room) break;
            int want = static_cast<int>(std::min(room, kBatch));
            struct ibv_wc wcs[kBatch];
            int got = ibv_poll_cq(c->ibcq.get(), want, wcs);
            if (got < 0) {
                ret = -FI_EIO;
                break;
            }
            for (int i = 0; i < got; ++i) {
                if (!cq_admit(c, wcs[i], notes, nnotes)) continue;
                if (c->internal) continue;  // nobody reads it: counted is all
                cq_ring_push(c, wcs[i]);
                ++pushed;
            }
            pulled += got;
            if (got < want || nnotes) break;
        }
    }
    if (pushed) cq_signal_backlog(c);
    cq_deliver_fatal(c, notes, nnotes);
    return ret ? ret : pulled;
}

namespace {

// cq_pull_marker and cq_pull_probe: pulls until qp_num is found in `seen`.
int pull_until(cq* c, std::vector<uint32_t> cq::*seen, uint32_t qp_num) {
    fatal_note notes[kBatch] = {};
    size_t nnotes = 0;
    int ret = 0, pushed = 0;
    {
        evd::lock_guard g(c->mu);
        for (;;) {
            auto it = std::find((c->*seen).begin(), (c->*seen).end(), qp_num);
            if (it != (c->*seen).end()) {
                (c->*seen).erase(it);
                ret = 1;
                break;
            }
            if (nnotes) break;  // deliver that terminal event before pulling on
            cq_ring_reserve(c, kBatch);
            struct ibv_wc wcs[kBatch];
            int got = ibv_poll_cq(c->ibcq.get(), static_cast<int>(kBatch), wcs);
            if (got < 0) {
                ret = -FI_EIO;
                break;
            }
            for (int i = 0; i < got; ++i) {
                if (!cq_admit(c, wcs[i], notes, nnotes) || c->internal) continue;
                cq_ring_push(c, wcs[i]);
                ++pushed;
            }
            if (!got) break;
        }
    }
    if (pushed) cq_signal_backlog(c);
    cq_deliver_fatal(c, notes, nnotes);
    return ret;
}

}  // namespace

int cq_pull_marker(cq* c, uint32_t qp_num) { return pull_until(c, &cq::markers, qp_num); }

int cq_pull_probe(cq* c, uint32_t qp_num) { return pull_until(c, &cq::probes, qp_num); }

}  // namespace evd
