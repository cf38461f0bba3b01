// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// SIDR for datagram endpoints (ud_cm.h): the listening agent and the
// resolution.
#include "dgram/ud_cm.h"

#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "evd.h"
#include "lock.h"
#include "msg/ep.h"
#include "owners.h"

namespace evd {

struct ud_listener {
    cm_id_ptr id;
    uint32_t qpn = 0;
    bool live = true;  // under the agent's mu
};

namespace {

uint16_t port_of(const struct sockaddr* sa) {
    if (sa->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
    if (sa->sa_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port);
    return 0;
}

socklen_t len_of(const struct sockaddr* sa) {
    return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// The process's agent: created at the first listen, stopped at cleanup.
struct agent {
    cm_channel_ptr chan;
    fd_owner stop;
    std::thread thread;
    mutex mu;  // listeners' `live`, and qpn reads

    void answer(struct rdma_cm_event* ev) {
        auto* l = static_cast<ud_listener*>(ev->listen_id ? ev->listen_id->context : nullptr);
        uint32_t qpn = 0;
        {
            evd::lock_guard lk(mu);
            if (l && l->live) qpn = l->qpn;
        }
        struct rdma_cm_id* child = ev->id;
        if (qpn) {
            struct rdma_conn_param p {};
            p.qp_num = qpn;  // the Q_Key rdma_cm sends is RDMA_UDP_QKEY, evd's (ep.h)
            if (rdma_accept(child, &p))
                EVD_INFO(FI_LOG_EP_CTRL, "SIDR reply (QP %u): %s\n", qpn, strerror(errno));
        } else if (rdma_reject(child, nullptr, 0)) {
            EVD_DBG(FI_LOG_EP_CTRL, "SIDR reject: %s\n", strerror(errno));
        }
        rdma_ack_cm_event(ev);
        rdma_destroy_id(child);  // a SIDR exchange leaves nothing to keep
    }

    void run() {
        struct pollfd fds[2] = {{chan->fd, POLLIN, 0}, {stop.fd, POLLIN, 0}};
        for (;;) {
            if (poll(fds, 2, -1) < 0) {
                if (errno == EINTR) continue;
                EVD_WARN(FI_LOG_EP_CTRL, "UD agent: poll: %s; SIDR requests go unanswered\n",
                         strerror(errno));
                return;
            }
            if (fds[1].revents) return;
            struct rdma_cm_event* ev = nullptr;
            if (rdma_get_cm_event(chan.get(), &ev)) {
                if (errno == EAGAIN || errno == EINTR) continue;
                EVD_WARN(FI_LOG_EP_CTRL, "UD agent: rdma_get_cm_event: %s\n", strerror(errno));
                return;
            }
            if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
                answer(ev);
                continue;
            }
            // a listener's device went away: its endpoint learns it from
            // its own async events; the id stays until ud_unlisten
            EVD_INFO(FI_LOG_EP_CTRL, "UD agent: %s\n", rdma_event_str(ev->event));
            rdma_ack_cm_event(ev);
        }
    }
};

mutex g_agent_mu;  // creation and shutdown
agent* g_agent EVD_GUARDED_BY(g_agent_mu) = nullptr;

agent* get_agent(int* err) {
    evd::lock_guard lk(g_agent_mu);
    if (g_agent) return g_agent;
    auto a = std::make_unique<agent>();
    a->chan.reset(rdma_create_event_channel());
    if (!a->chan) {
        *err = fi_err(errno);
        EVD_WARN(FI_LOG_EP_CTRL, "UD agent: rdma_create_event_channel: %s\n", strerror(errno));
        return nullptr;
    }
    // non-blocking: the thread polls, and a spurious wake-up must not block
    int fl = fcntl(a->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(a->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        *err = fi_err(errno);
        return nullptr;
    }
    a->stop.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (a->stop.fd < 0) {
        *err = fi_err(errno);
        return nullptr;
    }
    agent* raw = a.get();
    a->thread = std::thread([raw] { raw->run(); });
    g_agent = a.release();
    return g_agent;
}

// Waits up to `ms` for the next event of a private channel.
struct rdma_cm_event* next_event(struct rdma_event_channel* ch, int ms) {
    struct pollfd p = {ch->fd, POLLIN, 0};
    int r = poll(&p, 1, ms < 0 ? 0 : ms);
    if (r <= 0) return nullptr;
    struct rdma_cm_event* ev = nullptr;
    return rdma_get_cm_event(ch, &ev) ? nullptr : ev;
}

// One SIDR exchange: 0 with *out, or a negative FI_E*.
int resolve_once(const struct sockaddr* src, const struct sockaddr* dst, int ms, ud_name* out) {
    cm_channel_ptr ch(rdma_create_event_channel());
    if (!ch) return fi_err(errno);
    struct rdma_cm_id* raw = nullptr;
    if (rdma_create_id(ch.get(), &raw, nullptr, RDMA_PS_UDP)) return fi_err(errno);
    cm_id_ptr id(raw);
    if (rdma_resolve_addr(id.get(), const_cast<sockaddr*>(src), const_cast<sockaddr*>(dst), ms))
        return -FI_EHOSTUNREACH;
    using clock = std::chrono::steady_clock;
    const auto end = clock::now() + std::chrono::milliseconds(ms);
    auto left = [&] {
        return static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(end - clock::now()).count());
    };
    for (;;) {
        struct rdma_cm_event* ev = next_event(ch.get(), left());
        if (!ev) {
            EVD_INFO(FI_LOG_CORE, "SIDR: no answer from port %u within %d ms\n", port_of(dst), ms);
            return -FI_ENODATA;
        }
        const enum rdma_cm_event_type t = ev->event;
        const int status = ev->status;
        if (t == RDMA_CM_EVENT_ESTABLISHED) {
            const struct rdma_ud_param& ud = ev->param.ud;
            *out = ud_name{};
            std::memcpy(out->gid, ud.ah_attr.grh.dgid.raw, 16);
            out->qpn = ud.qp_num;
            out->lid = ud.ah_attr.dlid;
            out->sl = ud.ah_attr.sl;
            out->pkey = 0xffff;
            out->service = port_of(dst);
            const uint32_t qkey = ud.qkey;
            rdma_ack_cm_event(ev);
            if (qkey != kUdQkey) {
                EVD_WARN(FI_LOG_CORE, "SIDR: the peer's Q_Key is 0x%x, not evd's 0x%x (not an "
                         "evd datagram endpoint)\n", qkey, kUdQkey);
                return -FI_ENODATA;
            }
            return 0;
        }
        rdma_ack_cm_event(ev);
        switch (t) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (rdma_resolve_route(id.get(), left() > 0 ? left() : 1)) return -FI_EHOSTUNREACH;
            break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED: {
            struct rdma_conn_param p {};
            if (rdma_connect(id.get(), &p)) return fi_err(errno);
            break;
        }
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
            EVD_INFO(FI_LOG_CORE, "SIDR: %s (status %d)\n", rdma_event_str(t), status);
            return -FI_EHOSTUNREACH;
        default:  // UNREACHABLE, REJECTED: nobody answers that service
            EVD_INFO(FI_LOG_CORE, "SIDR: port %u: %s (status %d): no datagram endpoint there\n",
                     port_of(dst), rdma_event_str(t), status);
            return -FI_ENODATA;
        }
    }
}

}  // namespace

ud_listener* ud_listen(const struct sockaddr* addr, uint32_t qpn, uint16_t* port, int* err) {
    agent* a = get_agent(err);
    if (!a) return nullptr;
    auto l = std::make_unique<ud_listener>();
    l->qpn = qpn;
    struct rdma_cm_id* raw = nullptr;
    if (rdma_create_id(a->chan.get(), &raw, l.get(), RDMA_PS_UDP)) {
        *err = fi_err(errno);
        return nullptr;
    }
    l->id.reset(raw);
    struct sockaddr_storage ss {};
    std::memcpy(&ss, addr, len_of(addr));
    if (rdma_bind_addr(l->id.get(), reinterpret_cast<sockaddr*>(&ss)) ||
        rdma_listen(l->id.get(), 64)) {
        *err = errno == EADDRINUSE ? -FI_EADDRINUSE : fi_err(errno);
        EVD_WARN(FI_LOG_EP_CTRL, "fi_enable: the datagram endpoint's service %u: %s\n",
                 port_of(addr), strerror(errno));
        return nullptr;
    }
    *port = port_of(rdma_get_local_addr(l->id.get()));
    return l.release();
}

void ud_unlisten(ud_listener* l) {
    if (!l) return;
    {
        evd::lock_guard lk(g_agent_mu);
        if (g_agent) {
            evd::lock_guard alk(g_agent->mu);
            l->live = false;
        }
    }
    // waits until the agent acknowledged every event of the id
    l->id.reset();
    delete l;
}

int ud_resolve(const struct sockaddr* src, const struct sockaddr* dst, int timeout_ms,
               ud_name* out) {
    return resolve_once(src, dst, std::max(timeout_ms, 1), out);
}

void ud_agent_shutdown() noexcept {
    evd::lock_guard lk(g_agent_mu);
    if (!g_agent) return;
    g_agent->stop.signal();
    if (g_agent->thread.joinable()) g_agent->thread.join();
    delete g_agent;
    g_agent = nullptr;
}

}  // namespace evd
