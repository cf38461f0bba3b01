// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The lifecycle the fault-injection runner (test/fault/run.sh) replays with
// one failing rdma-core or system call at a time: evd MSG endpoints on rxe
// through the public libfabric API only, in one thread. fi_getinfo, fabric,
// EQs, a passive endpoint listening on rxe0, a client on rxe1 with its own
// fabric, domain, CQs and endpoints, a connect the listener rejects, a
// connect it accepts on a domain, CQs, shared receive context and endpoint of
// its own, a checked send/recv, an RDMA write read back with an RDMA read,
// fi_shutdown, then every object closed.
//
// EQs and CQs are waited on with fi_eq_sread / fi_cq_sread.
// Every libfabric call must return 0 (or its count) or a negative FI_E*
// code; an EQ may carry an error entry instead of an event. The first
// failure stops the scenario, which then closes everything it opened in
// reverse order: each fi_close must return 0. Every wait is bounded
// (EVD_FAULT_WAIT_MS, default 15000): a wait that runs out is a stuck EQ or
// CQ. Prints "saw: ..." (what the application saw) and exits 0 when the
// whole lifecycle ran, 2 when it stopped at a reported error and closed
// cleanly, 1 when a check failed (a close failed, a return code was not an
// FI_E* code, a wait ran out, data was wrong).
//
// Environment: EVD_VM_ADDR0 / EVD_VM_ADDR1 (rxe0's and rxe1's addresses);
// FI_EVD_RESUME_TIMEOUT: the connection is made resumable (the server's
// endpoint on its listener's EQ) and rides through an outage under a send
// before fi_shutdown (both QPs failed by the interposer: break_qp.cpp).
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/rxe_hints.h"
#include "../common/vm_link.h"

namespace {

using clk = std::chrono::steady_clock;

using rxetest::env_or;

int wait_ms() { return std::atoi(env_or("EVD_FAULT_WAIT_MS", "15000")); }

struct run {
    std::vector<struct fid*> opened;      // closed in reverse order
    std::vector<struct fi_info*> infos;   // freed at the end
    std::string saw;                      // the first failure the application saw
    bool bad = false;                     // a check failed

    void fail(const std::string& what) {
        if (!bad) std::printf("FAIL: %s\n", what.c_str());
        bad = true;
        if (saw.empty()) saw = "check failed: " + what;
    }
    // rc of a libfabric call that returns 0 or -FI_E*: true when it succeeded.
    bool ok(const char* call, long rc) {
        if (rc == 0) return true;
        if (rc < 0 && rc > -4096) {
            saw = std::string(call) + " returned -" + fi_strerror(static_cast<int>(-rc)) + " (" +
                  std::to_string(rc) + ")";
        } else {
            fail(std::string(call) + " returned " + std::to_string(rc) +
                 ", not 0 or a negative FI_E* code");
        }
        return false;
    }
    template <class T>
    void keep(T* obj) { opened.push_back(&obj->fid); }

    int finish() {
        for (auto it = opened.rbegin(); it != opened.rend(); ++it) {
            int rc = fi_close(*it);
            if (rc) fail("fi_close of fid class " + std::to_string((*it)->fclass) + " returned " +
                         std::to_string(rc) + " (" + fi_strerror(-rc) + ")");
        }
        for (struct fi_info* i : infos) fi_freeinfo(i);
        std::printf("saw: %s\n", saw.empty() ? "completed" : saw.c_str());
        return bad ? 1 : saw.empty() ? 0 : 2;
    }
};

struct eq_event {
    uint32_t event = 0;
    struct fid_eq* eq = nullptr;
    struct fi_eq_cm_entry ent {};
};

// Waits for `want` on `eq` (or, with want_err, for an error entry of that
// err there), reading every EQ of `all` meanwhile (connection events advance
// when their EQ is read): the awaited EQ with fi_eq_sread (5 ms at a time),
// the others with fi_eq_read. An error entry or another event on any of them
// ends the wait: false, with r.saw saying what it was.
bool wait_event(run& r, std::initializer_list<struct fid_eq*> all, struct fid_eq* eq,
                uint32_t want, const char* what, eq_event* out, int want_err = 0) {
    const auto end = clk::now() + std::chrono::milliseconds(wait_ms());
    alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    for (;;) {
        for (struct fid_eq* q : all) {
            if (!q) continue;
            uint32_t ev = 0;
            ssize_t n = q == eq ? fi_eq_sread(q, &ev, buf, sizeof buf, 5, 0)
                                : fi_eq_read(q, &ev, buf, sizeof buf, 0);
            if (n == -FI_EAGAIN || (q == eq && n == -FI_ETIMEDOUT)) continue;
            if (n == -FI_EAVAIL) {
                uint8_t ebuf[256];
                struct fi_eq_err_entry e {};
                e.err_data = ebuf;
                e.err_data_size = sizeof ebuf;
                ssize_t m = fi_eq_readerr(q, &e, 0);
                if (m != static_cast<ssize_t>(sizeof e)) {
                    r.fail(std::string("fi_eq_readerr after -FI_EAVAIL returned ") +
                           std::to_string(m));
                    return false;
                }
                if (e.err <= 0 || e.err >= 4096) {
                    r.fail("EQ error entry with err " + std::to_string(e.err));
                    return false;
                }
                if (q == eq && want_err && e.err == want_err) return true;
                r.saw = std::string("while waiting for ") + what + ": EQ error entry " +
                        fi_strerror(e.err) + " (" + std::to_string(e.err) + ") prov_errno " +
                        std::to_string(e.prov_errno);
                return false;
            }
            if (n < 0) {
                r.ok("fi_eq_read", n);
                return false;
            }
            if (q == eq && ev == want && n >= static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry))) {
                out->event = ev;
                out->eq = q;
                std::memcpy(&out->ent, buf, sizeof out->ent);
                return true;
            }
            if (ev == FI_CONNREQ && n >= static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry))) {
                struct fi_eq_cm_entry ce;
                std::memcpy(&ce, buf, sizeof ce);
                r.infos.push_back(ce.info);
            }
            r.saw = std::string("while waiting for ") + what + ": event " +
                    fi_tostr(&ev, FI_TYPE_EQ_EVENT);
            return false;
        }
        if (clk::now() > end) {
            r.fail(std::string("no ") + what + " within " + std::to_string(wait_ms()) +
                   " ms (stuck EQ)");
            return false;
        }
    }
}

// One completion from cq with context ctx: true when it came.
bool wait_cq(run& r, struct fid_cq* cq, void* ctx, const char* what) {
    const auto end = clk::now() + std::chrono::milliseconds(wait_ms());
    for (;;) {
        struct fi_cq_data_entry e {};
        ssize_t n = fi_cq_sread(cq, &e, 1, nullptr, 5);
        if (n == -FI_ETIMEDOUT) n = -FI_EAGAIN;
        if (n == 1) {
            if (e.op_context != ctx) {
                r.fail(std::string(what) + ": completion of another context");
                return false;
            }
            return true;
        }
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee {};
            ssize_t m = fi_cq_readerr(cq, &ee, 0);
            if (m != 1) {
                r.fail(std::string("fi_cq_readerr after -FI_EAVAIL returned ") + std::to_string(m));
                return false;
            }
            r.saw = std::string(what) + ": CQ error entry " + fi_strerror(ee.err) + " (" +
                    std::to_string(ee.err) + ")";
            return false;
        }
        if (n != -FI_EAGAIN) {
            r.ok("fi_cq_read", n);
            return false;
        }
        if (clk::now() > end) {
            r.fail(std::string("no completion for ") + what + " (stuck CQ)");
            return false;
        }
    }
}

// Two completions, one on each of two CQs (their contexts c0, c1), while
// every EQ of `all` is read: the rdma_cm events of a resume advance only when
// an EQ is read, and a resumed connection puts nothing on an EQ, so any
// event or error entry there ends the wait (false, r.saw says what).
bool wait_both(run& r, std::initializer_list<struct fid_eq*> all, struct fid_cq* q0, void* c0,
               struct fid_cq* q1, void* c1, const char* what) {
    const auto end = clk::now() + std::chrono::milliseconds(wait_ms());
    struct fid_cq* qs[2] = {q0, q1};
    void* want[2] = {c0, c1};
    bool got[2] = {false, false};
    alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
    while (!got[0] || !got[1]) {
        for (int i = 0; i < 2; ++i) {
            if (got[i]) continue;
            struct fi_cq_data_entry e {};
            ssize_t n = fi_cq_sread(qs[i], &e, 1, nullptr, 2);
            if (n == 1) {
                if (e.op_context != want[i]) {
                    r.fail(std::string(what) + ": completion of another context");
                    return false;
                }
                got[i] = true;
            } else if (n == -FI_EAVAIL) {
                struct fi_cq_err_entry ee {};
                if (fi_cq_readerr(qs[i], &ee, 0) != 1) {
                    r.fail("fi_cq_readerr after -FI_EAVAIL did not return 1");
                    return false;
                }
                r.saw = std::string(what) + ": CQ error entry " + fi_strerror(ee.err) + " (" +
                        std::to_string(ee.err) + ")";
                return false;
            } else if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT) {
                r.ok("fi_cq_sread", n);
                return false;
            }
        }
        for (struct fid_eq* q : all) {
            uint32_t ev = 0;
            ssize_t n = fi_eq_read(q, &ev, buf, sizeof buf, 0);
            if (n == -FI_EAGAIN) continue;
            if (n == -FI_EAVAIL) {
                uint8_t ebuf[256];
                struct fi_eq_err_entry e {};
                e.err_data = ebuf;
                e.err_data_size = sizeof ebuf;
                if (fi_eq_readerr(q, &e, 0) != static_cast<ssize_t>(sizeof e) || e.err <= 0 ||
                    e.err >= 4096) {
                    r.fail("fi_eq_readerr after -FI_EAVAIL: no error entry with an FI_E* code");
                    return false;
                }
                r.saw = std::string(what) + ": EQ error entry " + fi_strerror(e.err) + " (" +
                        std::to_string(e.err) + ")";
                return false;
            }
            if (n < 0) {
                r.ok("fi_eq_read", n);
                return false;
            }
            if (ev == FI_CONNREQ && n >= static_cast<ssize_t>(sizeof(struct fi_eq_cm_entry))) {
                struct fi_eq_cm_entry ce;
                std::memcpy(&ce, buf, sizeof ce);
                r.infos.push_back(ce.info);
            }
            r.saw = std::string(what) + ": event " + fi_tostr(&ev, FI_TYPE_EQ_EVENT);
            return false;
        }
        if (clk::now() > end) {
            r.fail(std::string("no completions for ") + what + " within " +
                   std::to_string(wait_ms()) + " ms (stuck CQ or resume)");
            return false;
        }
    }
    return true;
}

constexpr size_t kLen = 4096;

uint8_t pattern(size_t i, unsigned seed) { return static_cast<uint8_t>(i * 131u + seed * 7u); }

int scenario() {
    run r;
    const char* addr0 = env_or("EVD_VM_ADDR0", "192.0.2.1");
    const char* addr1 = env_or("EVD_VM_ADDR1", "192.0.2.2");
    struct fi_info* h = rxetest::rma_hints(16);
    struct fi_info *sinfo = nullptr, *cinfo = nullptr;
    struct fid_fabric *sfab = nullptr, *cfab = nullptr;
    struct fid_eq *peq = nullptr, *ceq = nullptr, *seq = nullptr;
    struct fid_pep* pep = nullptr;
    struct fid_domain *cdom = nullptr, *sdom = nullptr;
    struct fid_cq *ctx = nullptr, *crx = nullptr, *stx = nullptr, *srx_cq = nullptr;
    struct fid_ep *cep = nullptr, *sep = nullptr, *srx = nullptr, *rej = nullptr;
    struct fid_mr *cmr = nullptr, *smr = nullptr;
    std::vector<uint8_t> cbuf(2 * kLen), sbuf(2 * kLen);
    struct fi_eq_attr eqa {};
    eqa.wait_obj = FI_WAIT_UNSPEC;
    struct fi_cq_attr cqa {};
    cqa.format = FI_CQ_FORMAT_DATA;
    cqa.wait_obj = FI_WAIT_FD;
    cqa.size = 64;
    eq_event ev;
    std::string port;
    struct sockaddr_in sin {};
    size_t slen = sizeof sin;
    int rctx = 0, sctx = 0, wctx = 0, rdctx = 0, orctx = 0, osctx = 0;
    const char* rt = std::getenv("FI_EVD_RESUME_TIMEOUT");
    const bool resumable = rt && *rt && std::strcmp(rt, "0") != 0;

    auto done = [&] {
        fi_freeinfo(h);
        return r.finish();
    };
#define CALL(expr)                              \
    do {                                        \
        if (!r.ok(#expr, (expr))) return done(); \
    } while (0)

    // ---- the listener on rxe0
    CALL(fi_getinfo(FI_VERSION(1, 17), addr0, "0", FI_SOURCE, h, &sinfo));
    r.infos.push_back(sinfo);
    CALL(fi_fabric(sinfo->fabric_attr, &sfab, nullptr));
    r.keep(sfab);
    CALL(fi_eq_open(sfab, &eqa, &peq, nullptr));
    r.keep(peq);
    CALL(fi_passive_ep(sfab, sinfo, &pep, nullptr));
    r.keep(pep);
    CALL(fi_pep_bind(pep, &peq->fid, 0));
    CALL(fi_listen(pep));
    CALL(fi_getname(&pep->fid, &sin, &slen));
    port = std::to_string(ntohs(sin.sin_port));

    // ---- the client on rxe1
    {
        auto* src = static_cast<struct sockaddr_in*>(calloc(1, sizeof(struct sockaddr_in)));
        src->sin_family = AF_INET;
        inet_pton(AF_INET, addr1, &src->sin_addr);
        h->src_addr = src;
        h->src_addrlen = sizeof *src;
    }
    CALL(fi_getinfo(FI_VERSION(1, 17), addr0, port.c_str(), 0, h, &cinfo));
    r.infos.push_back(cinfo);
    CALL(fi_fabric(cinfo->fabric_attr, &cfab, nullptr));
    r.keep(cfab);
    CALL(fi_eq_open(cfab, &eqa, &ceq, nullptr));
    r.keep(ceq);
    CALL(fi_domain(cfab, cinfo, &cdom, nullptr));
    r.keep(cdom);
    CALL(fi_cq_open(cdom, &cqa, &ctx, nullptr));
    r.keep(ctx);
    CALL(fi_cq_open(cdom, &cqa, &crx, nullptr));
    r.keep(crx);
    // a first attempt the listener rejects: its endpoint sees FI_ECONNREFUSED
    CALL(fi_endpoint(cdom, cinfo, &rej, nullptr));
    r.keep(rej);
    CALL(fi_ep_bind(rej, &ceq->fid, 0));
    CALL(fi_ep_bind(rej, &ctx->fid, FI_TRANSMIT));
    CALL(fi_ep_bind(rej, &crx->fid, FI_RECV));
    CALL(fi_connect(rej, cinfo->dest_addr, nullptr, 0));
    if (!wait_event(r, {peq, ceq}, peq, FI_CONNREQ, "the first FI_CONNREQ", &ev)) return done();
    r.infos.push_back(ev.ent.info);
    CALL(fi_reject(pep, ev.ent.info->handle, nullptr, 0));
    if (!wait_event(r, {peq, ceq}, ceq, 0, "the rejection", &ev, FI_ECONNREFUSED)) return done();

    CALL(fi_endpoint(cdom, cinfo, &cep, nullptr));
    r.keep(cep);
    CALL(fi_ep_bind(cep, &ceq->fid, 0));
    CALL(fi_ep_bind(cep, &ctx->fid, FI_TRANSMIT));
    CALL(fi_ep_bind(cep, &crx->fid, FI_RECV));
    CALL(fi_enable(cep));
    CALL(fi_mr_reg(cdom, cbuf.data(), cbuf.size(), FI_SEND | FI_READ | FI_WRITE, 0, 0, 0, &cmr,
                   nullptr));
    r.keep(cmr);
    CALL(fi_connect(cep, cinfo->dest_addr, nullptr, 0));

    // ---- the server accepts on rxe0 (its own EQ, a shared receive context)
    if (!wait_event(r, {peq, ceq}, peq, FI_CONNREQ, "FI_CONNREQ", &ev)) return done();
    r.infos.push_back(ev.ent.info);
    {
        struct fi_info* req = ev.ent.info;
        CALL(fi_domain(sfab, req, &sdom, nullptr));
        r.keep(sdom);
        // With FI_EVD_RESUME_TIMEOUT (run.sh's resumable pass) the endpoint
        // shares its listener's EQ, as ofi_rxm binds them: only then is the
        // connection resumable both ways (the offer, the token, the armed
        // outage and keepalive), and those paths are faulted too.
        if (resumable) {
            seq = peq;
        } else {
            CALL(fi_eq_open(sfab, &eqa, &seq, nullptr));
            r.keep(seq);
        }
        CALL(fi_cq_open(sdom, &cqa, &stx, nullptr));
        r.keep(stx);
        CALL(fi_cq_open(sdom, &cqa, &srx_cq, nullptr));
        r.keep(srx_cq);
        struct fi_rx_attr ra {};
        ra.size = 16;
        ra.iov_limit = 1;
        CALL(fi_srx_context(sdom, &ra, &srx, nullptr));
        r.keep(srx);
        req->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
        CALL(fi_endpoint(sdom, req, &sep, nullptr));
        r.keep(sep);
        CALL(fi_ep_bind(sep, &seq->fid, 0));
        CALL(fi_ep_bind(sep, &stx->fid, FI_TRANSMIT));
        CALL(fi_ep_bind(sep, &srx_cq->fid, FI_RECV));
        CALL(fi_ep_bind(sep, &srx->fid, 0));
        CALL(fi_enable(sep));
        CALL(fi_mr_reg(sdom, sbuf.data(), sbuf.size(),
                       FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &smr, nullptr));
        r.keep(smr);
        CALL(fi_recv(srx, sbuf.data(), kLen, fi_mr_desc(smr), 0, &rctx));
        CALL(fi_accept(sep, nullptr, 0));
    }
    if (!wait_event(r, {peq, ceq, seq}, ceq, FI_CONNECTED, "the client's FI_CONNECTED", &ev))
        return done();
    if (!wait_event(r, {peq, ceq, seq}, seq, FI_CONNECTED, "the server's FI_CONNECTED", &ev))
        return done();

    // ---- data: a send into the shared receive context, an RDMA write read back
    for (size_t i = 0; i < kLen; ++i) cbuf[i] = pattern(i, 1);
    CALL(fi_send(cep, cbuf.data(), kLen, fi_mr_desc(cmr), 0, &sctx));
    if (!wait_cq(r, ctx, &sctx, "fi_send")) return done();
    if (!wait_cq(r, srx_cq, &rctx, "fi_recv")) return done();
    if (std::memcmp(cbuf.data(), sbuf.data(), kLen)) r.fail("received data differs");
    for (size_t i = 0; i < kLen; ++i) cbuf[i] = pattern(i, 2);
    const uint64_t key = fi_mr_key(smr);
    const auto raddr = reinterpret_cast<uintptr_t>(sbuf.data() + kLen);
    CALL(fi_write(cep, cbuf.data(), kLen, fi_mr_desc(cmr), 0, raddr, key, &wctx));
    if (!wait_cq(r, ctx, &wctx, "fi_write")) return done();
    CALL(fi_read(cep, cbuf.data() + kLen, kLen, fi_mr_desc(cmr), 0, raddr, key, &rdctx));
    if (!wait_cq(r, ctx, &rdctx, "fi_read")) return done();
    if (std::memcmp(cbuf.data(), cbuf.data() + kLen, kLen) ||
        std::memcmp(cbuf.data(), sbuf.data() + kLen, kLen))
        r.fail("RDMA write/read data differs");

    // ---- resumable: an outage under a send. Both connected QPs are moved to
    // the error state (evd_fault_break_qps, test/fault/break_qp.cpp), as a
    // device moves a QP whose path failed. The send completes flushed, which
    // evd holds; the client connects again with its token, the listener
    // attaches the new QP to the server's endpoint, both exchange counts and
    // the send is replayed: it must arrive once, with its data, and nothing
    // may reach an EQ. The outage's own calls (drain, new id, address and
    // route, QP, connect, accept, replay) are so faulted too.
    if (resumable) {
        using break_fn = int (*)();
        auto brk = reinterpret_cast<break_fn>(dlsym(RTLD_DEFAULT, "evd_fault_break_qps"));
        if (!brk) {
            r.fail("evd_fault_break_qps not found: the interposer (libevd_fault.so) is not preloaded");
            return done();
        }
        for (size_t i = 0; i < kLen; ++i) cbuf[i] = pattern(i, 3);
        CALL(fi_recv(srx, sbuf.data(), kLen, fi_mr_desc(smr), 0, &orctx));
        if (int n = brk(); n != 2) {
            r.fail("evd_fault_break_qps moved " + std::to_string(n) + " QPs to error, not the 2 connected");
            return done();
        }
        CALL(fi_send(cep, cbuf.data(), kLen, fi_mr_desc(cmr), 0, &osctx));
        if (!wait_both(r, {peq, ceq}, ctx, &osctx, srx_cq, &orctx, "the send across the outage"))
            return done();
        if (std::memcmp(cbuf.data(), sbuf.data(), kLen)) r.fail("data sent across the outage differs");
    }

    // ---- the client shuts down, the server sees it
    CALL(fi_shutdown(cep, 0));
    if (!wait_event(r, {peq, seq}, seq, FI_SHUTDOWN, "the server's FI_SHUTDOWN", &ev))
        return done();
#undef CALL
    return done();
}


// ---- the fork server (run.sh): libfabric's start-up, once
//
// Under TCG most of a site's run is the process's start: exec, the ASan
// runtime, libfabric loading and initialising every provider it has. With
// --serve PREFORK the scenario does that once: fi_getinfo for a provider
// that does not exist (libfabric initialises its providers, evd's included,
// and asks none of them for anything), then writes the interposer's counts
// so far to PREFORK and reads "SPEC DIR K" lines (SPEC "-": no fault) from
// stdin. Each line forks a run of the scenario whose call numbers go on from
// the parent's, so SYMBOL:N is the same call as in a cold run; run.sh runs
// cold every site numbered within PREFORK, and checks that a served run
// without a fault counts what a cold one does. The run's output goes to
// DIR/out (DIR made), the interposer's counts to DIR/counts; once it has
// ended, "K RC SECS" (RC its exit status, 128 + signal when killed: SIGALRM
// after 90 s) is written to fd 3 in one write.

using rearm_fn = void (*)(const char*, const char*);
using snapshot_fn = void (*)(const char*);

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

int threads_now() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/task")) {
        while (struct dirent* e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
    }
    return n;
}

pid_t g_child = -1;
void kill_child(int) {
    if (g_child > 0) kill(g_child, SIGKILL);
}

// The monitor (a child of the server): runs the scenario in its own child,
// waits for it, reports. Never returns.
[[noreturn]] void serve_one(rearm_fn rearm, const std::string& spec, const std::string& dir,
                           const char* k) {
    signal(SIGCHLD, SIG_DFL);
    const double t0 = now_s();
    mkdir(dir.c_str(), 0755);
    pid_t pid = fork();
    if (pid == 0) {
        close(3);
        int out = open((dir + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (out < 0 || in < 0) _exit(125);
        dup2(in, 0);
        dup2(out, 1);
        dup2(out, 2);
        close(in);
        close(out);
        rearm(spec == "-" ? "" : spec.c_str(), (dir + "/counts").c_str());
        alarm(90);
        std::exit(scenario());
    }
    int status = 0, rc = 125;
    if (pid > 0) {
        g_child = pid;
        signal(SIGALRM, kill_child);
        alarm(100);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        rc = WIFEXITED(status) ? WEXITSTATUS(status)
             : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 125;
    }
    char done[64];
    int n = std::snprintf(done, sizeof done, "%s %d %.1f\n", k, rc, now_s() - t0);
    ssize_t w = write(3, done, static_cast<size_t>(n));
    (void)w;
    _exit(0);
}

int serve(const char* prefork) {
    auto rearm = reinterpret_cast<rearm_fn>(dlsym(RTLD_DEFAULT, "evd_fault_rearm"));
    auto snapshot = reinterpret_cast<snapshot_fn>(dlsym(RTLD_DEFAULT, "evd_fault_snapshot"));
    if (!rearm || !snapshot) {
        std::fprintf(stderr, "serve: the interposer (libevd_fault.so) is not preloaded\n");
        return 3;
    }
    struct fi_info* h = fi_allocinfo();
    struct fi_info* got = nullptr;
    if (!h) return 3;
    h->fabric_attr->prov_name = strdup("evd-fault-no-such-provider");
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &got);
    fi_freeinfo(h);
    if (rc != -FI_ENODATA) {
        std::fprintf(stderr, "serve: the warm-up fi_getinfo returned %d, not -FI_ENODATA\n", rc);
        return 3;
    }
    if (int n = threads_now(); n != 1) {
        std::fprintf(stderr, "serve: %d threads after libfabric's start-up; a fork keeps only one\n", n);
        return 3;
    }
    snapshot(prefork);
    signal(SIGCHLD, SIG_IGN);  // the monitors are reaped by the kernel
    char line[8192];
    while (std::fgets(line, sizeof line, stdin)) {
        char spec[512], dir[4096], k[32];
        if (std::sscanf(line, "%511s %4095s %31s", spec, dir, k) != 3) continue;
        std::fflush(nullptr);
        pid_t m = fork();
        if (m == 0) serve_one(rearm, spec, dir, k);
        if (m < 0) {
            std::string done = std::string(k) + " 125 0.0\n";
            ssize_t w = write(3, done.data(), done.size());
            (void)w;
        }
    }
    _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc == 3 && !std::strcmp(argv[1], "--serve")) return serve(argv[2]);
    return scenario();
}
