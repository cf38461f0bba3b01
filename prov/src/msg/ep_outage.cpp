// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// The outage of a resumable connection (ep_outage.h): held back, drained,
// carried through the session's steps, ended with its record.
#include "msg/ep_outage.h"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "cm/cm.h"
#include "cm/cm_deadline.h"
#include "cq/cq.h"
#include "domain.h"
#include "msg/ep_dp.h"
#include "msg/ep_exchange.h"
#include "msg/ep_keepalive.h"
#include "msg/qp_flush.h"
#include "resume/failure_table.h"
#include "resume/resume_err.h"

namespace evd {

namespace {

// How often the drain looks for its markers while they have not come out.
constexpr int kDrainPollMs = 10;

uint64_t outage_now_ms() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

// The outage begins or goes on: its next step at once (the timer's, under
// the channel's lock, where the endpoint's own lock may be taken).
void outage_schedule_now(msg_ep* m) {
    if (!m->in_outage.exchange(true)) {
        m->probing.store(false);  // the outage's step replaces a probe's deadline
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: its QP failed: the failure is held back while the "
                 "connection is resumable\n", static_cast<void*>(m));
    }
    cm_deadline_set_outage(m->chan, m, 1);
}

// The receive marker, behind the application's receives, posted while the
// QP still takes receives (one posted to a QP in error may never be
// flushed). Not the closing flush's (qp_flush.h): that one keeps its own
// flag, for fi_close, and this one is consumed here.
bool drain_recv_marker(struct ibv_qp* qp) {
    struct ibv_recv_wr wr {};
    wr.wr_id = wr_id_flush_marker();
    struct ibv_recv_wr* bad = nullptr;
    return post_errno(ibv_post_recv(qp, &wr, &bad)) == 0;
}

// The send marker, behind whatever the send queue holds: 0, or an errno
// (ENOMEM while the queue is still full).
int drain_send_marker(struct ibv_qp* qp) {
    struct ibv_send_wr wr {};
    wr.wr_id = wr_id_flush_marker();
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    struct ibv_send_wr* bad = nullptr;
    return post_errno(ibv_post_send(qp, &wr, &bad));
}

// The QP to the error state, the receive marker ahead of that when it can
// still go in.
void drain_begin(msg_ep* e, uint64_t now) EVD_REQUIRES(e->mu) {
    msg_ep::outage_drain& d = e->drain;
    d = {};
    d.on = true;
    d.t0_ms = now;
    struct ibv_qp* qp = e->qp.get();
    if (!qp) return;
    struct ibv_qp_attr a {};
    struct ibv_qp_init_attr init {};
    const bool in_error = !ibv_query_qp(qp, &a, IBV_QP_STATE, &init) && a.qp_state == IBV_QPS_ERR;
    if (!in_error) {
        if (!qp->srq && e->rx_cq) d.rx_marker = drain_recv_marker(qp);
        if (int rc = qp_to_error(qp))
            EVD_WARN(FI_LOG_EP_CTRL, "ep %p: QP %u to the error state: %s\n",
                     static_cast<void*>(e), qp->qp_num, strerror(rc));
    }
}

// One look at the drain: true once every completion of the failed QP has
// been read (or it cannot be known better: FI_EVD_FLUSH_TIMEOUT passed).
bool drain_step(msg_ep* e, ep_resume& rs, uint64_t now) EVD_REQUIRES(e->mu) {
    msg_ep::outage_drain& d = e->drain;
    struct ibv_qp* qp = e->qp.get();
    if (!qp || !e->tx_cq) return true;
    const bool one_cq = e->rx_cq == e->tx_cq;
    if (!d.tx_posted) {
        const int r = drain_send_marker(qp);
        if (r == 0) {
            d.tx_posted = true;
            d.want = 1 + (one_cq && d.rx_marker ? 1 : 0);
        } else if (r != ENOMEM && r != EAGAIN) {
            EVD_WARN(FI_LOG_EP_CTRL, "ep %p: drain marker on QP %u: %s\n",
                     static_cast<void*>(e), qp->qp_num, strerror(r));
            d.tx_posted = true;  // nothing to wait for: the timeout decides
            d.want = -1;
        }
    }
    // Pulled even before the marker is posted: a full send queue empties
    // into the CQ. Markers are told apart by QP number only.
    // A pull stops at a batch that noted a failure (each held completion
    // notes its QP): pulled again, within bounds, so a deep queue drains in
    // one step rather than a batch a tick.
    for (int pulls = 0; d.want > 0 && pulls < 64; ++pulls) {
        const int got = cq_pull_marker(e->tx_cq, qp->qp_num);
        if (got < 0) break;
        if (got == 0) continue;
        --d.want;
        if (one_cq && d.rx_marker && d.want == 0) d.rx_seen = true;
    }
    for (int pulls = 0; !one_cq && d.rx_marker && !d.rx_seen && e->rx_cq && pulls < 64; ++pulls)
        d.rx_seen = cq_pull_marker(e->rx_cq, qp->qp_num) == 1;
    bool rx_done = d.rx_seen || qp->srq || !e->rx_cq;
    if (!rx_done && !d.rx_marker) {
        // the QP failed by itself: no marker could go behind its receives;
        // each one on the wire comes back flushed (counted as held)
        for (int pulls = 0; pulls < 64 && cq_progress(one_cq ? e->tx_cq : e->rx_cq) > 0; ++pulls) {
        }
        evd::lock_guard g(rs.mu);
        rx_done = rs.held_rx >= rs.rx.on_wire();
    }
    const bool tx_done = d.tx_posted && d.want == 0;
    if (tx_done && rx_done) return true;
    const int limit = get_params().flush_timeout_ms;
    if (now - d.t0_ms >= static_cast<uint64_t>(limit > 0 ? limit : 0)) {
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: QP %u: its drain did not complete in %d ms "
                 "(FI_EVD_FLUSH_TIMEOUT): what did not come out is taken as not carried out\n",
                 static_cast<void*>(e), qp->qp_num, limit);
        return true;
    }
    return false;
}

// The drain is over: what was on the failed QP is in doubt, its flushed
// receives are queued again, and the session takes its next step.
resume::session_step drain_done(msg_ep* e, ep_resume& rs, uint64_t now) EVD_REQUIRES(e->mu) {
    e->drain.on = false;
    evd::lock_guard g(rs.mu);
    rs.tx.qp_failed();
    rs.rx.qp_failed();
    rs.held_tx = rs.held_rx = 0;
    EVD_DBG(FI_LOG_EP_CTRL, "ep %p: drained in %llu ms: %llu sends and %llu receives kept\n",
            static_cast<void*>(e), static_cast<unsigned long long>(now - e->drain.t0_ms),
            static_cast<unsigned long long>(rs.tx.outstanding()),
            static_cast<unsigned long long>(rs.rx.outstanding()));
    return rs.sess.drained(now);
}

// The outage is over without resuming: what the ledgers hold completes as
// cancelled in the CQs, in order, ahead of any terminal event.
void cancel_held(msg_ep* e, ep_resume& rs) EVD_REQUIRES(e->mu) {
    {
        evd::lock_guard g(rs.mu);
        if (rs.ended) return;
        rs.ended = true;
        rs.armed = false;
    }
    struct ibv_qp* qp = e->qp.get();
    if (!qp) return;
    if (e->tx_cq) cq_cancel_resumable(e->tx_cq, qp->qp_num);
    if (e->rx_cq && e->rx_cq != e->tx_cq) cq_cancel_resumable(e->rx_cq, qp->qp_num);
}

// The session gave up: everything cancelled, then the terminal record. An
// id to destroy (the attempt's, or a request refused).
cm_id_ptr give_up(msg_ep* e, ep_resume& rs, resume::give_up why, uint64_t now)
    EVD_REQUIRES(e->mu) {
    resume::outage o;
    int cause = 0;
    {
        evd::lock_guard g(rs.mu);
        o.why = why;
        o.attempts = rs.sess.attempts();
        o.generation = rs.sess.generation();
        cause = rs.cause_status;
    }
    o.ms = now - e->outage_t0_ms;
    o.cause_source = resume::failure_source::completion;
    o.cause_code = cause;
    o.refusal = e->r_refusal;
    cm_id_ptr dead = ep_exchange_abandon(e);
    cancel_held(e, rs);
    e->in_outage.store(false);
    if (why == resume::give_up::closed || !ep_claim_terminal(e)) return dead;
    const struct fi_evd_resume_err rec = resume::resume_err_make(o);
    const wc_row* r = wc_lookup(cause);
    // err says how the connection ended (fi_evd(7), RESUMABLE CONNECTIONS);
    // prov_errno and err_data say why resuming did not help
    int err = FI_ETIMEDOUT;
    switch (why) {
    case resume::give_up::deadline: err = FI_ETIMEDOUT; break;
    case resume::give_up::refused:
    case resume::give_up::peer_gone: err = FI_ECONNREFUSED; break;
    case resume::give_up::verdict: err = FI_ECONNABORTED; break;
    default: err = r ? r->fi_errno : FI_EOTHER; break;
    }
    EVD_WARN(FI_LOG_EP_CTRL, "ep %p: its connection was not resumed (%s) %llu ms after its QP "
             "failed (%s), %u attempts: ended\n", static_cast<void*>(e),
             resume::give_up_name(why), static_cast<unsigned long long>(o.ms),
             r ? r->name : "no failed completion", o.attempts);
    ep_post_terminal_err(e, err, resume::resume_prov_errno(why), &rec, sizeof(rec));
    return dead;
}

}  // namespace

bool ep_outage_noted(ep* e, int status) {
    msg_ep* m = ep_msg(e);
    ep_resume* rs = ep_rs_of(e);
    if (!m || !rs) return false;
    const bool port_down = rs_port_down(*rs, status);
    {
        evd::lock_guard g(rs->mu);
        bool began = false;
        if (!rs_hold_failure(*rs, status, port_down, &began)) return false;
        if (rs->ended) return true;  // over already: the note is moot
    }
    outage_schedule_now(m);
    return true;
}

bool ep_outage_stalled(msg_ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs) return false;
    {
        evd::lock_guard g(rs->mu);
        bool began = false;
        // a QP that made no progress since its port returned failed for the
        // path's reason, as one whose retries ran out
        if (!rs_hold_failure(*rs, IBV_WC_RETRY_EXC_ERR, false, &began)) return false;
        if (rs->ended) return true;
    }
    outage_schedule_now(e);
    return true;
}

void ep_outage_port_active(msg_ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs) return;
    {
        evd::lock_guard g(rs->mu);
        if (!rs->held || rs->ended) return;
        rs->port_up = true;
    }
    cm_deadline_set_outage(e->chan, e, 1);
}

bool ep_outage_ignores_cm(msg_ep* e, int event) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs) return false;
    {
        evd::lock_guard g(rs->mu);
        if (!rs->armed && !rs->held) return false;
    }
    return resume::failure_verdict_of(resume::failure_source::cm_event, event) ==
           resume::failure_verdict::ignored;
}

void ep_outage_arm(msg_ep* e, bool active) {
    ep_resume* rs = ep_rs_of(e);
    // iWARP rides nothing through: its connection is its TCP stream, and a
    // failed stream is the end (fi_evd(7), IWARP); the accounting still runs
    if (!rs || e->dom->dev->iwarp) return;
    {
        evd::lock_guard g(rs->mu);
        if (rs->ended || rs->held) return;
        rs->armed = true;
        rs->sess = resume::session(active ? resume::side::active : resume::side::passive,
                                   {rs->timeout_ms});
    }
    ep_keepalive_start(e);
}

void ep_outage_close(ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs) return;
    {
        evd::lock_guard g(rs->mu);
        rs->armed = false;
        rs->ended = true;
    }
    if (msg_ep* m = ep_msg(e)) m->in_outage.store(false);
}

void ep_outage_disarm(ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs) return;
    bool under_way = false;
    {
        evd::lock_guard g(rs->mu);
        rs->armed = false;
        under_way = rs->held && !rs->ended;
    }
    // an outage under way ends at its next step, which comes at once: what
    // it holds completes as cancelled there (the channel's lock is needed
    // for its attempt's id, and the caller may hold locks above it)
    if (msg_ep* m = ep_msg(e); m && under_way) cm_deadline_set_outage(m->chan, m, 1);
}

void ep_outage_hold(msg_ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs) return;
    {
        evd::lock_guard g(rs->mu);
        if (rs->held || rs->ended) return;
        rs->held = true;
        rs->held_tx = rs->held_rx = 0;
        rs->cause_status = 0;  // nothing failed here: the peer's request came first
    }
    e->outage_t0_ms = outage_now_ms();
    e->in_outage.store(true);
}

cm_id_ptr ep_outage_end(msg_ep* e) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs) return nullptr;
    {
        // held, not only in_outage: the note that sets that may still be on
        // its way from the CQ reader
        evd::lock_guard g(rs->mu);
        if (!rs->held || rs->ended) return nullptr;
    }
    EVD_INFO(FI_LOG_EP_CTRL, "ep %p: its connection ended during an outage: what it held is "
             "cancelled\n", static_cast<void*>(e));
    cm_id_ptr dead = ep_exchange_abandon(e);
    cancel_held(e, *rs);
    e->in_outage.store(false);
    return dead;
}

uint64_t ep_outage_now_ms() { return outage_now_ms(); }

cm_id_ptr ep_outage_steps(msg_ep* e, resume::session_step st, uint64_t now) {
    ep_resume* rsp = ep_rs_of(e);
    if (!rsp) return nullptr;
    ep_resume& rs = *rsp;
    cm_id_ptr dead;
    {
        // a session that ended on a path whose step was not this one's
        // still ends the outage here: no endpoint is left held for ever
        evd::lock_guard g(rs.mu);
        if (!st.end && !rs.ended && rs.held && rs.sess.state() == resume::session_state::ended) {
            st.end = true;
            st.why = rs.sess.why();
        }
    }
    if (st.reject && e->rid && st.reject_gen == e->rgen && !st.end) {
        // the request it holds is overtaken or came too late
        dead = ep_exchange_refuse_pending(e, resume::resume_refusal::stale_generation);
    }
    if (st.qp_to_error && !e->drain.on && !st.end) {
        drain_begin(e, now);
        if (drain_step(e, rs, now)) {
            st = drain_done(e, rs, now);
            e->chan->mu.assert_held();  // every step runs under it (ep_outage.h)
            return cm_chan_keep_one(e->chan, ep_outage_steps(e, st, now), std::move(dead));
        }
    }
    if (st.connect && !st.end) {
        cm_id_ptr old;
        const bool sent = ep_exchange_attempt(e, &old);
        e->chan->mu.assert_held();
        dead = cm_chan_keep_one(e->chan, std::move(dead), std::move(old));
        if (!sent) {
            evd::lock_guard g(rs.mu);
            st = rs.sess.attempt_failed(now, resume::attempt_outcome::unreachable);
        }
    }
    if (st.accept && !st.end) {
        e->chan->mu.assert_held();
        dead = cm_chan_keep_one(e->chan, std::move(dead), ep_exchange_accept(e, now));
        evd::lock_guard g(rs.mu);
        if (rs.sess.state() == resume::session_state::ended) st.end = true, st.why = rs.sess.why();
    }
    if (st.end) {
        e->chan->mu.assert_held();
        return cm_chan_keep_one(e->chan, give_up(e, rs, st.why, now), std::move(dead));
    }
    uint64_t due = 0;
    {
        evd::lock_guard g(rs.mu);
        due = rs.sess.due();
    }
    if (e->drain.on) due = std::min<uint64_t>(due, now + kDrainPollMs);
    if (due != UINT64_MAX)
        cm_deadline_set_outage(e->chan, e, due > now ? static_cast<int>(due - now) : 1);
    return dead;
}

cm_id_ptr ep_outage_tick(msg_ep* e) {
    evd::lock_guard lk(e->mu);
    ep_resume* rsp = ep_rs_of(e);
    if (!rsp) return nullptr;
    ep_resume& rs = *rsp;
    const uint64_t now = outage_now_ms();
    resume::session_step st;
    {
        evd::lock_guard g(rs.mu);
        if (!rs.held || rs.ended) return nullptr;
        if (rs.sess.state() == resume::session_state::connected &&
            !(e->drain.on || e->rid)) {
            st = rs.sess.failed(now, true);
            e->outage_t0_ms = now;
        } else if (rs.port_up) {
            rs.port_up = false;
            st = rs.sess.port_active(now);  // an active side waiting tries now
            if (!st.connect && !st.end) st = rs.sess.tick(now);
        } else {
            st = rs.sess.tick(now);
        }
    }
    bool disarmed = false;
    {
        evd::lock_guard g(rs.mu);
        disarmed = !rs.armed;
    }
    if ((e->terminal.load() || disarmed) && !st.end) {
        // ended meanwhile for another reason (an async event, the device,
        // fi_shutdown): its record is the connection's own; what the
        // ledgers hold completes now
        cm_id_ptr dead = ep_exchange_abandon(e);
        cancel_held(e, rs);
        e->in_outage.store(false);
        return dead;
    }
    if (!st.end && !st.qp_to_error && e->drain.on) {
        if (!drain_step(e, rs, now)) return ep_outage_steps(e, st, now);
        st = drain_done(e, rs, now);
    }
    return ep_outage_steps(e, st, now);
}

}  // namespace evd
