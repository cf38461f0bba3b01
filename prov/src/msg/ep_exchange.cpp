// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Joining the peer again after an outage (ep_exchange.h): the offer, the
// active side's attempts, the passive side's answer, and the move onto the
// new QP with the replay.
#include "msg/ep_exchange.h"

#include "msg/ep_keepalive.h"

#include <netinet/in.h>

#include <cstring>

#include "cm/cm_deadline.h"
#include "cq/cq.h"
#include "device/devctx.h"
#include "domain.h"
#include "msg/ep_dp.h"
#include "msg/ep_keepalive.h"
#include "msg/ep_outage.h"
#include "msg/pep_resume.h"

namespace evd {

namespace {

void keep_addr(struct sockaddr_storage& to, const struct sockaddr* sa) {
    std::memset(&to, 0, sizeof(to));
    if (const size_t n = cm_addrlen(sa); n && n <= sizeof(to)) std::memcpy(&to, sa, n);
}

resume::peer_ip peer_of(struct rdma_cm_id* id) {
    const struct sockaddr* sa = id ? rdma_get_peer_addr(id) : nullptr;
    return resume::peer_ip_of(sa, cm_addrlen(sa));
}

uint8_t retry_of(const msg_ep* e) {
    return cm_retry_count(e->dom->dev->attr.orig_attr.vendor_id);
}

// The private data of an rdma_cm event, as a resume message of kind `want`.
bool read_msg(const struct rdma_cm_event* ev, resume::resume_kind want, resume::resume_msg* m,
              const char* what) {
    const auto err = resume::resume_unpack(ev->param.conn.private_data,
                                           ev->param.conn.private_data_len, m);
    if (err == resume::wire_error::none && m->kind == want) return true;
    EVD_WARN(FI_LOG_EP_CTRL, "resume: %s without a valid resume message (%s)\n", what,
             err == resume::wire_error::none ? "another kind" : resume::wire_error_name(err));
    return false;
}

// The attempt's QP and id go (an attempt that failed, an end): the id is
// returned to be destroyed without cm_chan::mu.
cm_id_ptr drop_attempt(msg_ep* e) EVD_REQUIRES(e->mu) {
    if (e->rqp) {
        ep_drop_resume_qp(e, std::move(e->rqp), e->rid.get());
        // the receives it took are queued again for the next attempt's QP
        // (what it consumed, if its connection came up, was counted as its
        // CQ was pulled before it left)
        if (ep_resume* rs = ep_rs_of(e)) {
            evd::lock_guard g(rs->mu);
            rs->rx.qp_failed();
        }
    }
    // Every caller holds e->chan->mu (dispatch, the timer, fi_close): no
    // dispatch reaches e through this id once it is handed back.
    if (e->rid) e->rid->context = nullptr;
    return std::move(e->rid);
}

// Two ids let go at once: one is returned, the other buried on the channel,
// whose lock every caller holds (see drop_attempt).
cm_id_ptr one_of(msg_ep* e, cm_id_ptr a, cm_id_ptr b) EVD_REQUIRES(e->mu) {
    e->chan->mu.assert_held();
    return cm_chan_keep_one(e->chan, std::move(a), std::move(b));
}

// The session's answer to an attempt that failed (active), carried out.
cm_id_ptr attempt_failed(msg_ep* e, ep_resume& rs, resume::attempt_outcome o)
    EVD_REQUIRES(e->mu) {
    cm_id_ptr dead = drop_attempt(e);
    const uint64_t now = ep_outage_now_ms();
    resume::session_step st;
    {
        evd::lock_guard g(rs.mu);
        st = rs.sess.attempt_failed(now, o);
    }
    return one_of(e, ep_outage_steps(e, st, now), std::move(dead));
}

// The new connection is up: the old QP leaves, the new one takes its place,
// the operations the verdict found done complete, what the ledgers queued
// is posted on it in order, and the outage is over once it completes
// something. The old id is returned to be destroyed (its DREQ reaches the
// peer's old id, which the peer drops as stale).
cm_id_ptr move_and_replay(msg_ep* e, ep_resume& rs) EVD_REQUIRES(e->mu) {
    const uint64_t now = ep_outage_now_ms();
    {
        resume::session_step st;
        {
            evd::lock_guard g(rs.mu);
            st = rs.sess.resumed(now);
        }
        // the deadline passed while the exchange was under way: it ends
        // here, and the new connection with it
        if (st.end) return ep_outage_steps(e, st, now);
    }
    cm_id_ptr old_id = std::move(e->id);
    ibv_qp_ptr old_qp;
    {
        // posts read the QP under rs.mu (ep_resume.h): none sees it half moved
        evd::lock_guard g(rs.mu);
        old_qp = std::move(e->qp);
        e->qp = std::move(e->rqp);
        // the new QP completed something before this (the peer's replay
        // came first): the outage is over already
        if (rs.early_progress) rs.sess.progress();
        rs.early_progress = false;
    }
    cm_deadline_clear(e->chan, e);  // the outage's step: none is due (a probe may be armed again)
    ep_drop_resume_qp(e, std::move(old_qp), old_id.get());
    e->id = std::move(e->rid);
    e->disconnect_sent = false;
    e->cm_disconnected = false;
    e->cm_clean_end = false;
    e->cm_established = true;
    e->cm_started = true;
    e->rq_marked.store(false);
    e->rq_after_marker.store(false);
    const uint32_t qpn = e->qp ? e->qp->qp_num : 0;
    cq_retire_resumed(e->tx_cq, qpn);
    int bad = 0;
    size_t tx_left = 0, rx_left = 0;
    {
        evd::lock_guard g(rs.mu);
        bad = e->qp ? rs_post_queued(rs, e->qp.get(), true) : ENOTCONN;
        rs.held = false;
        rs.held_tx = rs.held_rx = 0;
        rs.ka_out = false;  // one on the old QP went with it
        tx_left = rs.tx.outstanding();
        rx_left = rs.rx.outstanding();
    }
    e->in_outage.store(false);
    e->drain = {};
    ep_keepalive_start(e);
    if (bad) {
        // a replay the QP does not take fails that QP: the next outage
        // begins (the same one, as no progress was made)
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: the replay on QP %u failed: %s\n",
                 static_cast<void*>(e), qpn, strerror(bad));
        if (e->qp) {
            struct ibv_qp_attr a {};
            a.qp_state = IBV_QPS_ERR;
            ibv_modify_qp(e->qp.get(), &a, IBV_QP_STATE);
        }
    }
    EVD_INFO(FI_LOG_EP_CTRL, "ep %p: resumed on QP %u after %llu ms: %zu sends and %zu receives "
             "outstanding\n", static_cast<void*>(e), qpn,
             static_cast<unsigned long long>(now - e->outage_t0_ms), tx_left, rx_left);
    return old_id;
}

// What the peer's count decides, for the record when it ends the connection.
bool verdict_resumes(msg_ep* e, ep_resume& rs, uint64_t peer_consumed) EVD_REQUIRES(e->mu) {
    uint64_t culprit = 0;
    resume::verdict v;
    {
        evd::lock_guard g(rs.mu);
        v = rs.tx.peer_consumed(peer_consumed, &culprit);
    }
    if (v == resume::verdict::resume) return true;
    EVD_WARN(FI_LOG_EP_CTRL, "ep %p: the peer consumed %llu of its messages: %s (at %llu): the "
             "connection cannot be resumed\n", static_cast<void*>(e),
             static_cast<unsigned long long>(peer_consumed), resume::verdict_name(v),
             static_cast<unsigned long long>(culprit));
    return false;
}

// The resume message m (a request or an accept) gets this side's count of
// the peer's messages, final since the drain, and the queued receives go on
// the new QP first (the peer's replay may follow at once): its bytes in buf.
bool prepare_msg(msg_ep* e, ep_resume& rs, resume::resume_msg& m, uint8_t* buf, size_t cap)
    EVD_REQUIRES(e->mu) {
    int bad = 0;
    {
        evd::lock_guard g(rs.mu);
        m.count = rs.rx.consumed();
        bad = rs_post_queued(rs, e->rqp.get(), false);
    }
    if (bad)
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: resume: receives not posted on the new QP: %s\n",
                 static_cast<void*>(e), strerror(bad));
    return !bad && resume::resume_pack(m, buf, cap);
}

// The accounting ends the connection.
cm_id_ptr verdict_ends(msg_ep* e, ep_resume& rs) EVD_REQUIRES(e->mu) {
    resume::session_step st;
    {
        evd::lock_guard g(rs.mu);
        st = rs.sess.verdict_ends();
    }
    return ep_outage_steps(e, st, ep_outage_now_ms());
}

}  // namespace

void ep_exchange_refuse(struct rdma_cm_id* id, uint32_t generation, resume::resume_refusal why) {
    resume::resume_msg m;
    m.kind = resume::resume_kind::refuse;
    m.generation = generation;
    m.reason = static_cast<uint32_t>(resume::wire_refusal(why));
    uint8_t buf[resume::kResumeMsgLen];
    if (!id) return;
    if (!resume::resume_pack(m, buf, sizeof(buf)) ||
        rdma_reject(id, buf, static_cast<uint8_t>(sizeof(buf))))
        rdma_reject(id, nullptr, 0);
}

void ep_exchange_offer(msg_ep* e, uint8_t* buf, size_t* n, size_t cap) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs || !e->rs_tokens || e->dom->dev->iwarp || !e->id) return;
    if (e->chan != e->rs_listen_chan) {
        EVD_INFO(FI_LOG_EP_CTRL, "fi_accept: ep %p is bound to an EQ other than its "
                 "listener's: its connection is not resumable\n", static_cast<void*>(e));
        return;
    }
    if (*n + resume::kResumeMsgLen > cap) return;
    resume::token_t t;
    if (!resume_draw_token(&t)) return;
    const resume::peer_ip peer = peer_of(e->id.get());
    {
        evd::lock_guard g(e->rs_tokens->mu);
        if (!e->rs_tokens->tbl.add(t, e, peer)) {
            EVD_WARN(FI_LOG_EP_CTRL, "fi_accept: the listener's resume tokens are full (%zu): "
                     "this connection is not resumable\n", kResumeTokensPerListener);
            return;
        }
    }
    resume::resume_msg m;
    m.kind = resume::resume_kind::offer;
    m.token = t;
    if (!resume::resume_pack(m, buf + *n, cap - *n)) return;
    *n += resume::kResumeMsgLen;
    e->rs_token = t;
    e->rs_offered = true;
}

bool ep_exchange_established(msg_ep* e, const struct rdma_cm_event* ev, bool active) {
    if (!ep_rs_of(e) || e->dom->dev->iwarp) return false;
    if (active) {
        resume::resume_msg m;
        if (resume::resume_offer_in(ev->param.conn.private_data,
                                    ev->param.conn.private_data_len, &m) !=
                resume::wire_error::none ||
            m.kind != resume::resume_kind::offer) {
            EVD_INFO(FI_LOG_EP_CTRL, "ep %p: the peer offered no resumption: its connection "
                     "ends at its first failure\n", static_cast<void*>(e));
            return false;
        }
        e->rs_token = m.token;
        e->rs_offered = true;
    }
    if (!e->rs_offered || !e->id) return false;
    keep_addr(e->rs_local, rdma_get_local_addr(e->id.get()));
    keep_addr(e->rs_peer, rdma_get_peer_addr(e->id.get()));
    ep_outage_arm(e, active);
    return true;
}

bool ep_exchange_attempt(msg_ep* e, cm_id_ptr* dead) {
    ep_resume* rs = ep_rs_of(e);
    if (!rs || !e->chan) return false;
    if (e->rid) *dead = drop_attempt(e);  // one left by an attempt that failed (none, as a rule)
    if (int rc = cm_create_id(e->chan, &e->owner, &e->rid)) {
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: resume attempt: no id (%d)\n", static_cast<void*>(e), rc);
        return false;
    }
    {
        evd::lock_guard g(rs->mu);
        e->rgen = rs->sess.generation();
    }
    e->r_refusal = 0;
    // from the address it had (a multi-homed host keeps its path), any port
    struct sockaddr_storage src = e->rs_local;
    if (src.ss_family == AF_INET) reinterpret_cast<struct sockaddr_in*>(&src)->sin_port = 0;
    if (src.ss_family == AF_INET6) reinterpret_cast<struct sockaddr_in6*>(&src)->sin6_port = 0;
    hb_release(e->rid.get());
    if (rdma_resolve_addr(e->rid.get(), reinterpret_cast<struct sockaddr*>(&src),
                          reinterpret_cast<struct sockaddr*>(&e->rs_peer),
                          get_params().cm_timeout_ms)) {
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: resume attempt %u: rdma_resolve_addr: %s\n",
                 static_cast<void*>(e), e->rgen, strerror(errno));
        e->rid->context = nullptr;  // no event of it can come
        *dead = one_of(e, std::move(*dead), std::move(e->rid));
        return false;
    }
    EVD_DBG(FI_LOG_EP_CTRL, "ep %p: resume attempt for generation %u\n", static_cast<void*>(e),
            e->rgen);
    return true;
}

cm_id_ptr ep_exchange_cm_event(msg_ep* e, struct rdma_cm_event* ev, const cm_action& a) {
    ep_resume* rsp = ep_rs_of(e);
    if (!rsp) return nullptr;
    ep_resume& rs = *rsp;
    bool active = false, over = false;
    {
        evd::lock_guard g(rs.mu);
        active = rs.sess.which() == resume::side::active;
        // ended, shut down or ended otherwise meanwhile: nothing to resume
        over = rs.ended || !rs.armed || e->terminal.load();
    }
    if (over) return drop_attempt(e);
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
        if (int rc = ep_make_resume_qp(e, e->rid.get(), &e->rqp)) {
            EVD_INFO(FI_LOG_EP_CTRL, "ep %p: resume attempt: no QP (%d)\n", static_cast<void*>(e),
                     rc);
            return attempt_failed(e, rs, resume::attempt_outcome::unreachable);
        }
        hb_release(e->rid.get());
        if (rdma_resolve_route(e->rid.get(), get_params().cm_timeout_ms))
            return attempt_failed(e, rs, resume::attempt_outcome::unreachable);
        return nullptr;
    }
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (!port_active_now(e->rid->verbs, e->rid->port_num))
            return attempt_failed(e, rs, resume::attempt_outcome::unreachable);
        resume::resume_msg m;
        m.kind = resume::resume_kind::request;
        m.token = e->rs_token;
        m.generation = e->rgen;
        uint8_t buf[resume::kResumeMsgLen];
        struct rdma_conn_param cp;
        if (!prepare_msg(e, rs, m, buf, sizeof(buf)))
            return attempt_failed(e, rs, resume::attempt_outcome::unreachable);
        cm_fill_conn_param(&cp, buf, sizeof(buf), retry_of(e));
        hb_release(e->rid.get());
        if (rdma_connect(e->rid.get(), &cp)) {
            const int err = errno;
            return attempt_failed(e, rs, err == ECONNREFUSED ? resume::attempt_outcome::no_listener
                                                             : resume::attempt_outcome::unreachable);
        }
        return nullptr;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
        if (active) {
            resume::resume_msg m;
            if (!read_msg(ev, resume::resume_kind::accept, &m, "accept") ||
                m.generation != e->rgen) {
                rdma_disconnect(e->rid.get());
                return attempt_failed(e, rs, resume::attempt_outcome::refused);
            }
            if (!verdict_resumes(e, rs, m.count)) {
                rdma_disconnect(e->rid.get());
                return verdict_ends(e, rs);
            }
        } else if (e->rs_tokens) {
            evd::lock_guard g(e->rs_tokens->mu);
            e->rs_tokens->tbl.accepted(e, e->rgen);
        }
        return move_and_replay(e, rs);
    }
    case RDMA_CM_EVENT_REJECTED: {
        if (!active) break;
        resume::resume_msg m;
        if (resume::resume_unpack(ev->param.conn.private_data, ev->param.conn.private_data_len,
                                  &m) == resume::wire_error::none &&
            m.kind == resume::resume_kind::refuse) {
            e->r_refusal = m.reason;
            EVD_WARN(FI_LOG_EP_CTRL, "ep %p: the peer refused to resume: %s\n",
                     static_cast<void*>(e), resume::resume_refusal_name(m.reason));
            // busy: the peer keeps its end, short of something for now
            return attempt_failed(e, rs, m.reason == static_cast<uint32_t>(
                                                         resume::resume_refusal::busy)
                                             ? resume::attempt_outcome::unreachable
                                             : resume::attempt_outcome::refused);
        }
        // the peer's kernel: no listener there any more; anything else is
        // a refusal without a reason (an evd that does not resume)
        return attempt_failed(e, rs, a.prov_errno == kRejNoListener
                                         ? resume::attempt_outcome::no_listener
                                         : resume::attempt_outcome::refused);
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
        if (active) return attempt_failed(e, rs, resume::attempt_outcome::unreachable);
        break;
    default:
        break;
    }
    // the passive side's request that did not become a connection (its
    // accept unanswered, an error) is let go; the peer tries again
    if (!active && a.row && a.row->terminal) {
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: the resume accept for generation %u ended: %s\n",
                 static_cast<void*>(e), e->rgen, a.row->name);
        return drop_attempt(e);
    }
    EVD_DBG(FI_LOG_EP_CTRL, "ep %p: resume id: %s ignored\n", static_cast<void*>(e),
            a.row ? a.row->name : "?");
    return nullptr;
}

cm_id_ptr ep_exchange_request(msg_ep* e, cm_id_ptr id, const resume::resume_msg& m) {
    evd::lock_guard lk(e->mu);
    ep_resume* rsp = ep_rs_of(e);
    auto refuse = [&](resume::resume_refusal why) {
        EVD_WARN(FI_LOG_EP_CTRL, "resume request for generation %u refused: %s\n", m.generation,
                 resume::resume_refusal_name(static_cast<uint32_t>(why)));
        ep_exchange_refuse(id.get(), m.generation, why);
        return std::move(id);
    };
    if (!rsp || e->terminal.load() || e->chan != e->rs_listen_chan)
        return refuse(resume::resume_refusal::not_resumable);
    ep_resume& rs = *rsp;
    const uint64_t now = ep_outage_now_ms();
    resume::session_step st;
    bool was_connected = false, open = false;
    {
        evd::lock_guard g(rs.mu);
        open = !rs.ended && (rs.armed || rs.held);
        if (open) {
            was_connected = !rs.held;
            st = rs.sess.request(now, m.generation);
        }
    }
    if (!open) return refuse(resume::resume_refusal::not_resumable);
    if (st.reject && st.reject_gen == m.generation && !st.accept && !st.end)
        return refuse(resume::resume_refusal::stale_generation);
    cm_id_ptr dead;
    if (e->rid) {  // an older request it held is answered no
        ep_exchange_refuse(e->rid.get(), e->rgen, resume::resume_refusal::stale_generation);
        dead = drop_attempt(e);
    }
    st.reject = false;
    id->context = &e->owner;
    e->rid = std::move(id);
    e->rgen = m.generation;
    e->r_peer_consumed = m.count;
    if (was_connected) {
        // the peer saw the failure first: this side's QP goes too
        EVD_INFO(FI_LOG_EP_CTRL, "ep %p: its peer asks to resume before its own QP failed: "
                 "drained first\n", static_cast<void*>(e));
        ep_outage_hold(e);
    }
    return one_of(e, ep_outage_steps(e, st, now), std::move(dead));
}

cm_id_ptr ep_exchange_accept(msg_ep* e, uint64_t now) {
    (void)now;
    ep_resume* rsp = ep_rs_of(e);
    if (!rsp || !e->rid) return nullptr;
    ep_resume& rs = *rsp;
    if (!verdict_resumes(e, rs, e->r_peer_consumed)) {
        ep_exchange_refuse(e->rid.get(), e->rgen, resume::resume_refusal::verdict_ends);
        {
            evd::lock_guard g(rs.mu);
            rs.sess.verdict_ends();
        }
        return drop_attempt(e);
    }
    // Short of a QP or of memory here is not the connection's end: the
    // active side is asked to try again (its backoff), this side waits.
    if (int rc = ep_make_resume_qp(e, e->rid.get(), &e->rqp)) {
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: resume accept: no QP (%d): the peer is asked to try "
                 "again\n", static_cast<void*>(e), rc);
        ep_exchange_refuse(e->rid.get(), e->rgen, resume::resume_refusal::busy);
        return drop_attempt(e);
    }
    resume::resume_msg m;
    m.kind = resume::resume_kind::accept;
    m.generation = e->rgen;
    uint8_t buf[resume::kResumeMsgLen];
    struct rdma_conn_param cp;
    if (!prepare_msg(e, rs, m, buf, sizeof(buf))) {
        ep_exchange_refuse(e->rid.get(), e->rgen, resume::resume_refusal::busy);
        return drop_attempt(e);
    }
    cm_fill_conn_param(&cp, buf, sizeof(buf), retry_of(e));
    hb_release(e->rid.get());
    if (rdma_accept(e->rid.get(), &cp)) {
        EVD_WARN(FI_LOG_EP_CTRL, "ep %p: resume accept: rdma_accept: %s\n",
                 static_cast<void*>(e), strerror(errno));
        return drop_attempt(e);
    }
    EVD_DBG(FI_LOG_EP_CTRL, "ep %p: resume accepted for generation %u (%llu of the peer's "
            "messages consumed here)\n", static_cast<void*>(e), e->rgen,
            static_cast<unsigned long long>(m.count));
    return nullptr;
}

cm_id_ptr ep_exchange_refuse_pending(msg_ep* e, resume::resume_refusal why) {
    if (!e->rid) return nullptr;
    ep_exchange_refuse(e->rid.get(), e->rgen, why);
    return drop_attempt(e);
}

cm_id_ptr ep_exchange_abandon(msg_ep* e) {
    if (e->rs_tokens) {
        evd::lock_guard g(e->rs_tokens->mu);
        e->rs_tokens->tbl.end(e);
    }
    if (!e->rid) return nullptr;
    bool passive = false;
    if (ep_resume* rs = ep_rs_of(e)) {
        evd::lock_guard g(rs->mu);
        passive = rs->sess.which() == resume::side::passive;
    }
    if (passive) ep_exchange_refuse(e->rid.get(), e->rgen, resume::resume_refusal::not_resumable);
    return drop_attempt(e);
}

void ep_exchange_close(msg_ep* e) {
    if (e->rs_tokens) {
        {
            evd::lock_guard g(e->rs_tokens->mu);
            e->rs_tokens->tbl.remove(e);
        }
        resume_tokens_unref(e->rs_tokens);
        e->rs_tokens = nullptr;
    }
    if (!e->chan) return;  // no id was ever made
    cm_id_ptr rid;
    {
        // order: cm_chan::mu -> ep::mu; a dispatch of the id's event has
        // finished, and none reaches e after this
        evd::lock_guard ck(e->chan->mu);
        evd::lock_guard lk(e->mu);
        rid = drop_attempt(e);
    }
    rid.reset();  // no lock held: rdma_destroy_id waits for its events' acks
}

}  // namespace evd
