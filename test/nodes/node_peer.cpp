// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// node_peer: one end of N FI_EP_MSG connections between two nodes of the
// multi-node bed (test/vm/run-nodes), for any libfabric provider, printing
// what the application learns and when. The failure matrix
// (test/nodes/failures.sh) runs a server on one node and a client on the
// other, injects a fault and reads these lines.
//
//   node_peer -p PROV -r server|client -a SERVER_ADDR [-P PORT] [-n EPS]
//             [-m busy|idle] [-t SECS] [-g GRACE_S] [-R] [-E]
//
// busy: on every connection the client sends sequence numbers and the
// server echoes each one, one send in flight per side; both check that each
// number received is the one after the last. A client whose last ping is
// unanswered for 0.2 s sends the next anyway (up to 4 unanswered), so a
// peer that dies always has a send of the client's to fail, and no side ever
// finds the other's receives all taken (on iWARP a message that finds no
// receive ends the connection). idle: one ping and its echo, then nothing. Lines (times are CLOCK_REALTIME seconds,
// comparable with `date +%s.%N` on the same node):
//   DOMAIN-EQ bound|<error>          whether the domain's events reach the EQ
//   READY t=T eps=N                  client: every connection received
//   EVENT t=T ep=I KIND WHAT [...]   an EQ record of endpoint I (ep=domain,
//                                    ep=pep: the domain's, the listener's),
//                                    or an error completion
//                                    KIND: FI_SHUTDOWN, EQ-ERROR, CQ-ERROR,
//                                    FI_NOTIFY; WHAT: FI_E* name or event
//   GAP t=T from=T0 secs=S           data arrived again after S > 1 s without
//   RECONNECTED t=T                  -R: a new connection carried data
//   SUMMARY ...                      at the end
// A record is terminal when it is FI_SHUTDOWN or an EQ error entry of the
// endpoint. A connection has ended when it had a terminal record or an
// error completion (all verbs reports for a lost peer). The run ends GRACE_S
// (default 3) after every connection ended (to catch a second terminal
// record), with -E 3 s after data flowed again following a GAP, or after SECS
// (default 60). -R (client): once every connection has ended, connect again
// until a new connection carries data (a rebooted server, a link back).
// Exit status: 0 when the run ended as asked, 1 on a setup failure or a
// wrong payload.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_evd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../common/tool_util.h"

namespace {

double now() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}


// The FI_E* names the failure matrix compares (fi_strerror gives prose).
std::string err_name(int err) {
    static const struct {
        int e;
        const char* n;
    } names[] = {
        {FI_ENETDOWN, "FI_ENETDOWN"},   {FI_EHOSTUNREACH, "FI_EHOSTUNREACH"},
        {FI_ETIMEDOUT, "FI_ETIMEDOUT"}, {FI_ECONNRESET, "FI_ECONNRESET"},
        {FI_ECONNREFUSED, "FI_ECONNREFUSED"}, {FI_ENODEV, "FI_ENODEV"},
        {FI_ECANCELED, "FI_ECANCELED"}, {FI_EIO, "FI_EIO"},
        {FI_ECONNABORTED, "FI_ECONNABORTED"}, {FI_ENETUNREACH, "FI_ENETUNREACH"},
        {FI_EREMOTEIO, "FI_EREMOTEIO"}, {FI_EOTHER, "FI_EOTHER"},
        {FI_EAGAIN, "FI_EAGAIN"},
    };
    for (auto& n : names)
        if (n.e == err) return n.n;
    return "err=" + std::to_string(err);
}

// IBV_EVENT_* names (ibv_event_type_str gives prose with spaces).
const char* event_name(int type) {
    static const char* const names[] = {
        "CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED",
        "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE",
        "PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED",
        "CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL",
    };
    return type >= 0 && type < static_cast<int>(sizeof names / sizeof names[0]) ? names[type] : "EVENT?";
}

constexpr int kRecvs = 8;
constexpr uint64_t kWindow = 4;  // unanswered pings a client may have out

struct conn {
    int id = 0;
    struct fid_ep* ep = nullptr;
    struct fid_cq* cq = nullptr;
    struct fid_mr* mr = nullptr;
    struct {
        uint64_t r[kRecvs];
        uint64_t s;
    } buf{};
    struct fi_context rctx[kRecvs]{}, sctx{};
    bool connected = false, send_out = false;
    uint64_t next_send = 1, next_recv = 1, received = 0;
    double last_send = 0;
    int terminal = 0;
    double first_fail = 0;  // > 0: ended then; < 0: the connection attempt failed
};

struct opts {
    std::string prov = "evd", role, addr, port = "7480", mode = "busy";
    int eps = 4;
    double secs = 60, grace = 3;
    bool reconnect = false, end_on_resume = false;
};

struct peer {
    opts o;
    struct fi_info* info = nullptr;
    struct fid_fabric* fab = nullptr;
    struct fid_domain* dom = nullptr;
    struct fid_eq* eq = nullptr;
    struct fid_pep* pep = nullptr;
    std::vector<std::unique_ptr<conn>> conns;
    bool bad_payload = false;
    double ready_at = 0, last_rx = 0, resumed_at = 0, all_ended_at = 0;

    conn* find(fid_t fid) {
        for (auto& c : conns)
            if (c->ep && &c->ep->fid == fid) return c.get();
        return nullptr;
    }

    // Who a record is about: an endpoint's index, "pep" (the listener),
    // "domain", or "other".
    std::string who(conn* c, fid_t fid) {
        if (c) return std::to_string(c->id);
        if (pep && fid == &pep->fid) return "pep";
        if (dom && fid == &dom->fid) return "domain";
        return "other";
    }

    void event(conn* c, fid_t fid, const char* kind, const std::string& what, bool terminal) {
        double t = now();
        std::printf("EVENT t=%.3f ep=%s %s %s\n", t, who(c, fid).c_str(), kind, what.c_str());
        if (!c) return;
        if (c->first_fail <= 0) c->first_fail = t;
        if (terminal) c->terminal++;
    }

    void post_recv(conn& c, int i) {
        (void)fi_recv(c.ep, &c.buf.r[i], sizeof c.buf.r[i], fi_mr_desc(c.mr), 0, &c.rctx[i]);
    }

    void open_conn(conn& c, struct fi_info* fi) {
        FI_CHECK(fi_endpoint(dom, fi, &c.ep, &c));
        struct fi_cq_attr ca = {};
        ca.format = FI_CQ_FORMAT_MSG;
        ca.size = 64;
        FI_CHECK(fi_cq_open(dom, &ca, &c.cq, nullptr));
        FI_CHECK(fi_ep_bind(c.ep, &eq->fid, 0));
        FI_CHECK(fi_ep_bind(c.ep, &c.cq->fid, FI_TRANSMIT | FI_RECV));
        FI_CHECK(fi_enable(c.ep));
        FI_CHECK(fi_mr_reg(dom, &c.buf, sizeof c.buf, FI_SEND | FI_RECV, 0, 0, 0, &c.mr, nullptr));
        for (int i = 0; i < kRecvs; i++) post_recv(c, i);
    }

    void close_conn(conn& c) {
        if (c.ep) fi_close(&c.ep->fid);
        if (c.mr) fi_close(&c.mr->fid);
        if (c.cq) fi_close(&c.cq->fid);
        c.ep = nullptr;
        c.mr = nullptr;
        c.cq = nullptr;
    }

    // Reads c's CQ and keeps one send in flight.
    void progress(conn& c) {
        struct fi_cq_msg_entry e[8];
        ssize_t n = fi_cq_read(c.cq, e, 8);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {};
            if (fi_cq_readerr(c.cq, &err, 0) == 1) {
                char d[64];
                std::snprintf(d, sizeof d, "%s prov_errno=%d", err_name(err.err).c_str(), err.prov_errno);
                event(&c, nullptr, "CQ-ERROR", d, false);
                if (err.op_context == &c.sctx) c.send_out = false;
            }
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (e[i].op_context == &c.sctx) {
                c.send_out = false;
                continue;
            }
            auto* ctx = static_cast<struct fi_context*>(e[i].op_context);
            if (ctx < c.rctx || ctx >= c.rctx + kRecvs) continue;
            int k = static_cast<int>(ctx - c.rctx);
            uint64_t got = c.buf.r[k];
            if (got != c.next_recv) {
                std::printf("WRONG-PAYLOAD ep=%d got %llu want %llu\n", c.id,
                            static_cast<unsigned long long>(got), static_cast<unsigned long long>(c.next_recv));
                bad_payload = true;
            }
            c.next_recv = got + 1;
            c.received++;
            post_recv(c, k);
            double t = now();
            if (last_rx && t - last_rx > 1.0) {
                std::printf("GAP t=%.3f from=%.3f secs=%.2f\n", t, last_rx, t - last_rx);
                resumed_at = t;
            }
            last_rx = t;
        }
        if (c.send_out || c.first_fail > 0) return;
        double t = now();
        bool go;
        if (o.role == "server") {
            go = c.next_send < c.next_recv;  // a ping not echoed yet
        } else {
            // the next ping when the last was answered, or (the peer may be
            // gone: keep a send of ours on the wire) 0.2 s after the last
            // one, up to kWindow unanswered; the peer's kRecvs receives are
            // never all taken (iWARP has no RNR retry: a message finding no
            // receive ends the connection)
            uint64_t unanswered = c.next_send - 1 - c.received;
            bool want = o.mode == "busy" || c.next_send == 1;
            go = want && (unanswered == 0 || (unanswered < kWindow && t - c.last_send > 0.2));
        }
        if (!go) return;
        c.buf.s = c.next_send;
        if (fi_send(c.ep, &c.buf.s, sizeof c.buf.s, fi_mr_desc(c.mr), 0, &c.sctx) == 0) {
            c.send_out = true;
            c.next_send++;
            c.last_send = t;
        }
    }

    std::string async_what(const struct fi_eq_err_entry& err) {
        std::string w = err_name(err.err);
        if (err.err_data && err.err_data_size >= sizeof(struct fi_evd_async_err)) {
            auto* a = static_cast<const struct fi_evd_async_err*>(err.err_data);
            if (a->magic == FI_EVD_ASYNC_MAGIC)
                w += std::string(" ") + event_name(a->event_type);
        }
        return w + " prov_errno=" + std::to_string(err.prov_errno);
    }

    // One pass over the EQ. Returns the event read (0: none or an error).
    uint32_t poll_eq(struct fi_eq_cm_entry* cm_out = nullptr) {
        uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
        uint32_t ev = 0;
        ssize_t r = fi_eq_read(eq, &ev, buf, sizeof buf, 0);
        if (r == -FI_EAVAIL) {
            struct fi_eq_err_entry err = {};
            if (fi_eq_readerr(eq, &err, 0) < 0) return 0;
            conn* c = find(err.fid);
            if (c && !c->connected) {  // a connection attempt failed
                std::printf("CONNECT-FAILED t=%.3f ep=%d %s\n", now(), c->id, err_name(err.err).c_str());
                c->first_fail = -1;
                return 0;
            }
            event(c, err.fid, "EQ-ERROR", async_what(err), true);
            return 0;
        }
        if (r < 0) return 0;
        auto* cm = reinterpret_cast<struct fi_eq_cm_entry*>(buf);
        if (ev == FI_CONNREQ) {
            if (cm_out) *cm_out = *cm;
            return ev;
        }
        conn* c = find(cm->fid);
        if (ev == FI_CONNECTED && c) {
            c->connected = true;
        } else if (ev == FI_SHUTDOWN) {
            event(c, cm->fid, "FI_SHUTDOWN", "-", true);
        } else if (ev == FI_NOTIFY) {
            auto* ent = reinterpret_cast<struct fi_eq_entry*>(buf);
            std::string w = "data=" + std::to_string(ent->data);
            if (FI_EVD_NOTIFY_IS_ASYNC(ent->data))
                w = event_name(FI_EVD_NOTIFY_EVENT(ent->data));
            std::printf("EVENT t=%.3f ep=%s FI_NOTIFY %s\n", now(), who(c, cm->fid).c_str(), w.c_str());
        } else {
            std::printf("EVENT t=%.3f ep=%s other %u\n", now(), who(c, cm->fid).c_str(), ev);
        }
        return ev;
    }

    struct fi_info* hints() { return evdtool::msg_hints(o.prov.c_str(), 16); }

    void setup_common() {
        struct fi_eq_attr ea = {};
        ea.wait_obj = FI_WAIT_UNSPEC;
        FI_CHECK(fi_fabric(info->fabric_attr, &fab, nullptr));
        FI_CHECK(fi_eq_open(fab, &ea, &eq, nullptr));
        FI_CHECK(fi_domain(fab, info, &dom, nullptr));
        // the domain's own events (port, device), with evd's FI_NOTIFY
        // records for the good news (PORT_ACTIVE); a provider without them
        // refuses the bind
        int r = fi_domain_bind(dom, &eq->fid, FI_EVD_NOTIFY_ASYNC);
        if (r) r = fi_domain_bind(dom, &eq->fid, 0);
        std::printf("DOMAIN-EQ %s\n", r ? err_name(-r).c_str() : "bound");
    }

    bool ended(const conn& c) const { return c.first_fail > 0; }

    // The run's end: every connection ended (plus the grace), or data flowed
    // again for 3 s after a gap (-E).
    bool finished() {
        if (static_cast<int>(conns.size()) < o.eps) return false;
        double t = now();
        if (o.end_on_resume && resumed_at && t > resumed_at + 3) return true;
        if (!std::all_of(conns.begin(), conns.end(), [&](auto& c) { return ended(*c); })) return false;
        if (!all_ended_at) all_ended_at = t;
        return t > all_ended_at + o.grace;
    }

    void serve() {
        struct fi_info* h = hints();
        FI_CHECK(fi_getinfo(FI_VERSION(1, 17), o.addr.c_str(), o.port.c_str(), FI_SOURCE, h, &info));
        fi_freeinfo(h);
        setup_common();
        FI_CHECK(fi_passive_ep(fab, info, &pep, nullptr));
        FI_CHECK(fi_pep_bind(pep, &eq->fid, 0));
        FI_CHECK(fi_listen(pep));
        std::printf("LISTENING t=%.3f %s:%s\n", now(), o.addr.c_str(), o.port.c_str());
        double end = now() + o.secs;
        while (now() < end && !finished()) {
            struct fi_eq_cm_entry cm = {};
            if (poll_eq(&cm) == FI_CONNREQ) {
                auto c = std::make_unique<conn>();
                c->id = static_cast<int>(conns.size());
                open_conn(*c, cm.info);
                // a request the client gave up on may fail here: not the run
                int r = fi_accept(c->ep, nullptr, 0);
                fi_freeinfo(cm.info);
                if (r) {
                    std::printf("ACCEPT-FAILED t=%.3f %s\n", now(), err_name(-r).c_str());
                    close_conn(*c);
                    continue;
                }
                conns.push_back(std::move(c));
            }
            for (auto& c : conns)
                if (c->ep && c->connected && c->first_fail <= 0) progress(*c);
            usleep(1000);
        }
        summary("server");
    }

    // Opens and connects count endpoints; false if any attempt failed.
    bool connect(int count, double within) {
        size_t first = conns.size();
        for (int i = 0; i < count; i++) {
            auto c = std::make_unique<conn>();
            c->id = static_cast<int>(conns.size());
            open_conn(*c, info);
            int r = static_cast<int>(fi_connect(c->ep, info->dest_addr, nullptr, 0));
            conns.push_back(std::move(c));
            if (r) return false;
        }
        double end = now() + within;
        while (now() < end) {
            poll_eq();
            bool all = true;
            for (size_t i = first; i < conns.size(); i++) {
                if (conns[i]->first_fail < 0) return false;
                all = all && conns[i]->connected;
            }
            if (all) return true;
            usleep(500);
        }
        return false;
    }

    void drop_from(size_t first) {
        for (size_t i = first; i < conns.size(); i++) close_conn(*conns[i]);
        conns.resize(first);
    }

    void client() {
        struct fi_info* h = hints();
        double end = now() + o.secs;
        int r;
        while ((r = fi_getinfo(FI_VERSION(1, 17), o.addr.c_str(), o.port.c_str(), 0, h, &info)) < 0 &&
               now() < end)
            usleep(200000);
        FI_CHECK(r);
        setup_common();
        while (!connect(o.eps, 30)) {  // the server may still be starting
            drop_from(0);
            if (now() > end) evdtool::die("connecting", -FI_ETIMEDOUT);
            usleep(300000);
        }
        bool reconnected = false;
        while (now() < end) {
            poll_eq();
            for (auto& c : conns)
                if (c->ep && c->connected && c->first_fail <= 0) progress(*c);
            if (!ready_at && std::all_of(conns.begin(), conns.end(), [](auto& c) { return c->received > 0; })) {
                ready_at = now();
                std::printf("READY t=%.3f eps=%d\n", ready_at, o.eps);
            }
            if (o.reconnect && ready_at &&
                std::all_of(conns.begin(), conns.end(), [&](auto& c) { return ended(*c); })) {
                if (reconnect_one()) {
                    reconnected = true;
                    break;
                }
                continue;
            }
            if (!o.reconnect && finished()) break;
            if (o.reconnect && o.end_on_resume && resumed_at && now() > resumed_at + 3) break;
            usleep(1000);
        }
        summary("client");
        if (o.reconnect && !reconnected) std::printf("NOT-RECONNECTED\n");
        // The exit closes the connections (the server then gets FI_SHUTDOWN):
        // a second's pause keeps that apart from what the fault caused.
        usleep(1000000);
    }

    // -R: one new connection; true when it carried data both ways.
    bool reconnect_one() {
        size_t first = conns.size();
        if (!connect(1, 10)) {
            drop_from(first);
            usleep(500000);
            return false;
        }
        conn& n = *conns[first];
        double end = now() + 10;
        while (now() < end && !n.received && n.first_fail <= 0) {
            poll_eq();
            progress(n);
            usleep(1000);
        }
        if (n.received) {
            std::printf("RECONNECTED t=%.3f\n", now());
            return true;
        }
        drop_from(first);  // connected but carried nothing: try again
        return false;
    }

    void summary(const char* role) {
        int tmin = 0, tmax = 0, seen = 0;
        double first = 0, last = 0;
        uint64_t msgs = 0;
        for (auto& c : conns) {
            if (c->id >= o.eps) continue;  // -R's new connections
            tmin = seen++ ? std::min(tmin, c->terminal) : c->terminal;
            tmax = std::max(tmax, c->terminal);
            if (c->first_fail > 0 && (!first || c->first_fail < first)) first = c->first_fail;
            last = std::max(last, c->first_fail);
            msgs += c->received;
        }
        std::printf("SUMMARY t=%.3f prov=%s role=%s eps=%d terminal_min=%d terminal_max=%d first_fail=%.3f "
                    "last_fail=%.3f received=%llu bad_payload=%d\n",
                    now(), o.prov.c_str(), role, seen, tmin, tmax, first, last,
                    static_cast<unsigned long long>(msgs), bad_payload ? 1 : 0);
    }
};

}  // namespace

int main(int argc, char** argv) {
    evdtool::prog = "node_peer";
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    peer p;
    int ch;
    while ((ch = getopt(argc, argv, "p:r:a:P:n:m:t:g:RE")) != -1) {
        switch (ch) {
        case 'p': p.o.prov = optarg; break;
        case 'r': p.o.role = optarg; break;
        case 'a': p.o.addr = optarg; break;
        case 'P': p.o.port = optarg; break;
        case 'n': p.o.eps = std::atoi(optarg); break;
        case 'm': p.o.mode = optarg; break;
        case 't': p.o.secs = std::atof(optarg); break;
        case 'g': p.o.grace = std::atof(optarg); break;
        case 'R': p.o.reconnect = true; break;
        case 'E': p.o.end_on_resume = true; break;
        default:
            std::fprintf(stderr, "usage: node_peer -p PROV -r server|client -a ADDR [-P PORT] [-n EPS] "
                                 "[-m busy|idle] [-t SECS] [-g GRACE] [-R] [-E]\n");
            return 2;
        }
    }
    if ((p.o.role != "server" && p.o.role != "client") || p.o.addr.empty() || p.o.eps < 1 || p.o.eps > 64 ||
        (p.o.mode != "busy" && p.o.mode != "idle")) {
        std::fprintf(stderr, "node_peer: need -r server|client, -a ADDR, -m busy|idle and 1..64 endpoints\n");
        return 2;
    }
    if (p.o.role == "server") p.serve();
    else p.client();
    return p.bad_payload ? 1 : 0;  // a measurement: the process exits without tidying up
}
