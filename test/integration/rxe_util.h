// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Helpers shared by the integration suites that run on rxe in the VM:
// environment, the VM guard, and fi_getinfo for the listener (rxe0) and for a
// client bound to rxe1 that connects to rxe0.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <unistd.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/common.h"
#include "../common/rxe_hints.h"
#include "../common/vm_link.h"

namespace rxetest {

inline bool in_vm() { return std::getenv("EVD_VM_ADDR0") != nullptr; }

#define REQUIRE_VM()                                                           \
    do {                                                                       \
        if (!rxetest::in_vm()) GTEST_SKIP() << "needs the rxe VM (test/vm/run-in-vm)"; \
    } while (0)

// A listener's info: rxe0 (EVD_VM_ADDR0) as the source.
inline struct fi_info* server_info(const std::string& port, bool shared_rx = false) {
    evdtest::use_build_tree_provider();
    struct fi_info* h = make_hints(shared_rx);
    struct fi_info* info = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"), port.c_str(),
                         FI_SOURCE, h, &info);
    fi_freeinfo(h);
    EXPECT_EQ(ret, 0) << fi_strerror(-ret);
    return ret ? nullptr : info;
}

// A client's info: source rxe1 (EVD_VM_ADDR1), destination `dest` (default rxe0).
inline struct fi_info* client_info(const std::string& port, const char* dest = nullptr,
                                   bool shared_rx = false) {
    evdtest::use_build_tree_provider();
    struct fi_info* h = make_hints(shared_rx);
    auto* sin = static_cast<struct sockaddr_in*>(calloc(1, sizeof(struct sockaddr_in)));
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, env_or("EVD_VM_ADDR1", "192.0.2.2"), &sin->sin_addr);
    h->addr_format = FI_SOCKADDR_IN;
    h->src_addr = sin;
    h->src_addrlen = sizeof(*sin);
    struct fi_info* info = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), dest ? dest : env_or("EVD_VM_ADDR0", "192.0.2.1"),
                         port.c_str(), 0, h, &info);
    fi_freeinfo(h);
    EXPECT_EQ(ret, 0) << fi_strerror(-ret);
    return ret ? nullptr : info;
}

// Opens the fabric of `hints`' rxe0 answer, an EQ and a passive endpoint
// listening on rxe0 (EVD_VM_ADDR0, an ephemeral port); the caller closes them.
inline void listen_on_rxe0(struct fi_info* hints, struct fi_info** srv, struct fid_fabric** fab,
                           struct fid_eq** peq, struct fid_pep** pep) {
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"), "0", FI_SOURCE,
                         hints, srv), 0);
    ASSERT_EQ(fi_fabric((*srv)->fabric_attr, fab, nullptr), 0);
    struct fi_eq_attr ea {};
    ea.wait_obj = FI_WAIT_UNSPEC;
    ASSERT_EQ(fi_eq_open(*fab, &ea, peq, nullptr), 0);
    ASSERT_EQ(fi_passive_ep(*fab, *srv, pep, nullptr), 0);
    ASSERT_EQ(fi_pep_bind(*pep, &(*peq)->fid, 0), 0);
    ASSERT_EQ(fi_listen(*pep), 0);
}

// fi_getinfo for `hints` from rxe1 (EVD_VM_ADDR1) to the port `pep` listens
// on at rxe0; nullptr (with a test failure) if there is none after `tries`
// attempts 500 ms apart (right after a flap, rxe1's neighbour entry for rxe0's
// address can still be FAILED, and address resolution fails until it is
// probed again).
inline struct fi_info* client_info_for(const struct fi_info* hints, struct fid_pep* pep,
                                       int tries = 1) {
    struct sockaddr_in sin {};
    size_t len = sizeof sin;
    EXPECT_EQ(fi_getname(&pep->fid, &sin, &len), 0);
    std::string port = std::to_string(ntohs(sin.sin_port));
    struct fi_info* h = fi_dupinfo(hints);
    auto* src = static_cast<struct sockaddr_in*>(calloc(1, sizeof(struct sockaddr_in)));
    src->sin_family = AF_INET;
    inet_pton(AF_INET, env_or("EVD_VM_ADDR1", "192.0.2.2"), &src->sin_addr);
    free(h->src_addr);
    h->src_addr = src;
    h->src_addrlen = sizeof(*src);
    struct fi_info* info = nullptr;
    int ret = 0;
    for (int i = 0; i < tries; ++i) {
        if (i) std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ret = fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"), port.c_str(), 0,
                         h, &info);
        if (ret != -FI_ENODATA) break;
    }
    fi_freeinfo(h);
    EXPECT_EQ(ret, 0) << fi_strerror(-ret);
    return ret ? nullptr : info;
}

// rxe0 and rxe1 are both there (the suites that need two devices skip otherwise).
inline bool have_two_devices() {
    int n = 0;
    struct ibv_device** l = ibv_get_device_list(&n);
    if (l) ibv_free_device_list(l);
    return n >= 2;
}

// Connection events advance when their EQ is read: while a test waits on one
// EQ, the others are progressed with fi_trywait (as a threaded app would).
inline void pump_eqs(struct fid_fabric* fab, std::initializer_list<struct fid_eq*> eqs,
                     struct fid_eq* except) {
    for (struct fid_eq* q : eqs) {
        if (!q || q == except) continue;
        struct fid* f = &q->fid;
        (void)fi_trywait(fab, &f, 1);
    }
}

// One EQ record as the CM tests check it.
struct cm_rec {
    ssize_t rc = 0;  // > 0: event; -FI_EAVAIL: error (err); other < 0: nothing
    uint32_t event = 0;
    fid_t fid = nullptr;
    struct fi_info* info = nullptr;
    std::vector<uint8_t> data;
    struct fi_eq_err_entry err = {};
    std::vector<uint8_t> err_data;
};

// Waits up to `timeout_ms` for one record on eq; pump(eq) runs between the
// short waits and progresses the other EQs (connection events advance when
// their EQ is read).
template <class Pump>
cm_rec next_event(struct fid_eq* eq, int timeout_ms, Pump pump) {
    cm_rec r;
    alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 512];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        pump(eq);
        r.rc = fi_eq_sread(eq, &r.event, buf, sizeof(buf), std::min(timeout_ms, 5), 0);
        if (r.rc != -FI_EAGAIN || std::chrono::steady_clock::now() >= deadline) break;
    }
    if (r.rc == -FI_EAVAIL) {
        uint8_t ebuf[512];
        r.err.err_data = ebuf;
        r.err.err_data_size = sizeof(ebuf);
        ssize_t n = fi_eq_readerr(eq, &r.err, 0);
        EXPECT_EQ(n, static_cast<ssize_t>(sizeof(r.err)));
        r.fid = r.err.fid;
        if (r.err.err_data_size)
            r.err_data.assign(static_cast<uint8_t*>(r.err.err_data),
                              static_cast<uint8_t*>(r.err.err_data) + r.err.err_data_size);
        r.err.err_data = nullptr;
        return r;
    }
    if (r.rc >= static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry))) {
        auto* e = reinterpret_cast<struct fi_eq_cm_entry*>(buf);
        r.fid = e->fid;
        r.info = e->info;
        r.data.assign(e->data, e->data + (r.rc - sizeof(*e)));
    }
    return r;
}

inline std::string describe(const cm_rec& r) {
    if (r.rc == -FI_EAVAIL)
        return "error " + std::to_string(r.err.err) + " (" + fi_strerror(r.err.err) +
               ") prov_errno " + std::to_string(r.err.prov_errno);
    if (r.rc < 0) return "nothing: " + std::string(fi_strerror(static_cast<int>(-r.rc)));
    return "event " + std::to_string(r.event) + " len " + std::to_string(r.rc);
}

// Waits up to `ms` for one event on `eq`, pumping the other EQs in between;
// 0 with event/ent filled, or a negative error (an error record is a test
// failure and returns -err).
inline int eq_wait(struct fid_fabric* fab, std::initializer_list<struct fid_eq*> eqs,
                   struct fid_eq* eq, uint32_t& event, struct fi_eq_cm_entry& ent, int ms) {
    cm_rec r = next_event(eq, ms, [&](struct fid_eq* except) { pump_eqs(fab, eqs, except); });
    if (r.rc == -FI_EAVAIL) {
        ADD_FAILURE() << "EQ error: " << fi_strerror(r.err.err) << " prov_errno "
                      << r.err.prov_errno;
        return -r.err.err;
    }
    if (r.rc < 0) return static_cast<int>(r.rc);
    event = r.event;
    ent = {};
    ent.fid = r.fid;
    ent.info = r.info;
    return 0;
}

// The two halves of the checked connection handshake through the CM.
// connect_request: the client endpoint cep (open and enabled) connects to
// `dest` (null: its info's) with cdata, and the request reaches the listener
// pep on peq with that data; returns the request (the caller owns its info).
// `wait` (struct fid_eq*) -> cm_rec reads the next record of an EQ.
template <class Wait>
void connect_request(Wait wait, struct fid_pep* pep, struct fid_eq* peq, struct fid_ep* cep,
                     const void* dest, const std::vector<uint8_t>& cdata, cm_rec* req) {
    ASSERT_EQ(fi_connect(cep, dest, cdata.data(), cdata.size()), 0);
    *req = wait(peq);
    ASSERT_EQ(req->rc, static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry) + cdata.size()))
        << describe(*req);
    EXPECT_EQ(req->event, static_cast<uint32_t>(FI_CONNREQ));
    EXPECT_EQ(req->fid, &pep->fid);
    EXPECT_EQ(req->data, cdata);
    ASSERT_NE(req->info, nullptr);
    EXPECT_NE(req->info->handle, nullptr);
    EXPECT_STREQ(req->info->domain_attr->name, env_or("EVD_VM_DEV0", "rxe0"));
    EXPECT_NE(req->info->src_addr, nullptr);
    EXPECT_NE(req->info->dest_addr, nullptr);
}
// accept_connected: the server endpoint sep (open and enabled, its events on
// seq) accepts with adata; both ends see FI_CONNECTED, the client (cep on
// ceq) with adata.
template <class Wait>
void accept_connected(Wait wait, struct fid_ep* sep, struct fid_eq* seq, struct fid_ep* cep,
                      struct fid_eq* ceq, const std::vector<uint8_t>& adata) {
    ASSERT_EQ(fi_accept(sep, adata.data(), adata.size()), 0);
    cm_rec c = wait(ceq);
    ASSERT_EQ(c.rc, static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry) + adata.size()))
        << describe(c);
    EXPECT_EQ(c.event, static_cast<uint32_t>(FI_CONNECTED));
    EXPECT_EQ(c.fid, &cep->fid);
    EXPECT_EQ(c.data, adata);
    cm_rec s = wait(seq);
    ASSERT_EQ(s.rc, static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry))) << describe(s);
    EXPECT_EQ(s.event, static_cast<uint32_t>(FI_CONNECTED));
    EXPECT_EQ(s.fid, &sep->fid);
}

// The whole handshake: connect_request, then open_server(info) takes the
// request's info and returns the server's endpoint, open and enabled, and the
// EQ it is bound to, then accept_connected. *sep is the server's endpoint as
// soon as it is open.
template <class Wait, class OpenServer>
void handshake(Wait wait, struct fid_pep* pep, struct fid_eq* peq, struct fid_ep* cep,
               struct fid_eq* ceq, const void* dest, const std::vector<uint8_t>& cdata,
               OpenServer open_server, const std::vector<uint8_t>& adata, struct fid_ep** sep) {
    *sep = nullptr;
    cm_rec req;
    ASSERT_NO_FATAL_FAILURE(connect_request(wait, pep, peq, cep, dest, cdata, &req));
    auto [ep, seq] = open_server(req.info);
    *sep = ep;
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_NE(ep, nullptr);
    ASSERT_NO_FATAL_FAILURE(accept_connected(wait, ep, seq, cep, ceq, adata));
}

// Reads eq for `secs` seconds and counts the terminal events it carries:
// error records (each handed to on_err to check) and FI_SHUTDOWN. A test
// expecting one terminal event per endpoint checks the count is 1.
template <class OnErr>
int terminal_events(struct fid_eq* eq, int secs, OnErr on_err) {
    int n = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
    while (std::chrono::steady_clock::now() < end) {
        uint32_t ev;
        uint8_t buf[512];
        ssize_t r = fi_eq_read(eq, &ev, buf, sizeof buf, 0);
        if (r == -FI_EAVAIL) {
            struct fi_eq_err_entry ee {};
            EXPECT_GT(fi_eq_readerr(eq, &ee, 0), 0);
            on_err(ee);
            ++n;
        } else if (r > 0) {
            if (ev == FI_SHUTDOWN) ++n;
        } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    return n;
}

// Waits up to `ms` for one completion on cq: 1 with e filled, -FI_EAVAIL
// when an error completion is next (read it with fi_cq_readerr), or
// -FI_ETIMEDOUT.
inline ssize_t cq_wait_one(struct fid_cq* cq, struct fi_cq_data_entry& e, int ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        ssize_t r = fi_cq_read(cq, &e, 1);
        if (r != -FI_EAGAIN) return r;
        if (std::chrono::steady_clock::now() > end) return -FI_ETIMEDOUT;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

// One message of `out` from one endpoint to the other over their
// connection: the receiver's completion (on to_rxcq) carries the data, and
// both completions their contexts.
inline void message_flows(struct fid_domain* from_dom, struct fid_ep* from,
                          struct fid_cq* from_txcq, struct fid_domain* to_dom, struct fid_ep* to,
                          struct fid_cq* to_rxcq, const std::vector<uint8_t>& out,
                          int ms = 20000) {
    std::vector<uint8_t> in(out.size(), 0);
    struct fid_mr *om = nullptr, *im = nullptr;
    ASSERT_EQ(fi_mr_reg(from_dom, out.data(), out.size(), FI_SEND, 0, 0, 0, &om, nullptr), 0);
    ASSERT_EQ(fi_mr_reg(to_dom, in.data(), in.size(), FI_RECV, 0, 0, 0, &im, nullptr), 0);
    int rctx = 0, sctx = 0;
    ASSERT_EQ(fi_recv(to, in.data(), in.size(), fi_mr_desc(im), 0, &rctx), 0);
    ASSERT_EQ(fi_send(from, out.data(), out.size(), fi_mr_desc(om), 0, &sctx), 0);
    struct fi_cq_data_entry e {};
    EXPECT_EQ(cq_wait_one(from_txcq, e, ms), 1);
    EXPECT_EQ(e.op_context, &sctx);
    e = {};
    EXPECT_EQ(cq_wait_one(to_rxcq, e, ms), 1);
    EXPECT_EQ(e.op_context, &rctx);
    EXPECT_EQ(in, out);
    EXPECT_EQ(fi_close(&om->fid), 0);
    EXPECT_EQ(fi_close(&im->fid), 0);
}

// An fi_msg of one buffer (iov and desc must outlive it).
inline struct fi_msg one_buffer_msg(struct iovec& iov, void*& desc, void* context) {
    struct fi_msg m {};
    m.msg_iov = &iov;
    m.desc = &desc;
    m.iov_count = 1;
    m.context = context;
    return m;
}

// The shell command that makes dev drop every packet it sends (netem, 100%
// loss) while its link stays up, or (on false) stops that.
inline std::string netem_loss_cmd(const std::string& dev, bool on) {
    return on ? "modprobe sch_netem 2>/dev/null; tc qdisc replace dev " + dev +
                    " root netem loss 100%"
              : "tc qdisc del dev " + dev + " root 2>/dev/null; true";
}

// partition(true) drops every packet both ends of the veth pair send while
// both links stay up: a partition nobody is told about, no port event, no
// error anywhere. partition(false) heals it. The system(3) status (0: done).
inline int partition(bool on) {
    const std::string cmd = netem_loss_cmd(env_or("EVD_VM_NETDEV0", "veth0"), on) + " && " +
                            netem_loss_cmd(env_or("EVD_VM_NETDEV1", "veth1"), on);
    return std::system(cmd.c_str());
}

// link_up() brings veth0 back (link_set_up, vm_link.h) and waits until the
// ports of rxe0 and rxe1 are ACTIVE; 0 on success.
inline int link_up() {
    int rc = link_set_up();
    auto active = [](const char* var, const char* dflt) {
        std::string state = std::string("/sys/class/infiniband/") + env_or(var, dflt) +
                            "/ports/1/state";
        char buf[64] = "";
        if (FILE* f = std::fopen(state.c_str(), "r")) {
            if (!std::fgets(buf, sizeof buf, f)) buf[0] = '\0';
            std::fclose(f);
        }
        return std::strstr(buf, "ACTIVE") != nullptr;
    };
    for (int i = 0; i < 200; ++i) {  // both ends: veth1 gets its carrier back with veth0
        if (active("EVD_VM_DEV0", "rxe0") && active("EVD_VM_DEV1", "rxe1")) return rc;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return rc ? rc : -1;
}

// ---- removing and re-creating an rxe device (the device-removal tests)
inline bool sh_ok(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }
// The devices' driver: rxe, or siw under run-in-vm --driver siw.
inline std::string driver() {
    const char* d = getenv("EVD_VM_DRIVER");
    return d && *d ? d : "rxe";
}
// The suites run on rxe and on Soft-iWARP (run-in-vm --driver siw).
inline bool on_iwarp() { return driver() == "siw"; }
inline bool device_exists(const std::string& dev) {
    return sh_ok("test -e /sys/class/infiniband/" + dev);
}
// Waits until dev is gone (rdma link delete completes only once every user
// closed its objects); false after `secs`.
inline bool wait_device_gone(const std::string& dev, int secs) {
    return evdtest::wait_until([&] { return !device_exists(dev); },
                               std::chrono::milliseconds(secs * 1000));
}
// Port 1 of dev ACTIVE and its IPv4-mapped GID present (rdma_cm needs both;
// the GID appears shortly after the port turns ACTIVE).
// (iWARP has no IP-derived GIDs: there, ACTIVE is enough.)
inline bool wait_device_ready(const std::string& dev, int secs) {
    const bool iwarp = on_iwarp();
    return evdtest::wait_until(
        [&] {
            return sh_ok("grep -q ACTIVE /sys/class/infiniband/" + dev + "/ports/1/state 2>/dev/null") &&
                   (iwarp || sh_ok("cat /sys/class/infiniband/" + dev +
                                   "/ports/1/gids/* 2>/dev/null | grep -q ffff:c000"));
        },
        std::chrono::milliseconds(secs * 1000));
}
// Re-creates device dev (rxe or siw) on netdev and waits until it is ready. The
// netdev stays claimed for a moment after the device went away, so the add
// is retried; false when it never succeeded or the device never got ready.
inline bool readd_device(const std::string& dev, const std::string& netdev, int secs) {
    const bool added = evdtest::wait_until(
        [&] { return sh_ok("rdma link add " + dev + " type " + driver() + " netdev " + netdev + " 2>/dev/null"); },
        std::chrono::milliseconds(secs * 1000));
    return added && wait_device_ready(dev, secs);
}

// One end of a connection that owns its fabric (the CM and async suites):
// fabric, domain (context dom_ctx), an EQ 1024 deep and a transmit and a
// receive CQ (FI_CQ_FORMAT_CONTEXT, no wait object) that its endpoints share.
// before_cqs(), when given, runs once the EQ is open (bind it to the domain
// there) and returns false on failure.
struct fabric_side {
    struct fi_info* info = nullptr;
    struct fid_fabric* fab = nullptr;
    struct fid_domain* dom = nullptr;
    struct fid_eq* eq = nullptr;
    struct fid_cq* txcq = nullptr;
    struct fid_cq* rxcq = nullptr;

    bool open(struct fi_info* i, size_t txcq_size = 64, void* dom_ctx = nullptr,
              const std::function<bool()>& before_cqs = {}) {
        info = i;
        if (!info) return false;
        int ret = fi_fabric(info->fabric_attr, &fab, nullptr);
        EXPECT_EQ(ret, 0) << "fi_fabric " << fi_strerror(-ret);
        if (ret) return false;
        ret = fi_domain(fab, info, &dom, dom_ctx);
        EXPECT_EQ(ret, 0) << "fi_domain " << fi_strerror(-ret);
        if (ret) return false;
        struct fi_eq_attr ea = {};
        ea.size = 1024;
        ea.wait_obj = FI_WAIT_UNSPEC;
        ret = fi_eq_open(fab, &ea, &eq, nullptr);
        EXPECT_EQ(ret, 0) << "fi_eq_open " << fi_strerror(-ret);
        if (ret) return false;
        if (before_cqs && !before_cqs()) return false;
        struct fi_cq_attr ca = {};
        ca.size = txcq_size;
        ca.format = FI_CQ_FORMAT_CONTEXT;
        ca.wait_obj = FI_WAIT_NONE;
        ret = fi_cq_open(dom, &ca, &txcq, nullptr);
        EXPECT_EQ(ret, 0) << "fi_cq_open " << fi_strerror(-ret);
        if (ret) return false;
        ca.size = 64;
        ret = fi_cq_open(dom, &ca, &rxcq, nullptr);
        EXPECT_EQ(ret, 0);
        return ret == 0;
    }
    // Closes what open opened (the domain before the EQ it may be bound to).
    void close() {
        if (txcq) { EXPECT_EQ(fi_close(&txcq->fid), 0); }
        if (rxcq) { EXPECT_EQ(fi_close(&rxcq->fid), 0); }
        if (dom) { EXPECT_EQ(fi_close(&dom->fid), 0); }
        if (eq) { EXPECT_EQ(fi_close(&eq->fid), 0); }
        if (fab) { EXPECT_EQ(fi_close(&fab->fid), 0); }
        fi_freeinfo(info);
        *this = fabric_side{};
    }
    // Binds ep to the EQ, the CQs and srx (if any) and enables it; 0 or the
    // failing call's error.
    int setup_ep(struct fid_ep* ep, struct fid_ep* srx = nullptr) const {
        int ret = fi_ep_bind(ep, &eq->fid, 0);
        if (!ret) ret = fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT);
        if (!ret) ret = fi_ep_bind(ep, &rxcq->fid, FI_RECV);
        if (!ret && srx) ret = fi_ep_bind(ep, &srx->fid, 0);
        if (!ret) ret = fi_enable(ep);
        return ret;
    }
};

// A port for a test's listener: base + 20 per process (by pid) + a counter.
inline std::string next_port(int base) {
    static int n = 0;
    return std::to_string(base + (getpid() % 200) * 20 + (n++ % 20));
}

// One end of a PairFixture connection: its own domain and EQ on the pair's
// fabric, a transmit and a receive CQ (where the suite opens them) and the
// endpoint. A suite whose ends carry more derives from it.
struct pair_side {
    struct fi_info* info = nullptr;
    struct fid_domain* dom = nullptr;
    struct fid_eq* eq = nullptr;
    struct fid_ep* ep = nullptr;
    struct fid_cq* tx = nullptr;
    struct fid_cq* rx = nullptr;
};

// A connected pair for the data, counter and link suites: a listener on rxe0
// and a client on rxe1, each side (a pair_side) with its own domain and EQ.
// Derived provides pair_hints() and open_side(Side&, fi_info*), which opens,
// binds and enables one side's endpoint (open_domain, open_cqs and
// open_endpoint do the common part); its TearDown closes the sides
// (close_side), then calls close_listener().
template <class Derived, class Side = pair_side>
class PairFixture : public ::testing::Test {
protected:
    struct fid_fabric* fab = nullptr;
    struct fid_eq* peq = nullptr;  // the passive endpoint's EQ
    struct fid_pep* pep = nullptr;
    struct fi_info* srv_info = nullptr;
    Side s, c;  // server (rxe0), client (rxe1)

    void SetUp() override {
        if (!have_two_devices()) GTEST_SKIP() << "needs rxe0/rxe1 (run inside test/vm/run-in-vm)";
        evdtest::use_build_tree_provider();
    }

    void close_listener() {
        if (pep) { EXPECT_EQ(fi_close(&pep->fid), 0); }
        if (peq) { EXPECT_EQ(fi_close(&peq->fid), 0); }
        if (srv_info) fi_freeinfo(srv_info);
        if (fab) { EXPECT_EQ(fi_close(&fab->fid), 0); }
        fab = nullptr;
        peq = nullptr;
        pep = nullptr;
        srv_info = nullptr;
    }

    // x takes info and opens its domain and EQ on the pair's fabric.
    void open_domain(Side& x, struct fi_info* info) {
        x.info = info;
        ASSERT_EQ(fi_domain(fab, info, &x.dom, nullptr), 0);
        struct fi_eq_attr ea {};
        ea.wait_obj = FI_WAIT_UNSPEC;
        ASSERT_EQ(fi_eq_open(fab, &ea, &x.eq, nullptr), 0);
    }
    // x's transmit and receive CQs (FI_CQ_FORMAT_DATA).
    static void open_cqs(Side& x, enum fi_wait_obj wait_obj, size_t size) {
        struct fi_cq_attr ca {};
        ca.format = FI_CQ_FORMAT_DATA;
        ca.wait_obj = wait_obj;
        ca.size = size;
        ASSERT_EQ(fi_cq_open(x.dom, &ca, &x.tx, nullptr), 0);
        ASSERT_EQ(fi_cq_open(x.dom, &ca, &x.rx, nullptr), 0);
    }
    // x's endpoint (context ctx) bound to its EQ and to the CQs it has
    // (the transmit one with FI_TRANSMIT | tx_flags); not yet enabled.
    static void open_endpoint(Side& x, uint64_t tx_flags = 0, void* ctx = nullptr) {
        ASSERT_EQ(fi_endpoint(x.dom, x.info, &x.ep, ctx), 0);
        ASSERT_EQ(fi_ep_bind(x.ep, &x.eq->fid, 0), 0);
        if (x.tx) { ASSERT_EQ(fi_ep_bind(x.ep, &x.tx->fid, FI_TRANSMIT | tx_flags), 0); }
        if (x.rx) { ASSERT_EQ(fi_ep_bind(x.ep, &x.rx->fid, FI_RECV), 0); }
    }
    // Closes x: its endpoint, then what close_bound(x) closes (objects that
    // were bound to the endpoint), the CQs, EQ and domain; x is empty after.
    template <class F>
    static void close_side(Side& x, F close_bound) {
        if (x.ep) { EXPECT_EQ(fi_close(&x.ep->fid), 0); }
        x.ep = nullptr;
        close_bound(x);
        if (x.tx) { EXPECT_EQ(fi_close(&x.tx->fid), 0); }
        if (x.rx && x.rx != x.tx) { EXPECT_EQ(fi_close(&x.rx->fid), 0); }
        if (x.eq) { EXPECT_EQ(fi_close(&x.eq->fid), 0); }
        if (x.dom) { EXPECT_EQ(fi_close(&x.dom->fid), 0); }
        if (x.info) fi_freeinfo(x.info);
        x = Side{};
    }
    static void close_side(Side& x) {
        close_side(x, [](Side&) {});
    }

    // Waits for one event on eq, progressing the pair's other EQs.
    int eq_wait(struct fid_eq* eq, uint32_t& event, struct fi_eq_cm_entry& ent, int ms = 20000) {
        return rxetest::eq_wait(fab, {peq, s.eq, c.eq}, eq, event, ent, ms);
    }
    cm_rec next_event(struct fid_eq* eq, int ms = 20000) {
        return rxetest::next_event(eq, ms, [this](struct fid_eq* except) {
            pump_eqs(fab, {peq, s.eq, c.eq}, except);
        });
    }

    // Listens on rxe0 (the pair's fabric, peq and pep).
    void listen() {
        struct fi_info* h = static_cast<Derived&>(*this).pair_hints();
        listen_on_rxe0(h, &srv_info, &fab, &peq, &pep);
        fi_freeinfo(h);
    }
    // Opens the client side c on rxe1 for the listener, getinfo retried
    // `tries` times (see client_info_for).
    void open_client(int tries = 1) {
        struct fi_info* h = static_cast<Derived&>(*this).pair_hints();
        struct fi_info* ci = client_info_for(h, pep, tries);
        fi_freeinfo(h);
        ASSERT_NE(ci, nullptr);
        ASSERT_NO_FATAL_FAILURE(static_cast<Derived&>(*this).open_side(c, ci));
    }
    // Connects the open client c to the listener and accepts on a new server
    // side s (handshake). before_connect(side) runs on each side once its
    // endpoint is enabled, before fi_connect / fi_accept (post receives there).
    template <class F>
    void handshake(F before_connect) {
        ASSERT_NO_FATAL_FAILURE(before_connect(c));
        struct fid_ep* sep = nullptr;
        rxetest::handshake([this](struct fid_eq* q) { return next_event(q); }, pep, peq, c.ep,
                           c.eq, c.info->dest_addr, {},
                           [&](struct fi_info* info) {
                               static_cast<Derived&>(*this).open_side(s, info);
                               if (!::testing::Test::HasFatalFailure()) before_connect(s);
                               return std::pair{s.ep, s.eq};
                           },
                           {}, &sep);
    }

    // Listens on rxe0 and connects from rxe1; before_connect as in handshake.
    template <class F>
    void connect(F before_connect) {
        ASSERT_NO_FATAL_FAILURE(listen());
        ASSERT_NO_FATAL_FAILURE(open_client());
        ASSERT_NO_FATAL_FAILURE(handshake(before_connect));
    }
    void connect() {
        connect([](Side&) {});
    }
};

}  // namespace rxetest
