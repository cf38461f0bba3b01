// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hardware async events on rxe through the real libfabric API (inside the VM,
// test/vm/run-in-vm; skipped elsewhere). What rxe raises and what it does not
// is written down in docs/rxe-async-events.md; each event it raises is tested
// here:
//   * link down/up of the netdev under rxe0: PORT_ERR (error) then
//     PORT_ACTIVE (FI_NOTIFY) on the domain's EQ, a blocked fi_eq_sread woken
//     by the hardware event, timestamps, the port snapshot, and the latency
//     of evd beyond the kernel's own delivery (a raw verbs context on the same
//     device is the reference);
//   * an address added to the netdev: GID_CHANGE (FI_NOTIFY);
//   * notifications are opt-in (a domain bound without FI_EVD_NOTIFY_ASYNC
//     sees only the error);
//   * a CQ overrun: CQ_ERR on the CQ's fid via the domain's EQ;
//   * SRQ limit: SRQ_LIMIT_REACHED on the shared rx context's fid after
//     srq_arm (FI_EVD_ASYNC_OPS);
//   * evd_eqwatch prints the records of a link flap;
//   * librdmacm's context is left to its other readers: an async thread of
//     the application on it keeps its blocking fd and every port event, and
//     never sees the events of evd's objects (evd reads its own context).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/rdma_cma.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "../common/common.h"
#include "rdma/fi_ext_evd.h"
#include "rxe_util.h"

namespace {

using rxetest::env_or;
using rxetest::in_vm;

constexpr int kWait = 20000;  // ms: TCG emulation is slow

const char* dev0() { return env_or("EVD_VM_DEV0", "rxe0"); }
const char* netdev0() { return env_or("EVD_VM_NETDEV0", "veth0"); }

uint64_t mono_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

using rxetest::link_set;

std::string next_port() { return rxetest::next_port(23000); }

// rxe0 (EVD_VM_ADDR0) as a listener's source, or rxe1 (EVD_VM_ADDR1) as the
// source of a client connecting to rxe0.
struct fi_info* get_info(bool server, const std::string& port, bool shared_rx = false) {
    return server ? rxetest::server_info(port, shared_rx)
                  : rxetest::client_info(port, nullptr, shared_rx);
}

// fabric + domain + EQ bound to the domain (with `bind_flags`) + CQs, and
// the domain's FI_EVD_ASYNC_OPS.
struct side : rxetest::fabric_side {
    struct fi_evd_async_ops* ops = nullptr;

    bool open(struct fi_info* i, uint64_t bind_flags, size_t txcq_size = 64) {
        return fabric_side::open(i, txcq_size, this, [&] {
            int ret = fi_domain_bind(dom, &eq->fid, bind_flags);
            EXPECT_EQ(ret, 0) << "fi_domain_bind " << fi_strerror(-ret);
            if (ret) return false;
            ret = fi_open_ops(&dom->fid, FI_EVD_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops),
                              nullptr);
            EXPECT_EQ(ret, 0) << "fi_open_ops(FI_EVD_ASYNC_OPS) " << fi_strerror(-ret);
            return ret == 0;
        });
    }
    void close() {
        fabric_side::close();
        ops = nullptr;
    }
    // A failed ASSERT_* returns before the test's close(): close then.
    ~side() { close(); }
    side() = default;
    side(const side&) = delete;
    side& operator=(const side&) = delete;
    int port_state() const {
        struct fi_evd_port_state st = {};
        if (!ops || ops->port_state(dom, &st)) return -1;
        return st.state;
    }
};

// One EQ record.
struct rec {
    ssize_t rc = 0;  // > 0: event; -FI_EAVAIL: error; other < 0: nothing
    uint32_t event = 0;
    struct fi_eq_entry ent = {};
    struct fi_eq_err_entry err = {};
    struct fi_evd_async_err data = {};
    bool has_data = false;
    std::string sentence;
    uint64_t readable_ns = 0;  // CLOCK_MONOTONIC when fi_eq_sread returned
};

rec next_rec(struct fid_eq* eq, int timeout_ms) {
    rec r;
    alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 512];
    r.rc = fi_eq_sread(eq, &r.event, buf, sizeof(buf), timeout_ms, 0);
    r.readable_ns = mono_ns();
    if (r.rc == -FI_EAVAIL) {
        uint8_t ebuf[512];
        r.err.err_data = ebuf;
        r.err.err_data_size = sizeof(ebuf);
        EXPECT_EQ(fi_eq_readerr(eq, &r.err, 0), static_cast<ssize_t>(sizeof(r.err)));
        if (r.err.err_data_size == sizeof(r.data)) {
            std::memcpy(&r.data, r.err.err_data, sizeof(r.data));
            r.has_data = true;
        }
        char sbuf[256];
        const char* s = fi_eq_strerror(eq, r.err.prov_errno, r.err.err_data, sbuf, sizeof sbuf);
        r.sentence = s ? s : "";
        r.err.err_data = nullptr;
    } else if (r.rc >= static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry))) {
        // An fi_eq_entry, or an fi_eq_cm_entry (16 bytes without data).
        std::memcpy(&r.ent, buf, std::min(sizeof(r.ent), static_cast<size_t>(r.rc)));
    }
    return r;
}

std::string describe(const rec& r) {
    if (r.rc == -FI_EAVAIL)
        return "error " + std::to_string(r.err.err) + " prov_errno " +
               std::to_string(r.err.prov_errno) + " \"" + r.sentence + "\"";
    if (r.rc < 0) return "nothing: " + std::string(fi_strerror(static_cast<int>(-r.rc)));
    if (r.event == FI_NOTIFY)
        return "FI_NOTIFY ibv event " + std::to_string(FI_EVD_NOTIFY_EVENT(r.ent.data));
    return "event " + std::to_string(r.event);
}

// Stamps the arrival of every async event of `dev` on a raw verbs context:
// the kernel's own delivery, for the latency comparison.
struct raw_watch {
    struct ibv_context* ctx = nullptr;
    std::thread th;
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<std::pair<int, uint64_t>> seen;  // (event type, CLOCK_MONOTONIC ns)

    bool start(const char* dev) {
        int n = 0;
        struct ibv_device** l = ibv_get_device_list(&n);
        for (int i = 0; l && i < n; ++i)
            if (!std::strcmp(ibv_get_device_name(l[i]), dev)) ctx = ibv_open_device(l[i]);
        if (l) ibv_free_device_list(l);
        if (!ctx) return false;
        th = std::thread([this] {
            while (!stop.load()) {
                struct pollfd p = {ctx->async_fd, POLLIN, 0};
                if (poll(&p, 1, 20) <= 0) continue;
                struct ibv_async_event ev;
                if (ibv_get_async_event(ctx, &ev)) continue;
                uint64_t t = mono_ns();
                {
                    std::lock_guard<std::mutex> lk(mu);
                    seen.emplace_back(ev.event_type, t);
                }
                ibv_ack_async_event(&ev);
            }
        });
        return true;
    }
    uint64_t first(int type, uint64_t after) {
        std::lock_guard<std::mutex> lk(mu);
        for (auto& s : seen)
            if (s.first == type && s.second >= after) return s.second;
        return 0;
    }
    ~raw_watch() {
        stop = true;
        if (th.joinable()) th.join();
        if (ctx) ibv_close_device(ctx);
    }
};

struct AsyncRxe : ::testing::Test {
    void SetUp() override { REQUIRE_VM(); }
    void TearDown() override {
        if (!in_vm()) return;
        link_set("up");  // never leave the link down for later tests
        std::string cmd = std::string("ip addr del ") + env_or("EVD_ASYNC_EXTRA_ADDR", "192.0.2.11") +
                          "/32 dev " + netdev0() + " 2>/dev/null";
        (void)std::system(cmd.c_str());
    }
    // Waits until rxe0's port is ACTIVE again (after a flap).
    static void wait_port_active() {
        for (int i = 0; i < 200; ++i) {
            std::string path = std::string("/sys/class/infiniband/") + dev0() + "/ports/1/state";
            FILE* f = std::fopen(path.c_str(), "r");
            char buf[64] = "";
            if (f) {
                if (!std::fgets(buf, sizeof buf, f)) buf[0] = '\0';
                std::fclose(f);
            }
            if (std::strstr(buf, "ACTIVE")) return;
            usleep(50000);
        }
    }
};

// Link down/up under rxe0: PORT_ERR then PORT_ACTIVE on the domain EQ, read
// by a thread blocked in fi_eq_sread that the hardware event wakes; a domain
// that did not opt in sees only the error. Measures evd's latency beyond the
// kernel's delivery to a raw verbs context of the same device.
TEST_F(AsyncRxe, LinkDownUpIsPortErrThenPortActive) {
    const std::string port = next_port();
    side a, quiet;
    ASSERT_TRUE(a.open(get_info(true, port), FI_EVD_NOTIFY_ASYNC));
    ASSERT_TRUE(quiet.open(get_info(true, port), 0));
    ASSERT_STREQ(a.info->domain_attr->name, dev0());
    EXPECT_EQ(a.port_state(), IBV_PORT_ACTIVE);
    raw_watch raw;
    ASSERT_TRUE(raw.start(dev0()));
    struct fi_evd_async_counters c0 = {};
    ASSERT_EQ(a.ops->counters(a.dom, &c0), 0);

    std::vector<double> overhead_ms, kernel_ms, wake_ms, post_ms;
    constexpr int kFlaps = 5;
    for (int flap = 0; flap < kFlaps; ++flap) {
        SCOPED_TRACE("flap " + std::to_string(flap));
        // Down, from another thread while this one blocks in fi_eq_sread.
        uint64_t t0 = 0;
        std::thread down([&] {
            usleep(200000);
            t0 = mono_ns();
            EXPECT_EQ(link_set("down"), 0);
        });
        rec r = next_rec(a.eq, kWait);
        down.join();
        ASSERT_EQ(r.rc, -FI_EAVAIL) << describe(r);
        EXPECT_EQ(r.err.fid, &a.dom->fid);
        EXPECT_EQ(r.err.context, &a);
        EXPECT_EQ(r.err.err, FI_ENETDOWN);
        EXPECT_EQ(r.err.prov_errno, IBV_EVENT_PORT_ERR);
        ASSERT_TRUE(r.has_data);
        EXPECT_EQ(r.data.magic, FI_EVD_ASYNC_MAGIC);
        EXPECT_EQ(r.data.object, static_cast<uint32_t>(FI_EVD_ASYNC_PORT));
        EXPECT_STREQ(r.data.device, dev0());
        EXPECT_EQ(r.data.port_num, 1u);
        EXPECT_EQ(r.data.fid, &a.dom->fid);
        EXPECT_GE(r.data.timestamp_ns, t0);
        EXPECT_LE(r.data.timestamp_ns, r.readable_ns);
        EXPECT_EQ(r.sentence, std::string("port 1 of ") + dev0() + " is down (IBV_EVENT_PORT_ERR)");
        EXPECT_EQ(a.port_state(), IBV_PORT_DOWN);

        // The domain without the opt-in gets the same error.
        rec q = next_rec(quiet.eq, kWait);
        ASSERT_EQ(q.rc, -FI_EAVAIL) << describe(q);
        EXPECT_EQ(q.err.fid, &quiet.dom->fid);
        EXPECT_EQ(q.err.prov_errno, IBV_EVENT_PORT_ERR);

        usleep(100000);  // the raw watcher polls every 20 ms at worst
        uint64_t tk = raw.first(IBV_EVENT_PORT_ERR, t0);
        EXPECT_NE(tk, 0u) << "the raw verbs context saw no PORT_ERR";
        if (tk) {
            kernel_ms.push_back((tk - t0) / 1e6);
            overhead_ms.push_back((static_cast<double>(r.readable_ns) - static_cast<double>(tk)) / 1e6);
            wake_ms.push_back((static_cast<double>(r.data.timestamp_ns) - static_cast<double>(tk)) / 1e6);
        }
        post_ms.push_back((r.readable_ns - r.data.timestamp_ns) / 1e6);

        // Up: PORT_ACTIVE as FI_NOTIFY (rxe raises it more than once).
        uint64_t t1 = mono_ns();
        ASSERT_EQ(link_set("up"), 0);
        rec u = next_rec(a.eq, kWait);
        ASSERT_EQ(u.rc, static_cast<ssize_t>(sizeof(struct fi_eq_entry))) << describe(u);
        EXPECT_EQ(u.event, static_cast<uint32_t>(FI_NOTIFY));
        EXPECT_EQ(u.ent.fid, &a.dom->fid);
        EXPECT_EQ(u.ent.context, &a);
        EXPECT_TRUE(FI_EVD_NOTIFY_IS_ASYNC(u.ent.data));
        EXPECT_EQ(FI_EVD_NOTIFY_EVENT(u.ent.data), IBV_EVENT_PORT_ACTIVE);
        EXPECT_EQ(FI_EVD_NOTIFY_PORT(u.ent.data), 1u);
        EXPECT_EQ(a.port_state(), IBV_PORT_ACTIVE);
        struct fi_evd_port_state st = {};
        ASSERT_EQ(a.ops->port_state(a.dom, &st), 0);
        EXPECT_EQ(st.last_event, IBV_EVENT_PORT_ACTIVE);
        EXPECT_GE(st.last_change_ns, t1);
        wait_port_active();
        usleep(300000);
        // Anything else now is another PORT_ACTIVE notification.
        for (;;) {
            rec more = next_rec(a.eq, 200);
            if (more.rc == -FI_EAGAIN) break;
            ASSERT_EQ(more.event, static_cast<uint32_t>(FI_NOTIFY)) << describe(more);
            EXPECT_EQ(FI_EVD_NOTIFY_EVENT(more.ent.data), IBV_EVENT_PORT_ACTIVE);
        }
        // Not opted in: nothing but the error.
        rec none = next_rec(quiet.eq, 200);
        EXPECT_EQ(none.rc, -FI_EAGAIN) << describe(none);
    }
    struct fi_evd_async_counters c = {};
    ASSERT_EQ(a.ops->counters(a.dom, &c), 0);
    EXPECT_GE(c.events - c0.events, 2u * kFlaps);
    EXPECT_GE(c.suppressed - c0.suppressed, 1u * kFlaps);  // the quiet domain's PORT_ACTIVE
    EXPECT_EQ(c.undeliverable, c0.undeliverable);

    ASSERT_FALSE(overhead_ms.empty());
    for (auto* v : {&overhead_ms, &kernel_ms, &wake_ms, &post_ms}) std::sort(v->begin(), v->end());
    auto med = [](const std::vector<double>& v) { return v[v.size() / 2]; };
    std::printf("# async latency (link down -> record readable) over %zu flaps, median / max:\n"
                "#   kernel delivery to a raw verbs context (from `ip link set down`): %.3f / %.3f ms\n"
                "#   evd beyond the kernel (blocked fi_eq_sread returns):          %.3f / %.3f ms\n"
                "#     of which wake-up and read of the async fd:                  %.3f / %.3f ms\n"
                "#     of which translate, post, return from fi_eq_sread:          %.3f / %.3f ms\n",
                overhead_ms.size(), med(kernel_ms), kernel_ms.back(), med(overhead_ms),
                overhead_ms.back(), med(wake_ms), wake_ms.back(), med(post_ms), post_ms.back());
    RecordProperty("evd_overhead_median_us", static_cast<int>(med(overhead_ms) * 1000));
    // The goal is < 1 ms beyond the kernel. In the TCG VM the two woken
    // threads (raw watcher, evd reader) share emulated CPUs with the host's
    // other VM steps, so the bound checked here is looser, and it is checked
    // on the best of the flaps: a flap's latency is evd's cost plus whatever
    // the host's load added to it (measured: a median of 8 ms beyond the
    // kernel beside the four-node bed and a package build, with its two
    // parts' medians at 0.7 and 0.1 ms), while a cost of evd's own (a poll
    // interval, a lost wake-up) is paid by every flap, the best one too.
    // The medians and maxima above are the measurement.
    EXPECT_LT(post_ms.front(), 1.0);
    EXPECT_LT(overhead_ms.front(), 5.0);
    quiet.close();
    a.close();
}

// An IPv4 address added to / removed from the netdev under rxe0 changes the
// RoCE GID table: rxe raises GID_CHANGE, an FI_NOTIFY for the domain when it
// opted in, nothing (counted as suppressed) when it did not.
TEST_F(AsyncRxe, AddressChangeIsGidChangeNotification) {
    if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP GIDs come from the MAC: an address is no GID";
    const std::string port = next_port();
    side a, quiet;
    ASSERT_TRUE(a.open(get_info(true, port), FI_EVD_NOTIFY_ASYNC));
    ASSERT_TRUE(quiet.open(get_info(true, port), 0));
    const std::string extra = std::string(env_or("EVD_ASYNC_EXTRA_ADDR", "192.0.2.11")) + "/32";
    for (const char* op : {"add", "del"}) {
        SCOPED_TRACE(op);
        std::string cmd = std::string("ip addr ") + op + " " + extra + " dev " + netdev0();
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
        rec r = next_rec(a.eq, kWait);
        ASSERT_EQ(r.rc, static_cast<ssize_t>(sizeof(struct fi_eq_entry))) << describe(r);
        EXPECT_EQ(r.event, static_cast<uint32_t>(FI_NOTIFY));
        EXPECT_EQ(r.ent.fid, &a.dom->fid);
        EXPECT_TRUE(FI_EVD_NOTIFY_IS_ASYNC(r.ent.data));
        EXPECT_EQ(FI_EVD_NOTIFY_EVENT(r.ent.data), IBV_EVENT_GID_CHANGE);
        EXPECT_EQ(FI_EVD_NOTIFY_PORT(r.ent.data), 1u);
        // One address change may touch more than one GID entry.
        for (;;) {
            rec more = next_rec(a.eq, 300);
            if (more.rc == -FI_EAGAIN) break;
            EXPECT_EQ(FI_EVD_NOTIFY_EVENT(more.ent.data), IBV_EVENT_GID_CHANGE) << describe(more);
        }
        rec none = next_rec(quiet.eq, 100);
        EXPECT_EQ(none.rc, -FI_EAGAIN) << describe(none);
    }
    struct fi_evd_port_state st = {};
    ASSERT_EQ(a.ops->port_state(a.dom, &st), 0);
    EXPECT_EQ(st.state, IBV_PORT_ACTIVE);  // a GID change is no port state change
    EXPECT_EQ(st.last_event, IBV_EVENT_GID_CHANGE);
    quiet.close();
    a.close();
}

// Connects a client on rxe1 to a listener on rxe0; returns {client ep, server ep}.
struct pair_conn {
    side srv, cli;
    struct fid_pep* pep = nullptr;
    struct fid_ep* cep = nullptr;
    struct fid_ep* sep = nullptr;
    struct fid_ep* srx = nullptr;

    // Connection events advance only when their EQ is read (or fi_trywait
    // runs its progress): while waiting on one side's EQ, progress the other.
    rec wait_on(side& s, side& other, int timeout_ms = kWait) {
        uint64_t end = mono_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
        for (;;) {
            rec r = next_rec(s.eq, 20);
            if (r.rc != -FI_EAGAIN || mono_ns() >= end) return r;
            struct fid* f = &other.eq->fid;
            (void)fi_trywait(other.fab, &f, 1);
        }
    }

    bool connect(size_t cli_txcq, bool server_srx) {
        std::string port = next_port();
        if (!srv.open(get_info(true, port, server_srx), 0)) return false;
        if (!cli.open(get_info(false, port), 0, cli_txcq)) return false;
        EXPECT_EQ(fi_passive_ep(srv.fab, srv.info, &pep, nullptr), 0);
        if (!pep) return false;
        EXPECT_EQ(fi_pep_bind(pep, &srv.eq->fid, 0), 0);
        EXPECT_EQ(fi_listen(pep), 0);
        EXPECT_EQ(fi_endpoint(cli.dom, cli.info, &cep, nullptr), 0);
        if (!cep) return false;
        EXPECT_EQ(cli.setup_ep(cep), 0);
        auto wait = [this](struct fid_eq* q) {
            side& other = q == srv.eq ? cli : srv;
            return rxetest::next_event(q, kWait, [&](struct fid_eq* except) {
                rxetest::pump_eqs(other.fab, {other.eq}, except);
            });
        };
        rxetest::handshake(wait, pep, srv.eq, cep, cli.eq, nullptr, {},
                           [&](struct fi_info* info) {
                               struct fid_ep* ep = nullptr;
                               if (server_srx) {
                                   struct fi_rx_attr ra = {};
                                   ra.size = 16;
                                   ra.iov_limit = 1;
                                   int ret = fi_srx_context(srv.dom, &ra, &srx, nullptr);
                                   EXPECT_EQ(ret, 0) << "fi_srx_context " << fi_strerror(-ret);
                               }
                               if (!server_srx || srx) {
                                   EXPECT_EQ(fi_endpoint(srv.dom, info, &ep, nullptr), 0);
                               }
                               fi_freeinfo(info);
                               if (ep) {
                                   EXPECT_EQ(srv.setup_ep(ep, srx), 0);
                               }
                               return std::pair{ep, srv.eq};
                           },
                           {}, &sep);
        return sep && !::testing::Test::HasFailure();
    }
    // Closes the endpoints before the sides they belong to; a second call
    // (the destructor after the test's own close) finds nothing left.
    void close() {
        for (struct fid_ep** e : {&cep, &sep, &srx})
            if (*e) {
                EXPECT_EQ(fi_close(&(*e)->fid), 0);
                *e = nullptr;
            }
        if (pep) {
            EXPECT_EQ(fi_close(&pep->fid), 0);
            pep = nullptr;
        }
        cli.close();
        srv.close();
    }
    // A failed ASSERT_* returns before the test's close(): close then.
    ~pair_conn() { close(); }
};

struct mr_buf {
    std::vector<char> buf = std::vector<char>(4096);
    struct fid_mr* mr = nullptr;
    bool reg(struct fid_domain* dom, uint64_t access) {
        int ret = fi_mr_reg(dom, buf.data(), buf.size(), access, 0, 0, 0, &mr, nullptr);
        EXPECT_EQ(ret, 0) << "fi_mr_reg " << fi_strerror(-ret);
        return ret == 0;
    }
    void* desc() { return fi_mr_desc(mr); }
    void close() {
        if (mr) {
            EXPECT_EQ(fi_close(&mr->fid), 0);
        }
        mr = nullptr;
    }
    ~mr_buf() { close(); }
};

// A CQ of depth 1 that is not read while completions arrive: rxe raises
// CQ_ERR (once per lost completion); each is an FI_EOVERRUN error for the CQ's
// fid on the domain's EQ.
TEST_F(AsyncRxe, CqOverrunIsCqErrOnTheCqFid) {
    pair_conn p;
    ASSERT_TRUE(p.connect(/*cli_txcq=*/1, false));
    mr_buf sb, rb;
    ASSERT_TRUE(sb.reg(p.cli.dom, FI_SEND));
    ASSERT_TRUE(rb.reg(p.srv.dom, FI_RECV));
    constexpr int kMsgs = 12;
    for (int i = 0; i < kMsgs; ++i)
        ASSERT_EQ(fi_recv(p.sep, rb.buf.data() + 64 * i, 64, rb.desc(), 0, nullptr), 0);
    int posted = 0;
    for (int i = 0; i < kMsgs; ++i) {
        ssize_t r = fi_send(p.cep, sb.buf.data(), 8, sb.desc(), 0, nullptr);
        if (r == -FI_EAGAIN) break;
        ASSERT_EQ(r, 0) << fi_strerror(static_cast<int>(-r));
        ++posted;
    }
    ASSERT_GE(posted, 3);
    rec r = next_rec(p.cli.eq, kWait);
    ASSERT_EQ(r.rc, -FI_EAVAIL) << describe(r);
    EXPECT_EQ(r.err.fid, &p.cli.txcq->fid);
    EXPECT_EQ(r.err.err, FI_EOVERRUN);
    EXPECT_EQ(r.err.prov_errno, IBV_EVENT_CQ_ERR);
    ASSERT_TRUE(r.has_data);
    EXPECT_EQ(r.data.object, static_cast<uint32_t>(FI_EVD_ASYNC_CQ));
    EXPECT_EQ(r.data.fid, &p.cli.txcq->fid);
    EXPECT_NE(r.sentence.find("(IBV_EVENT_CQ_ERR)"), std::string::npos) << r.sentence;
    // Further records of this test, if any, are also CQ_ERR of that CQ.
    for (;;) {
        rec more = next_rec(p.cli.eq, 300);
        if (more.rc != -FI_EAVAIL) break;
        EXPECT_EQ(more.err.prov_errno, IBV_EVENT_CQ_ERR);
        EXPECT_EQ(more.err.fid, &p.cli.txcq->fid);
    }
    // Nothing went to the server's EQ.
    rec s = next_rec(p.srv.eq, 200);
    EXPECT_NE(s.rc, -FI_EAVAIL) << describe(s);
    sb.close();
    rb.close();
    p.close();
}

// Posts 8 receives on the server's shared rx context, arms its limit at 4
// (srq_arm) and sends 6 messages: rxe raises SRQ_LIMIT_REACHED.
void raise_srq_limit(pair_conn& p, mr_buf& sb, mr_buf& rb) {
    for (int i = 0; i < 8; ++i)
        ASSERT_EQ(fi_recv(p.srx, rb.buf.data() + 64 * i, 64, rb.desc(), 0, nullptr), 0);
    ASSERT_EQ(p.srv.ops->srq_arm(p.srv.dom, p.srx, 4), 0);
    for (int i = 0; i < 6; ++i)
        ASSERT_EQ(fi_send(p.cep, sb.buf.data(), 8, sb.desc(), 0, nullptr), 0);
}

// srq_arm(limit 4) on a shared rx context with 8 receives posted; 6 messages
// arrive: one SRQ_LIMIT_REACHED FI_NOTIFY for the srx fid on the domain's EQ
// (no FI_EVD_NOTIFY_ASYNC needed: arming is the request).
TEST_F(AsyncRxe, SrqLimitReachedOnTheSrxFid) {
    pair_conn p;
    ASSERT_TRUE(p.connect(64, /*server_srx=*/true));
    mr_buf sb, rb;
    ASSERT_TRUE(sb.reg(p.cli.dom, FI_SEND));
    ASSERT_TRUE(rb.reg(p.srv.dom, FI_RECV));
    EXPECT_EQ(p.srv.ops->srq_arm(p.srv.dom, nullptr, 4), -FI_EINVAL);
    raise_srq_limit(p, sb, rb);
    rec r = next_rec(p.srv.eq, kWait);
    ASSERT_EQ(r.rc, static_cast<ssize_t>(sizeof(struct fi_eq_entry))) << describe(r);
    EXPECT_EQ(r.event, static_cast<uint32_t>(FI_NOTIFY));
    EXPECT_EQ(r.ent.fid, &p.srx->fid);
    EXPECT_TRUE(FI_EVD_NOTIFY_IS_ASYNC(r.ent.data));
    EXPECT_EQ(FI_EVD_NOTIFY_EVENT(r.ent.data), IBV_EVENT_SRQ_LIMIT_REACHED);
    // The limit disarmed: no second notification.
    rec again = next_rec(p.srv.eq, 500);
    EXPECT_EQ(again.rc, -FI_EAGAIN) << describe(again);
    sb.close();
    rb.close();
    p.close();
}

// An application's own async thread on librdmacm's context of rxe0 (the
// context rdma_cm ids carry, shared by every librdmacm user of the process)
// while evd has connected endpoints and a shared receive context there: the
// thread's fd stays as it set it (blocking), a link flap gives PORT_ERR to
// both the thread and evd's domain EQ, and the SRQ event of evd's shared rx
// context goes to evd only. Before evd opened a context of its own, it read
// and acknowledged every event of this fd and made it non-blocking.
TEST_F(AsyncRxe, LibrdmacmsContextIsLeftToItsOtherReaders) {
    int ndev = 0;
    struct ibv_context** cms = rdma_get_devices(&ndev);
    ASSERT_NE(cms, nullptr);
    struct ibv_context* cm = nullptr;
    for (int i = 0; i < ndev && cms[i]; ++i)
        if (!std::strcmp(ibv_get_device_name(cms[i]->device), dev0())) cm = cms[i];
    ASSERT_NE(cm, nullptr) << "librdmacm has no context of " << dev0();
    const int flags0 = fcntl(cm->async_fd, F_GETFL);
    ASSERT_GE(flags0, 0);
    ASSERT_EQ(flags0 & O_NONBLOCK, 0) << "librdmacm's async fd starts blocking";

    // The application's async thread: waits for the fd, then reads it the
    // way a blocking reader does.
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<int> seen;
    std::thread app([&] {
        while (!stop.load()) {
            struct pollfd pf = {cm->async_fd, POLLIN, 0};
            if (poll(&pf, 1, 20) <= 0) continue;
            struct ibv_async_event ev;
            if (ibv_get_async_event(cm, &ev)) continue;
            {
                std::lock_guard<std::mutex> lk(mu);
                seen.push_back(ev.event_type);
            }
            ibv_ack_async_event(&ev);
        }
    });
    auto app_saw = [&](int type) {
        std::lock_guard<std::mutex> lk(mu);
        return std::count(seen.begin(), seen.end(), type);
    };

    pair_conn p;
    ASSERT_TRUE(p.connect(64, /*server_srx=*/true));  // the server's side is rxe0
    ASSERT_STREQ(p.srv.info->domain_attr->name, dev0());
    mr_buf sb, rb;
    ASSERT_TRUE(sb.reg(p.cli.dom, FI_SEND));
    ASSERT_TRUE(rb.reg(p.srv.dom, FI_RECV));

    // An event of evd's own object: SRQ_LIMIT_REACHED, to evd only.
    raise_srq_limit(p, sb, rb);
    rec r = next_rec(p.srv.eq, kWait);
    ASSERT_EQ(r.rc, static_cast<ssize_t>(sizeof(struct fi_eq_entry))) << describe(r);
    EXPECT_EQ(r.event, static_cast<uint32_t>(FI_NOTIFY));
    EXPECT_EQ(r.ent.fid, &p.srx->fid);
    EXPECT_EQ(FI_EVD_NOTIFY_EVENT(r.ent.data), IBV_EVENT_SRQ_LIMIT_REACHED);

    // A port event: to both.
    ASSERT_EQ(link_set("down"), 0);
    bool evd_port_err = false;
    uint64_t end = mono_ns() + static_cast<uint64_t>(kWait) * 1000000ull;
    while (!evd_port_err && mono_ns() < end) {
        rec x = next_rec(p.srv.eq, 500);
        if (x.rc == -FI_EAVAIL && x.err.prov_errno == IBV_EVENT_PORT_ERR) evd_port_err = true;
    }
    for (int i = 0; i < 200 && !app_saw(IBV_EVENT_PORT_ERR); ++i) usleep(50000);
    EXPECT_TRUE(evd_port_err) << "evd's domain EQ got no PORT_ERR";
    EXPECT_GE(app_saw(IBV_EVENT_PORT_ERR), 1) << "the application's thread lost the PORT_ERR";
    ASSERT_EQ(rxetest::link_set_up(), 0);
    wait_port_active();
    for (int i = 0; i < 200 && !app_saw(IBV_EVENT_PORT_ACTIVE); ++i) usleep(50000);
    EXPECT_GE(app_saw(IBV_EVENT_PORT_ACTIVE), 1);  // rxe may raise it twice

    stop.store(true);
    app.join();
    EXPECT_EQ(fcntl(cm->async_fd, F_GETFL), flags0) << "someone changed librdmacm's async fd";
    EXPECT_EQ(app_saw(IBV_EVENT_SRQ_LIMIT_REACHED), 0) << "evd's SRQ event reached librdmacm's context";
    {
        std::lock_guard<std::mutex> lk(mu);
        for (int t : seen)
            EXPECT_TRUE(t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_PORT_ACTIVE ||
                        t == IBV_EVENT_GID_CHANGE)
                << "librdmacm's context got event " << t << " (" << ibv_event_type_str(
                       static_cast<enum ibv_event_type>(t)) << ")";
    }
    sb.close();
    rb.close();
    p.close();
    rdma_free_devices(cms);
}

// evd_eqwatch shows the records of a link flap.
TEST_F(AsyncRxe, EqwatchPrintsLinkFlap) {
    std::string tool = std::string(EVD_PROVIDER_DIR) + "/../evd_eqwatch";
    ASSERT_EQ(access(tool.c_str(), X_OK), 0) << tool;
    std::string out_path = "/tmp/evd_eqwatch." + std::to_string(getpid());
    std::string cmd = "FI_PROVIDER_PATH=" + std::string(EVD_PROVIDER_DIR) + " " + tool + " -d " +
                      dev0() + " -t 12 >" + out_path + " 2>&1 &";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    // Wait for its banner, then flap.
    std::string out;
    for (int i = 0; i < 200 && out.find("# watching") == std::string::npos; ++i) {
        usleep(50000);
        FILE* f = std::fopen(out_path.c_str(), "r");
        if (!f) continue;
        char buf[4096];
        size_t n = std::fread(buf, 1, sizeof buf, f);
        std::fclose(f);
        out.assign(buf, n);
    }
    ASSERT_NE(out.find("# watching " + std::string(dev0()) + " port 1 (ACTIVE)"), std::string::npos)
        << out;
    ASSERT_EQ(link_set("down"), 0);
    usleep(1500000);
    ASSERT_EQ(link_set("up"), 0);
    wait_port_active();
    // Wait for it to exit (-t 12).
    for (int i = 0; i < 400; ++i) {
        usleep(50000);
        FILE* f = std::fopen(out_path.c_str(), "r");
        if (!f) continue;
        std::string s;
        char buf[4096];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
        std::fclose(f);
        out = s;
        if (out.find(" records\n") != std::string::npos) break;
    }
    std::remove(out_path.c_str());
    std::printf("%s", out.c_str());
    const std::string d = dev0();
    EXPECT_NE(out.find(d + " IBV_EVENT_PORT_ERR error fid=[domain " + d + "] err=" +
                       std::to_string(FI_ENETDOWN)),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("prov_errno=" + std::to_string(IBV_EVENT_PORT_ERR)), std::string::npos);
    EXPECT_NE(out.find("\"port 1 of " + d + " is down (IBV_EVENT_PORT_ERR)\""), std::string::npos)
        << out;
    EXPECT_NE(out.find(d + " IBV_EVENT_PORT_ACTIVE notify fid=[domain " + d + "]"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("\"port 1 of " + d + " is active (IBV_EVENT_PORT_ACTIVE)\""),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(" records\n"), std::string::npos) << "evd_eqwatch did not exit: " << out;
}

}  // namespace

namespace {

// `rdma link delete rxe0` with a connected endpoint, a listener and an
// armed domain on rxe0. rxe raises no IBV_EVENT_DEVICE_FATAL (it cannot
// disassociate user contexts; docs/rxe-async-events.md): the end arrives as
// RDMA_CM_EVENT_DEVICE_REMOVAL, and each endpoint and the listener must get
// exactly one terminal record, none of them a duplicate from the async path.
// The device is added back afterwards for the tests that follow.
//
// Destructive (it deletes and re-creates rxe0), so it is opt-in with
// EVD_TEST_LINK_DELETE=1; test/integration/run-in-guest.sh runs it in a
// process of its own after the other suites. evd releases librdmacm's context
// once every object on the device is closed, so the delete completes while
// this process lives (RemovalRxe checks that part).
TEST_F(AsyncRxe, LinkDeleteEndsEveryEndpointExactlyOnce) {
    if (!std::getenv("EVD_TEST_LINK_DELETE"))
        GTEST_SKIP() << "destructive (see comment): set EVD_TEST_LINK_DELETE=1";
    pair_conn p;
    ASSERT_TRUE(p.connect(64, false));
    std::string log = "/tmp/evd_linkdel." + std::to_string(getpid());
    std::string cmd = std::string("(rdma link delete ") + dev0() + "; echo rc=$?) >" + log +
                      " 2>&1 &";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    // Server side (rxe0): one terminal record per ep and for the listener.
    int sep_terminal = 0, pep_terminal = 0, other = 0;
    uint64_t end = mono_ns() + 30ull * 1000000000ull;
    while (mono_ns() < end && (sep_terminal == 0 || pep_terminal == 0)) {
        rec r = p.wait_on(p.srv, p.cli, 1000);
        if (r.rc == -FI_EAGAIN) continue;
        fid_t f = r.rc == -FI_EAVAIL ? r.err.fid : r.ent.fid;
        bool terminal = r.rc == -FI_EAVAIL || r.event == FI_SHUTDOWN;
        std::printf("# rxe0 record: %s fid %s\n", describe(r).c_str(),
                    f == &p.sep->fid ? "ep" : f == &p.pep->fid ? "pep" : "other");
        if (terminal && f == &p.sep->fid) {
            ++sep_terminal;
        } else if (terminal && f == &p.pep->fid) {
            ++pep_terminal;
        } else if (r.rc == -FI_EAVAIL && r.err.prov_errno == IBV_EVENT_DEVICE_FATAL) {
            ++other;  // a domain-level DEVICE_FATAL would be fine too
        } else {
            ++other;
        }
    }
    EXPECT_EQ(sep_terminal, 1);
    EXPECT_EQ(pep_terminal, 1);
    // Nothing more for them afterwards.
    for (int i = 0; i < 3; ++i) {
        rec r = p.wait_on(p.srv, p.cli, 300);
        if (r.rc == -FI_EAGAIN) continue;
        fid_t f = r.rc == -FI_EAVAIL ? r.err.fid : r.ent.fid;
        EXPECT_NE(f, &p.sep->fid) << "second terminal record: " << describe(r);
        EXPECT_NE(f, &p.pep->fid) << "second terminal record: " << describe(r);
    }
    // The application closes what it had on rxe0; the delete then completes.
    p.close();
    const bool gone = rxetest::wait_device_gone(dev0(), 30);
    FILE* f = std::fopen(log.c_str(), "r");
    char buf[256] = "";
    if (f) {
        size_t n = std::fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        std::fclose(f);
    }
    std::remove(log.c_str());
    std::printf("# rdma link delete: %s (device %s)\n", buf, gone ? "removed" : "still present");
    EXPECT_TRUE(gone) << "rdma link delete did not complete after every evd object was closed";
    // Put rxe0 back for the following tests.
    if (gone) {
        EXPECT_TRUE(rxetest::readd_device(dev0(), netdev0(), 30)) << "could not re-create " << dev0();
    }
}

}  // namespace
