// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// link_bench: what an FI_EP_MSG application learns, and when, when the link
// under one end of a connection fails. A server endpoint on rxe0 and a client
// on rxe1 (the project VM), connected; veth0 (the link under rxe0) goes down
// for DOWN seconds. "idle": no traffic; "busy": a ping-pong runs throughout
// (the client sends, the server echoes). Prints one line per run: for each
// side, the first failure the application saw (EQ error record, FI_SHUTDOWN,
// error completion) and when, and whether the same connection carried a
// checked round trip again after the link came back, and when.
//
//   link_bench -p evd|verbs -m idle|busy [-d DOWN_S] [-t WATCH_S]
//
// FI_EVD_FAIL_FAST=1 turns evd's fail-fast on. Run inside the VM, as root:
//   test/vm/run-in-vm -- build/link_bench -p evd -m busy
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "../common/tool_util.h"
#include "../common/vm_link.h"

namespace {

using clk = std::chrono::steady_clock;

using rxetest::env_or;
using rxetest::secs;


constexpr size_t kLen = 64;

struct side {
    const char* name;
    struct fid_domain* dom = nullptr;
    struct fid_eq* eq = nullptr;
    struct fid_cq* cq = nullptr;
    struct fid_ep* ep = nullptr;
    struct fid_mr* mr = nullptr;
    uint8_t buf[2][kLen];  // [0] receive, [1] send
    struct fi_context rctx, sctx;
    bool failed = false;
    clk::time_point fail_at{};
    std::string what = "nothing";
};

struct fi_info* hints(const char* prov) { return evdtool::msg_hints(prov, 64); }

void open_side(side& s, struct fid_fabric* fab, struct fi_info* info) {
    FI_CHECK(fi_domain(fab, info, &s.dom, nullptr));
    struct fi_eq_attr ea = {};
    ea.wait_obj = FI_WAIT_UNSPEC;
    FI_CHECK(fi_eq_open(fab, &ea, &s.eq, nullptr));
    struct fi_cq_attr ca = {};
    ca.format = FI_CQ_FORMAT_MSG;
    ca.size = 128;
    FI_CHECK(fi_cq_open(s.dom, &ca, &s.cq, nullptr));
    FI_CHECK(fi_endpoint(s.dom, info, &s.ep, nullptr));
    FI_CHECK(fi_ep_bind(s.ep, &s.eq->fid, 0));
    FI_CHECK(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV));
    FI_CHECK(fi_enable(s.ep));
    FI_CHECK(fi_mr_reg(s.dom, s.buf, sizeof s.buf, FI_SEND | FI_RECV, 0, 0, 0, &s.mr, nullptr));
    FI_CHECK(fi_recv(s.ep, s.buf[0], kLen, fi_mr_desc(s.mr), 0, &s.rctx));
}

// Waits for one event on eq (progressing `other` meanwhile).
uint32_t wait_event(struct fid_eq* eq, struct fid_eq* other, struct fi_eq_cm_entry* ent) {
    uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    uint32_t ev = 0;
    for (int i = 0; i < 4000; ++i) {
        if (other) {
            uint8_t junk[sizeof buf];
            uint32_t e2;
            ssize_t r2 = fi_eq_read(other, &e2, junk, sizeof junk, FI_PEEK);
            (void)r2;
        }
        ssize_t r = fi_eq_read(eq, &ev, buf, sizeof buf, 0);
        if (r >= 0) {
            if (ent) std::memcpy(ent, buf, sizeof *ent);
            return ev;
        }
        if (r == -FI_EAVAIL) {
            struct fi_eq_err_entry err = {};
            fi_eq_readerr(eq, &err, 0);
            evdtool::die("connection setup error", -err.err);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    evdtool::die("connection setup timed out", -FI_ETIMEDOUT);
}

void note_failure(side& s, const std::string& what) {
    if (s.failed) return;
    s.failed = true;
    s.fail_at = clk::now();
    s.what = what;
}

// Polls s's EQ and CQ. Returns 1 when the posted receive completed.
int poll_side(side& s, bool& send_done) {
    uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    uint32_t ev = 0;
    ssize_t r = fi_eq_read(s.eq, &ev, buf, sizeof buf, 0);
    if (r == -FI_EAVAIL) {
        struct fi_eq_err_entry err = {};
        fi_eq_readerr(s.eq, &err, 0);
        char why[200], text[160];
        const char* str = fi_eq_strerror(s.eq, err.prov_errno, err.err_data, text, sizeof text);
        std::snprintf(why, sizeof why, "EQ error %s (prov_errno %d: %s)", fi_strerror(err.err),
                      err.prov_errno, str ? str : "");
        note_failure(s, why);
    } else if (r >= 0 && ev == FI_SHUTDOWN) {
        note_failure(s, "FI_SHUTDOWN");
    }
    struct fi_cq_msg_entry e;
    int got = 0;
    ssize_t n = fi_cq_read(s.cq, &e, 1);
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {};
        fi_cq_readerr(s.cq, &err, 0);
        char why[120];
        std::snprintf(why, sizeof why, "CQ error %s (prov_errno %d)", fi_strerror(err.err), err.prov_errno);
        note_failure(s, why);
    } else if (n == 1) {
        if (e.op_context == &s.rctx) got = 1;
        if (e.op_context == &s.sctx) send_done = true;
    }
    return got;
}

}  // namespace

int main(int argc, char** argv) {
    evdtool::prog = "link_bench";
    const char* prov = "evd";
    std::string mode = "busy";
    double down_s = 4, watch_s = 25;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "-p") prov = argv[i + 1];
        else if (a == "-m") mode = argv[i + 1];
        else if (a == "-d") down_s = std::atof(argv[i + 1]);
        else if (a == "-t") watch_s = std::atof(argv[i + 1]);
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const bool busy = mode == "busy";
    struct fi_info* h = hints(prov);
    struct fi_info* srv = nullptr;
    FI_CHECK(fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"), "0", FI_SOURCE, h, &srv));
    struct fid_fabric* fab = nullptr;
    FI_CHECK(fi_fabric(srv->fabric_attr, &fab, nullptr));
    struct fid_eq* peq = nullptr;
    struct fi_eq_attr ea = {};
    ea.wait_obj = FI_WAIT_UNSPEC;
    FI_CHECK(fi_eq_open(fab, &ea, &peq, nullptr));
    struct fid_pep* pep = nullptr;
    FI_CHECK(fi_passive_ep(fab, srv, &pep, nullptr));
    FI_CHECK(fi_pep_bind(pep, &peq->fid, 0));
    FI_CHECK(fi_listen(pep));
    struct sockaddr_in sin = {};
    size_t len = sizeof sin;
    FI_CHECK(fi_getname(&pep->fid, &sin, &len));
    auto* src = static_cast<struct sockaddr_in*>(calloc(1, sizeof(struct sockaddr_in)));
    src->sin_family = AF_INET;
    inet_pton(AF_INET, env_or("EVD_VM_ADDR1", "192.0.2.2"), &src->sin_addr);
    h->src_addr = src;
    h->src_addrlen = sizeof *src;
    struct fi_info* cli = nullptr;
    FI_CHECK(fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"),
                     std::to_string(ntohs(sin.sin_port)).c_str(), 0, h, &cli));
    side S, C;
    S.name = "server(rxe0)";
    C.name = "client(rxe1)";
    open_side(C, fab, cli);
    FI_CHECK(fi_connect(C.ep, cli->dest_addr, nullptr, 0));
    struct fi_eq_cm_entry ent = {};
    if (wait_event(peq, C.eq, &ent) != FI_CONNREQ) evdtool::die("no FI_CONNREQ", -FI_EOTHER);
    open_side(S, fab, ent.info);
    FI_CHECK(fi_accept(S.ep, nullptr, 0));
    if (wait_event(S.eq, C.eq, nullptr) != FI_CONNECTED) evdtool::die("server not connected", -FI_EOTHER);
    if (wait_event(C.eq, nullptr, nullptr) != FI_CONNECTED) evdtool::die("client not connected", -FI_EOTHER);

    clk::time_point t_down{}, t_up{};
    std::atomic<int> phase{0};
    std::thread flapper = rxetest::start_flap(2, down_s, phase, t_down, t_up);
    // busy: the client pings whenever the last ping was answered; the server
    // echoes. idle: nothing until the link is back, then one round trip.
    bool c_send_out = false, s_send_out = false, c_waiting = false;
    uint64_t rts_before = 0, rts_after = 0;
    double back_at = -1;
    auto start = clk::now();
    while (secs(start, clk::now()) < 2 + watch_s) {
        bool idle_probe = !busy && phase.load() == 2 && rts_after == 0;
        if ((busy || idle_probe) && !c_waiting && !c_send_out && !C.failed) {
            if (fi_send(C.ep, C.buf[1], kLen, fi_mr_desc(C.mr), 0, &C.sctx) == 0) {
                c_waiting = c_send_out = true;
            }
        }
        bool done = false;
        if (poll_side(S, done)) {  // the server got a ping: echo it
            (void)fi_recv(S.ep, S.buf[0], kLen, fi_mr_desc(S.mr), 0, &S.rctx);
            if (!s_send_out && fi_send(S.ep, S.buf[1], kLen, fi_mr_desc(S.mr), 0, &S.sctx) == 0)
                s_send_out = true;
        }
        if (done) s_send_out = false;
        done = false;
        if (poll_side(C, done)) {
            (void)fi_recv(C.ep, C.buf[0], kLen, fi_mr_desc(C.mr), 0, &C.rctx);
            c_waiting = false;
            if (phase.load() == 0) rts_before++;
            if (phase.load() == 2) {
                if (!rts_after) back_at = secs(t_up, clk::now());
                rts_after++;
            }
        }
        if (done) c_send_out = false;
        if (phase.load() == 2 && rts_after > 20) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    flapper.join();
    auto report = [&](side& s) {
        char when[32] = "-";
        if (s.failed) std::snprintf(when, sizeof when, "%.2f s", secs(t_down, s.fail_at));
        std::printf("%s: %s", s.name, s.failed ? s.what.c_str() : "no failure reported");
        if (s.failed) std::printf(" %s after link down", when);
        std::printf("; ");
    };
    std::printf("# link_bench %s %s%s, %.0f s down: ", prov, mode.c_str(),
                std::getenv("FI_EVD_FAIL_FAST") ? " FI_EVD_FAIL_FAST=1" : "", down_s);
    report(S);
    report(C);
    if (back_at >= 0)
        std::printf("round trips on the same connection again %.2f s after link up (%llu before)\n",
                    back_at, (unsigned long long)rts_before);
    else
        std::printf("no round trip on the same connection after link up (%llu before)\n",
                    (unsigned long long)rts_before);
    return 0;  // a measurement; the process exits without tidying up
}
