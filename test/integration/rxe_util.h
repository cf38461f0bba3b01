// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Helpers shared by the integration suites that run on rxe in the VM:
// environment, the VM guard, and fi_getinfo for the listener (rxe0) and for a
// client bound to rxe1 that connects to rxe0.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
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
#include <initializer_list>
#include <string>
#include <thread>

#include "../unit/common.h"

namespace rxetest {

inline const char* env_or(const char* name, const char* def) {
    const char* v = std::getenv(name);
    return v && *v ? v : def;
}

inline bool in_vm() { return std::getenv("EVD_VM_ADDR0") != nullptr; }

#define REQUIRE_VM()                                                           \
    do {                                                                       \
        if (!rxetest::in_vm()) GTEST_SKIP() << "needs the rxe VM (test/vm/run-in-vm)"; \
    } while (0)

// MSG hints for evd with small queues and the registration modes evd needs.
inline struct fi_info* make_hints(bool shared_rx = false) {
    struct fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG;
    h->mode = ~0ULL;
    h->fabric_attr->prov_name = strdup("evd");
    h->tx_attr->size = 16;
    h->rx_attr->size = 16;
    if (shared_rx) h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    return h;
}

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

// Waits up to `ms` for one event on `eq`, pumping the other EQs in between;
// 0 with event/ent filled, or a negative error (an error record is a test
// failure and returns -err).
inline int eq_wait(struct fid_fabric* fab, std::initializer_list<struct fid_eq*> eqs,
                   struct fid_eq* eq, uint32_t& event, struct fi_eq_cm_entry& ent, int ms) {
    alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    ssize_t r;
    do {
        pump_eqs(fab, eqs, eq);
        r = fi_eq_sread(eq, &event, buf, sizeof buf, 50, 0);
    } while (r == -FI_EAGAIN && std::chrono::steady_clock::now() < end);
    if (r == -FI_EAVAIL) {
        struct fi_eq_err_entry err {};
        fi_eq_readerr(eq, &err, 0);
        ADD_FAILURE() << "EQ error: " << fi_strerror(err.err) << " prov_errno " << err.prov_errno;
        return -err.err;
    }
    if (r < 0) return static_cast<int>(r);
    std::memcpy(&ent, buf, sizeof ent);
    return 0;
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

// A link flap of veth0, the link under rxe0, as a cable pull would do it:
// link_down() takes it down (rxe0 raises PORT_ERR; veth1 loses its carrier).
// link_up() brings it back, restores the policy route the kernel flushed with
// the link (setup-rxe.sh's table 100), and waits until the ports of rxe0 and
// rxe1 are ACTIVE.
// Both return 0 on success.
inline int link_down() {
    std::string cmd = std::string("ip link set ") + env_or("EVD_VM_NETDEV0", "veth0") + " down";
    return std::system(cmd.c_str());
}
inline int link_up() {
    std::string n0 = env_or("EVD_VM_NETDEV0", "veth0");
    std::string cmd = "ip link set " + n0 + " up && ip route replace table 100 " +
                      env_or("EVD_VM_ADDR1", "192.0.2.2") + " dev " + n0 + " src " +
                      env_or("EVD_VM_ADDR0", "192.0.2.1");
    int rc = std::system(cmd.c_str());
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

// Hints of the data and counter suites: MSG with RMA and remote CQ data,
// queues `depth` deep (the device maxima would make rxe allocate huge ones).
inline struct fi_info* rma_hints(size_t depth) {
    struct fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG | FI_RMA;
    h->mode = FI_CONTEXT | FI_RX_CQ_DATA;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->addr_format = FI_SOCKADDR_IN;
    h->fabric_attr->prov_name = strdup("evd");
    h->tx_attr->size = depth;
    h->rx_attr->size = depth;
    return h;
}

// ---- removing and re-creating an rxe device (the device-removal tests)
inline bool sh_ok(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }
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
inline bool wait_device_ready(const std::string& dev, int secs) {
    return evdtest::wait_until(
        [&] {
            return sh_ok("grep -q ACTIVE /sys/class/infiniband/" + dev +
                         "/ports/1/state 2>/dev/null && cat /sys/class/infiniband/" + dev +
                         "/ports/1/gids/* 2>/dev/null | grep -q ffff:c000");
        },
        std::chrono::milliseconds(secs * 1000));
}
// Re-creates rxe device dev on netdev and waits until it is ready. The
// netdev stays claimed for a moment after the device went away, so the add
// is retried; false when it never succeeded or the device never got ready.
inline bool readd_device(const std::string& dev, const std::string& netdev, int secs) {
    const bool added = evdtest::wait_until(
        [&] { return sh_ok("rdma link add " + dev + " type rxe netdev " + netdev + " 2>/dev/null"); },
        std::chrono::milliseconds(secs * 1000));
    return added && wait_device_ready(dev, secs);
}

// A connected pair for the data and counter suites: a listener on rxe0 and a
// client on rxe1, each side with its own domain and EQ (Side has ep and eq).
// Derived provides pair_hints() and open_side(Side&, fi_info*), which opens,
// binds and enables one side's endpoint; its TearDown closes the sides, then
// calls close_listener().
template <class Derived, class Side>
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
    }

    // Waits for one event on eq, progressing the pair's other EQs.
    int eq_wait(struct fid_eq* eq, uint32_t& event, struct fi_eq_cm_entry& ent, int ms = 20000) {
        return rxetest::eq_wait(fab, {peq, s.eq, c.eq}, eq, event, ent, ms);
    }

    // Listens on rxe0 and connects from rxe1. before_connect(side) runs on
    // each side once its endpoint is enabled, before fi_connect / fi_accept
    // (post receives there).
    template <class F>
    void connect(F before_connect) {
        Derived& d = static_cast<Derived&>(*this);
        struct fi_info* h = d.pair_hints();
        ASSERT_NO_FATAL_FAILURE(listen_on_rxe0(h, &srv_info, &fab, &peq, &pep));
        struct fi_info* ci = client_info_for(h, pep);
        fi_freeinfo(h);
        ASSERT_NE(ci, nullptr);
        ASSERT_NO_FATAL_FAILURE(d.open_side(c, ci));
        ASSERT_NO_FATAL_FAILURE(before_connect(c));
        ASSERT_EQ(fi_connect(c.ep, ci->dest_addr, nullptr, 0), 0);
        uint32_t ev = 0;
        struct fi_eq_cm_entry ent {};
        ASSERT_EQ(eq_wait(peq, ev, ent), 0);
        ASSERT_EQ(ev, static_cast<uint32_t>(FI_CONNREQ));
        ASSERT_NO_FATAL_FAILURE(d.open_side(s, ent.info));
        ASSERT_NO_FATAL_FAILURE(before_connect(s));
        ASSERT_EQ(fi_accept(s.ep, nullptr, 0), 0);
        ASSERT_EQ(eq_wait(s.eq, ev, ent), 0);
        ASSERT_EQ(ev, static_cast<uint32_t>(FI_CONNECTED));
        ASSERT_EQ(eq_wait(c.eq, ev, ent), 0);
        ASSERT_EQ(ev, static_cast<uint32_t>(FI_CONNECTED));
    }
    void connect() {
        connect([](Side&) {});
    }
};

}  // namespace rxetest
