// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// QP reuse (qp_pool.h): one list of kept QPs for the process, each tagged
// with its PD (so with its domain), searched under one lock that is taken
// only when an endpoint gets or gives up its QP, never on the data path.
#include "msg/qp_pool.h"

#include <rdma/fi_ext_evd.h>

#include <chrono>
#include <cstring>
#include <new>

#include "domain.h"
#include "evd.h"
#include "lock.h"

namespace evd {

namespace {

using clock = std::chrono::steady_clock;

struct node {
    node* next = nullptr;
    uint64_t token = 0;
    qp_key key;
    struct ibv_context* ctx = nullptr;
    ibv_qp_ptr qp;
    bool idle = false;     // takeable (the time-wait is over); else waiting for TIMEWAIT_EXIT
    clock::time_point since;  // when it started waiting
};

mutex g_mu;  // guards g_head and g_next_token; taken last (a leaf)
node* g_head EVD_GUARDED_BY(g_mu) = nullptr;
uint64_t g_next_token EVD_GUARDED_BY(g_mu) = 1;

// Unlinks the nodes `pick` selects onto *out (destroyed by the caller after
// unlocking: destroying a QP waits for the device). g_mu held.
template <class F>
void unlink_if(node** out, F pick) {
    for (node** pp = &g_head; *pp;) {
        node* n = *pp;
        if (pick(*n)) {
            *pp = n->next;
            n->next = *out;
            *out = n;
        } else {
            pp = &n->next;
        }
    }
}

void destroy_all(node* list) {
    while (list) {
        node* n = list;
        list = n->next;
        if (n->qp) {
            uint32_t num = n->qp->qp_num;
            if (int rc = release_with(n->qp, ibv_destroy_qp)) {
                EVD_WARN(FI_LOG_EP_CTRL, "kept QP %u: ibv_destroy_qp: %s; left to the device's "
                         "close\n", num, strerror(rc));
                (void)n->qp.release();
            }
        }
        delete n;
    }
}

// Waiting nodes whose TIMEWAIT_EXIT is overdue. g_mu held.
void unlink_expired(node** out, clock::time_point now) {
    const auto limit = std::chrono::milliseconds(get_params().qp_pool_timewait_ms);
    unlink_if(out, [&](const node& n) {
        if (n.idle || now - n.since < limit) return false;
        EVD_INFO(FI_LOG_EP_CTRL,
                 "kept QP %u: no RDMA_CM_EVENT_TIMEWAIT_EXIT within %d ms "
                 "(FI_EVD_QP_POOL_TIMEWAIT): destroyed, not reused\n",
                 n.qp ? n.qp->qp_num : 0u, get_params().qp_pool_timewait_ms);
        return true;
    });
}

int to_reset(struct ibv_qp* qp) {
    struct ibv_qp_attr a {};
    a.qp_state = IBV_QPS_RESET;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

// Destroys every kept QP `pick` selects.
template <class F>
void purge(F pick) {
    node* dead = nullptr;
    {
        evd::lock_guard lk(g_mu);
        unlink_if(&dead, pick);
    }
    destroy_all(dead);
}

}  // namespace

bool operator==(const qp_key& a, const qp_key& b) {
    return a.pd == b.pd && a.send_cq == b.send_cq && a.recv_cq == b.recv_cq && a.srq == b.srq &&
           a.cap.max_send_wr == b.cap.max_send_wr && a.cap.max_recv_wr == b.cap.max_recv_wr &&
           a.cap.max_send_sge == b.cap.max_send_sge && a.cap.max_recv_sge == b.cap.max_recv_sge &&
           a.cap.max_inline_data == b.cap.max_inline_data && a.sq_sig_all == b.sq_sig_all;
}

qp_key qp_key_of(struct ibv_pd* pd, const struct ibv_qp_init_attr& a) {
    qp_key k;
    k.pd = pd;
    k.send_cq = a.send_cq;
    k.recv_cq = a.recv_cq;
    k.srq = a.srq;
    k.cap = a.cap;
    k.sq_sig_all = a.sq_sig_all;
    return k;
}

ibv_qp_ptr qp_pool_take(domain* d, const qp_key& k) {
    ibv_qp_ptr qp;
    node* dead = nullptr;
    node* got = nullptr;
    if (get_params().qp_pool_size) {
        evd::lock_guard lk(g_mu);
        unlink_expired(&dead, clock::now());
        for (node** pp = &g_head; *pp; pp = &(*pp)->next) {
            if ((*pp)->idle && (*pp)->key == k) {
                got = *pp;
                *pp = got->next;
                got->next = nullptr;
                break;
            }
        }
    }
    destroy_all(dead);
    // Reset here, by the endpoint that takes it, not when its time-wait
    // ended: that came inside whichever EQ read saw the TIMEWAIT_EXIT, and
    // on rxe a RESET can take milliseconds (the connect tail under churn,
    // docs/perf-msg.md). A QP that refuses RESET is destroyed instead.
    if (got) {
        if (int rc = to_reset(got->qp.get())) {
            EVD_WARN(FI_LOG_EP_CTRL, "kept QP %u: ibv_modify_qp(RESET): %s; destroyed\n",
                     got->qp->qp_num, strerror(rc));
            destroy_all(got);
            got = nullptr;
        }
    }
    if (got) {
        qp = std::move(got->qp);
        delete got;
        d->qpp.reused.fetch_add(1, std::memory_order_relaxed);
        EVD_DBG(FI_LOG_EP_CTRL, "QP %u reused\n", qp->qp_num);
    } else {
        d->qpp.created.fetch_add(1, std::memory_order_relaxed);
    }
    return qp;
}

uint64_t qp_pool_retire(domain* d, const qp_key& k, ibv_qp_ptr qp) {
    const size_t max = get_params().qp_pool_size;
    auto* n = max ? new (std::nothrow) node : nullptr;
    if (!n) {
        qp_pool_discarded(d);
        return 0;  // qp goes with the caller's pointer
    }
    node* dead = nullptr;
    uint64_t token = 0;
    const uint32_t num = qp->qp_num;
    {
        evd::lock_guard lk(g_mu);
        const auto now = clock::now();
        unlink_expired(&dead, now);
        size_t kept = 0;
        for (node* x = g_head; x; x = x->next) kept += x->key.pd == k.pd;
        if (kept < max) {
            n->token = token = g_next_token++;
            n->key = k;
            n->ctx = qp->context;
            n->qp = std::move(qp);
            n->since = now;
            n->next = g_head;
            g_head = n;
        }
    }
    destroy_all(dead);
    if (!token) {
        delete n;
        EVD_DBG(FI_LOG_EP_CTRL, "QP %u not kept: the domain keeps %zu (FI_EVD_QP_POOL_SIZE)\n",
                num, max);
        qp_pool_discarded(d);
        return 0;
    }
    d->qpp.retired.fetch_add(1, std::memory_order_relaxed);
    EVD_DBG(FI_LOG_EP_CTRL, "QP %u kept, waiting for the peer's time-wait\n", num);
    return token;
}

void qp_pool_discarded(domain* d) { d->qpp.discarded.fetch_add(1, std::memory_order_relaxed); }

void qp_pool_release(uint64_t token) {
    if (!token) return;
    // Takeable from now on; qp_pool_take resets it
    evd::lock_guard lk(g_mu);
    for (node* n = g_head; n; n = n->next) {
        if (n->token != token || n->idle) continue;
        n->idle = true;
        EVD_DBG(FI_LOG_EP_CTRL, "kept QP %u: time-wait over, idle\n", n->qp->qp_num);
        break;
    }
}

void qp_pool_drop(uint64_t token) {
    if (token) purge([&](const node& n) { return n.token == token && !n.idle; });
}

void qp_pool_purge_cq(struct ibv_cq* cq) {
    purge([&](const node& n) { return n.key.send_cq == cq || n.key.recv_cq == cq; });
}

void qp_pool_purge_srq(struct ibv_srq* srq) {
    if (srq) purge([&](const node& n) { return n.key.srq == srq; });
}

void qp_pool_purge_pd(struct ibv_pd* pd) {
    purge([&](const node& n) { return n.key.pd == pd; });
}

void qp_pool_purge_context(struct ibv_context* ctx) {
    purge([&](const node& n) { return n.ctx == ctx; });
}

void qp_pool_stats(domain* d, struct fi_evd_qp_pool_stats* st) {
    *st = {};
    st->reused = d->qpp.reused.load(std::memory_order_relaxed);
    st->created = d->qpp.created.load(std::memory_order_relaxed);
    st->retired = d->qpp.retired.load(std::memory_order_relaxed);
    st->discarded = d->qpp.discarded.load(std::memory_order_relaxed);
    evd::lock_guard lk(g_mu);
    for (node* n = g_head; n; n = n->next) {
        if (n->key.pd != d->pd.get()) continue;
        if (n->idle)
            ++st->idle;
        else
            ++st->waiting;
    }
}

}  // namespace evd
