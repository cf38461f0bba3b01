// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// msg_bench: evd against libfabric's verbs provider, same device, same run.
//
// For each provider: a listener on EVD_VM_ADDR0 (rxe0) and a client on
// EVD_VM_ADDR1 (rxe1) in one process, one thread, all endpoints on one EQ
// (so neither provider needs a second thread to make CM progress):
//   * connection setup: N sequential cycles of fi_connect -> FI_CONNREQ ->
//     fi_accept -> FI_CONNECTED (both sides) -> fi_shutdown -> FI_SHUTDOWN;
//     connections/s over the whole cycle and p50/p99 of fi_connect-to-
//     FI_CONNECTED on the client; and p50/p99 of the client's whole setup,
//     fi_endpoint to FI_CONNECTED ("setup"): a provider may resolve the
//     address and route in fi_endpoint (verbs, from the info's dest_addr)
//     or after fi_connect (evd, the rdmacm floor), which moves that work
//     into or out of the connect time;
//   * latency: 8-byte ping-pong (send/recv, busy-polled CQs), half round trip;
//   * bandwidth: 64 KiB sends, 64 in flight, 128 receives posted and
//     reposted as they complete;
//   * -P: where a sequential cycle spends its time (mean/median per phase);
//   * -c K: K connections set up at once (rate and connect latency), the
//     pattern of a client meeting many peers.
//   * -p ...,rdmacm: also the same cycle written straight on librdmacm and
//     libibverbs, with no provider at all (one event channel, blocking
//     rdma_get_cm_event, the fewest calls rdma_cm allows). It is the floor
//     a provider built on rdma_cm can approach: connection cycles only.
//   * -B N: sequential cycles in blocks of N per contestant, each block after
//     one uncounted cycle (the default, 1, alternates cycle by cycle; then
//     each cycle also absorbs kernel work the previous contestant deferred).
//   * -w S: steady churn. Before the counted cycles the contestants' cycles
//     alternate uncounted for S seconds, and before each burst the provider
//     runs one uncounted burst, closes it and reads its EQ for S seconds: the
//     counted connections follow connections that closed seconds before, as
//     on a server whose clients come and go (evd then reuses the closed
//     connections' QPs once rdma_cm's time-wait, about 2 s on rxe, is over;
//     its counters are printed per round). Without -w every round starts on
//     fresh domains: the cold start.
// Built by `make bench`; run inside the VM:
//   test/vm/run-in-vm -- ./msg_bench [-n conns] [-i pingpongs] [-b messages] [-p evd,verbs]
//                                    [-s iov_limit (4)] [-j inject_size (64)] [-r rounds (3)] [-P] [-c K] [-B N]
//                                    [-w S]
// Both providers are asked for the same queue shapes (256 deep, iov_limit and
// inject_size as given; 0 = the provider's default).
// FI_PROVIDER_PATH defaults to the .libs directory next to the binary.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_evd.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

size_t g_iov = 4;       // -s: tx/rx iov_limit asked of both providers
size_t g_inject = 64;   // -j: tx inject_size asked of both providers
bool g_phases = false;  // -P: print where a connect/teardown cycle spends its time

// Phases of one connect_once/teardown cycle (medians printed with -P).
enum phase { kEpOpen, kConnectCall, kToConnreq, kAccept, kToEstab, kToShutdown, kClose, kPhases };
const char* const phase_name[kPhases] = {
    "client fi_endpoint+bind+enable", "fi_connect call",   "-> server FI_CONNREQ",
    "server fi_endpoint..fi_accept",  "-> both CONNECTED", "fi_shutdown -> FI_SHUTDOWN",
    "fi_close both endpoints"};

double us_since(clk::time_point t0) {
    return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
}

const char* env_or(const char* n, const char* d) {
    const char* v = getenv(n);
    return v ? v : d;
}

#define CHECK(call)                                                                     \
    do {                                                                                \
        int rc_ = static_cast<int>(call);                                               \
        if (rc_) {                                                                      \
            fprintf(stderr, "%s:%d %s: %s (%d)\n", __FILE__, __LINE__, #call,           \
                    fi_strerror(-rc_), rc_);                                            \
            return false;                                                               \
        }                                                                               \
    } while (0)

struct result {
    std::string prov;
    bool ok = false;
    int conns = 0;
    double conn_rate = 0, conn_p50 = 0, conn_p99 = 0;
    double setup_p50 = 0, setup_p99 = 0;  // fi_endpoint to FI_CONNECTED
    double lat_us = 0;
    double bw_mbs = 0;
    std::vector<double> phase_us[kPhases];  // every cycle's phase times
    // -c K: K connections set up at once (all fi_connect calls issued, then
    // every CONNREQ accepted as it arrives), torn down at once
    double burst_rate = 0, burst_p50 = 0, burst_p99 = 0;
    std::string reuse;  // evd: how many of the counted endpoints reused a QP
};

class bench {
public:
    explicit bench(const char* prov) : prov_(prov) {}
    ~bench() { cleanup(); }

    bool setup() {
        struct fi_info* h = hints();
        CHECK(fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"), port_.c_str(),
                         FI_SOURCE, h, &sinfo_));
        struct sockaddr_in src {};
        src.sin_family = AF_INET;
        inet_pton(AF_INET, env_or("EVD_VM_ADDR1", "192.0.2.2"), &src.sin_addr);
        h->src_addr = malloc(sizeof src);
        memcpy(h->src_addr, &src, sizeof src);
        h->src_addrlen = sizeof src;
        CHECK(fi_getinfo(FI_VERSION(1, 17), env_or("EVD_VM_ADDR0", "192.0.2.1"), port_.c_str(), 0,
                         h, &cinfo_));
        fi_freeinfo(h);
        CHECK(fi_fabric(sinfo_->fabric_attr, &fab_, nullptr));
        struct fi_eq_attr ea {};
        ea.wait_obj = FI_WAIT_UNSPEC;
        ea.size = 256;
        CHECK(fi_eq_open(fab_, &ea, &eq_, nullptr));
        CHECK(fi_domain(fab_, sinfo_, &sdom_, nullptr));
        CHECK(fi_domain(fab_, cinfo_, &cdom_, nullptr));
        struct fi_cq_attr ca {};
        ca.format = FI_CQ_FORMAT_CONTEXT;
        ca.wait_obj = FI_WAIT_NONE;
        ca.size = 512;
        CHECK(fi_cq_open(sdom_, &ca, &scq_, nullptr));
        CHECK(fi_cq_open(cdom_, &ca, &ccq_, nullptr));
        CHECK(fi_passive_ep(fab_, sinfo_, &pep_, nullptr));
        CHECK(fi_pep_bind(pep_, &eq_->fid, 0));
        CHECK(fi_listen(pep_));
        buf_size_ = 64 * 1024 * 128;
        sbuf_.assign(buf_size_, 1);
        cbuf_.assign(buf_size_, 2);
        CHECK(fi_mr_reg(sdom_, sbuf_.data(), buf_size_, FI_SEND | FI_RECV, 0, 1, 0, &smr_, nullptr));
        CHECK(fi_mr_reg(cdom_, cbuf_.data(), buf_size_, FI_SEND | FI_RECV, 0, 2, 0, &cmr_, nullptr));
        return true;
    }

    // One connect/accept cycle. Leaves sep_/cep_ connected when keep is true.
    bool connect_once(double& connect_us, bool keep) {
        auto tp = clk::now();
        CHECK(fi_endpoint(cdom_, cinfo_, &cep_, nullptr));
        CHECK(fi_ep_bind(cep_, &eq_->fid, 0));
        CHECK(fi_ep_bind(cep_, &ccq_->fid, FI_TRANSMIT | FI_RECV));
        CHECK(fi_enable(cep_));
        auto t0 = clk::now();
        note(kEpOpen, tp, t0);
        CHECK(fi_connect(cep_, cinfo_->dest_addr, nullptr, 0));
        tp = clk::now();
        note(kConnectCall, t0, tp);
        bool c_up = false, s_up = false;
        while (!c_up || !s_up) {
            uint32_t ev;
            struct fi_eq_cm_entry ent {};
            if (!wait_event(ev, ent)) return false;
            if (ev == FI_CONNREQ) {
                auto ta = clk::now();
                note(kToConnreq, tp, ta);
                CHECK(fi_endpoint(sdom_, ent.info, &sep_, nullptr));
                fi_freeinfo(ent.info);
                CHECK(fi_ep_bind(sep_, &eq_->fid, 0));
                CHECK(fi_ep_bind(sep_, &scq_->fid, FI_TRANSMIT | FI_RECV));
                CHECK(fi_enable(sep_));
                if (keep) post_server_recvs();
                CHECK(fi_accept(sep_, nullptr, 0));
                tp = clk::now();
                note(kAccept, ta, tp);
            } else if (ev == FI_CONNECTED && ent.fid == &cep_->fid) {
                connect_us = us_since(t0);
                c_up = true;
            } else if (ev == FI_CONNECTED && sep_ && ent.fid == &sep_->fid) {
                s_up = true;
            } else if (ev == FI_SHUTDOWN) {
                // late news about an endpoint of an earlier cycle
            } else {
                fprintf(stderr, "%s: unexpected event %u\n", prov_, ev);
                return false;
            }
        }
        note(kToEstab, tp, clk::now());
        if (keep) return true;
        return teardown();
    }

    bool teardown() {
        auto t0 = clk::now();
        CHECK(fi_shutdown(cep_, 0));
        // the server side learns it (FI_SHUTDOWN); the client may or may not
        auto end = clk::now() + std::chrono::seconds(10);
        bool s_down = false;
        while (!s_down && clk::now() < end) {
            uint32_t ev;
            struct fi_eq_cm_entry ent {};
            if (!wait_event(ev, ent)) return false;
            if (ev == FI_SHUTDOWN && ent.fid == &sep_->fid) s_down = true;
        }
        auto t1 = clk::now();
        note(kToShutdown, t0, t1);
        fi_close(&cep_->fid);
        fi_close(&sep_->fid);
        note(kClose, t1, clk::now());
        cep_ = sep_ = nullptr;
        pp_primed_ = false;
        drain(scq_);
        drain(ccq_);
        if (!s_down) fprintf(stderr, "%s: no FI_SHUTDOWN on the server side\n", prov_);
        return s_down;
    }

    // Reads (and drops) whatever the EQ reports for `secs` seconds, as an
    // application reading its EQ between connections does.
    void idle(double secs) {
        auto end = clk::now() + std::chrono::microseconds(static_cast<long>(secs * 1e6));
        alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
        while (clk::now() < end) {
            uint32_t ev;
            ssize_t r = fi_eq_sread(eq_, &ev, buf, sizeof buf, 50, 0);
            if (r == -FI_EAVAIL) {
                struct fi_eq_err_entry err {};
                fi_eq_readerr(eq_, &err, 0);
            }
        }
    }

    // evd's QP reuse counters, both domains summed: reused, created (false
    // for another provider).
    bool reuse(uint64_t& reused, uint64_t& created) {
        struct fi_evd_qp_pool_stats c {}, s {};
        if (fi_control(&cdom_->fid, FI_EVD_QP_POOL_STATS, &c) ||
            fi_control(&sdom_->fid, FI_EVD_QP_POOL_STATS, &s))
            return false;
        reused = c.reused + s.reused;
        created = c.created + s.created;
        return true;
    }

    // K connections at once, the way a client of many servers (or ofi_rxm
    // meeting many peers) sets them up: every client endpoint opened and
    // fi_connect issued back to back, the server accepting each FI_CONNREQ
    // as it comes. rate = K / (first fi_endpoint .. last side CONNECTED);
    // lat = each client's fi_connect-to-FI_CONNECTED. Then all are shut down
    // and closed (not timed).
    bool burst(int k, double& rate, std::vector<double>& lat) {
        std::vector<struct fid_ep*> cl(k, nullptr), sv;
        std::vector<clk::time_point> t_conn(k);
        lat.assign(k, 0);
        auto fail = [&]() {
            for (auto* e : cl) if (e) fi_close(&e->fid);
            for (auto* e : sv) if (e) fi_close(&e->fid);
            return false;
        };
        auto t0 = clk::now();
        for (int i = 0; i < k; ++i) {
            // context = index + 1 tells the client endpoints apart in events
            if (fi_endpoint(cdom_, cinfo_, &cl[i], reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1))) ||
                fi_ep_bind(cl[i], &eq_->fid, 0) || fi_ep_bind(cl[i], &ccq_->fid, FI_TRANSMIT | FI_RECV) ||
                fi_enable(cl[i])) {
                fprintf(stderr, "%s: burst: client endpoint %d\n", prov_, i);
                return fail();
            }
            t_conn[i] = clk::now();
            if (fi_connect(cl[i], cinfo_->dest_addr, nullptr, 0)) {
                fprintf(stderr, "%s: burst: fi_connect %d\n", prov_, i);
                return fail();
            }
        }
        int c_up = 0, s_up = 0;
        while (c_up < k || s_up < k) {
            uint32_t ev;
            struct fi_eq_cm_entry ent {};
            if (!wait_event(ev, ent)) return fail();
            uintptr_t ctx = reinterpret_cast<uintptr_t>(ent.fid->context);
            if (ev == FI_CONNREQ) {
                struct fid_ep* e = nullptr;
                int rc = fi_endpoint(sdom_, ent.info, &e, nullptr);
                fi_freeinfo(ent.info);
                if (rc) return fail();
                sv.push_back(e);
                if (fi_ep_bind(e, &eq_->fid, 0) || fi_ep_bind(e, &scq_->fid, FI_TRANSMIT | FI_RECV) ||
                    fi_enable(e) || fi_accept(e, nullptr, 0)) {
                    fprintf(stderr, "%s: burst: accept\n", prov_);
                    return fail();
                }
            } else if (ev == FI_CONNECTED && ctx >= 1 && ctx <= static_cast<uintptr_t>(k)) {
                lat[ctx - 1] = us_since(t_conn[ctx - 1]);
                ++c_up;
            } else if (ev == FI_CONNECTED) {
                ++s_up;
            } else if (ev != FI_SHUTDOWN) {
                fprintf(stderr, "%s: burst: unexpected event %u\n", prov_, ev);
                return fail();
            }
        }
        rate = k / (us_since(t0) / 1e6);
        for (auto* e : cl) fi_shutdown(e, 0);
        int s_down = 0;
        auto end = clk::now() + std::chrono::seconds(20);
        while (s_down < k && clk::now() < end) {
            uint32_t ev;
            struct fi_eq_cm_entry ent {};
            if (!wait_event(ev, ent)) break;
            if (ev == FI_SHUTDOWN && ent.fid->context == nullptr) ++s_down;
        }
        for (auto* e : cl) fi_close(&e->fid);
        for (auto* e : sv) fi_close(&e->fid);
        drain(scq_);
        drain(ccq_);
        return s_down == k;
    }

    // Ping-pongs on the kept connection; callable repeatedly (run_round
    // alternates chunks between providers). The first call primes the
    // client's receive and warms up. lat_us: this call's half round trip.
    bool pingpong(int iters, double& lat_us) {
        const size_t n = 8;
        void* cd = fi_mr_desc(cmr_);
        void* sd = fi_mr_desc(smr_);
        auto run = [&](int count) -> bool {
            for (int i = 0; i < count; ++i) {
                if (!post_retry([&] { return fi_send(cep_, cbuf_.data(), n, cd, 0, nullptr); })) return false;
                if (!wait_comps(scq_, 1, /*repost server recv*/ true)) return false;  // server recv
                if (!post_retry([&] { return fi_send(sep_, sbuf_.data(), n, sd, 0, nullptr); })) return false;
                // client: its send completion, the pong
                if (!wait_comps(ccq_, 2, false)) return false;
                CHECK(fi_recv(cep_, cbuf_.data() + 4096, 4096, cd, 0, nullptr));
                if (!wait_comps(scq_, 1, false)) return false;  // server's send completion
            }
            return true;
        };
        if (!pp_primed_) {
            // one receive posted on each side ahead of every message
            CHECK(fi_recv(cep_, cbuf_.data() + 4096, 4096, cd, 0, nullptr));
            pp_primed_ = true;
            if (!run(std::min(iters / 10 + 1, 200))) return false;  // warm-up
        }
        auto t0 = clk::now();
        if (!run(iters)) return false;
        lat_us = us_since(t0) / iters / 2;
        return true;
    }

    bool bandwidth(int msgs, double& mbs) {
        const size_t n = 64 * 1024;
        const int window = 64;
        void* cd = fi_mr_desc(cmr_);
        // receives for the whole window are posted (post_server_recvs), and
        // each completion reposts one
        int sent = 0, done = 0, received = 0;
        auto t0 = clk::now();
        auto end = t0 + std::chrono::seconds(120);
        while (received < msgs) {
            while (sent < msgs && sent - done < window) {
                ssize_t r = fi_send(cep_, cbuf_.data() + (sent % 64) * n, n, cd, 0, nullptr);
                if (r == -FI_EAGAIN) break;
                if (r) {
                    fprintf(stderr, "%s: fi_send: %s\n", prov_, fi_strerror(static_cast<int>(-r)));
                    return false;
                }
                ++sent;
            }
            struct fi_cq_entry e[64];
            ssize_t k = fi_cq_read(ccq_, e, 64);
            if (k > 0) done += static_cast<int>(k);
            else if (k != -FI_EAGAIN) return cq_fail(ccq_, k);
            k = fi_cq_read(scq_, e, 64);
            if (k > 0) {
                for (ssize_t j = 0; j < k; ++j) {
                    ++received;
                    if (!post_retry([&] { return srecv(); })) return false;
                }
            } else if (k != -FI_EAGAIN) {
                return cq_fail(scq_, k);
            }
            if (clk::now() > end) {
                fprintf(stderr, "%s: bandwidth run timed out (%d/%d)\n", prov_, received, msgs);
                return false;
            }
        }
        while (done < sent) {
            struct fi_cq_entry e[64];
            ssize_t k = fi_cq_read(ccq_, e, 64);
            if (k > 0) done += static_cast<int>(k);
            else if (k != -FI_EAGAIN) return cq_fail(ccq_, k);
        }
        double secs = us_since(t0) / 1e6;
        mbs = static_cast<double>(msgs) * n / secs / 1e6;
        return true;
    }

    const char* prov_;
    std::vector<double> phase_us[kPhases];

private:
    void note(phase p, clk::time_point a, clk::time_point b) {
        phase_us[p].push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }

    static inline int runs_ = 0;
    std::string port_ = std::to_string(20000 + (getpid() % 500) * 20 + runs_++ % 20);
    struct fi_info *sinfo_ = nullptr, *cinfo_ = nullptr;
    struct fid_fabric* fab_ = nullptr;
    struct fid_eq* eq_ = nullptr;
    struct fid_domain *sdom_ = nullptr, *cdom_ = nullptr;
    struct fid_cq *scq_ = nullptr, *ccq_ = nullptr;
    struct fid_pep* pep_ = nullptr;
    struct fid_ep *sep_ = nullptr, *cep_ = nullptr;
    struct fid_mr *smr_ = nullptr, *cmr_ = nullptr;
    std::vector<char> sbuf_, cbuf_;
    size_t buf_size_ = 0;
    int srecv_slot_ = 0;
    bool pp_primed_ = false;  // pingpong's client receive is posted

    struct fi_info* hints() {
        struct fi_info* h = fi_allocinfo();
        h->ep_attr->type = FI_EP_MSG;
        h->caps = FI_MSG;
        h->mode = FI_CONTEXT;
        h->domain_attr->mr_mode =
            FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        h->addr_format = FI_SOCKADDR_IN;
        h->tx_attr->size = 256;
        h->rx_attr->size = 256;
        // the same queue shapes for both providers (0 = provider default)
        h->tx_attr->iov_limit = h->rx_attr->iov_limit = g_iov;
        h->tx_attr->inject_size = g_inject;
        h->fabric_attr->prov_name = strdup(prov_);
        return h;
    }

    ssize_t srecv() {
        const size_t n = 64 * 1024;
        char* b = sbuf_.data() + (64 + srecv_slot_ % 64) * n;
        ++srecv_slot_;
        return fi_recv(sep_, b, n, fi_mr_desc(smr_), 0, nullptr);
    }

    // Twice the sender's window: the receiver reposts only when it reads its
    // CQ, and a sender that finds no receive posted waits out an RNR timer,
    // which would measure rdma_cm's RNR settings rather than the data path.
    // (Receive buffers are reused round-robin; the data is not checked.)
    void post_server_recvs() {
        for (int i = 0; i < 128; ++i) srecv();
    }

    template <class F>
    bool post_retry(F f) {
        auto end = clk::now() + std::chrono::seconds(20);
        for (;;) {
            ssize_t r = f();
            if (r == 0) return true;
            if (r != -FI_EAGAIN || clk::now() > end) {
                fprintf(stderr, "%s: post: %s\n", prov_, fi_strerror(static_cast<int>(-r)));
                return false;
            }
        }
    }

    bool cq_fail(struct fid_cq* cq, ssize_t k) {
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err {};
            fi_cq_readerr(cq, &err, 0);
            fprintf(stderr, "%s: completion error %s (prov_errno %d)\n", prov_,
                    fi_strerror(err.err), err.prov_errno);
        } else {
            fprintf(stderr, "%s: fi_cq_read: %s\n", prov_, fi_strerror(static_cast<int>(-k)));
        }
        return false;
    }

    // Busy-polls `cq` until `want` completions; the ping-pong server's
    // receive completion reposts its receive.
    bool wait_comps(struct fid_cq* cq, int want, bool repost) {
        auto end = clk::now() + std::chrono::seconds(20);
        while (want > 0) {
            struct fi_cq_entry e[8];
            ssize_t k = fi_cq_read(cq, e, static_cast<size_t>(std::min(want, 8)));
            if (k > 0) {
                want -= static_cast<int>(k);
                if (repost)
                    for (ssize_t j = 0; j < k; ++j)
                        if (srecv()) return false;
            } else if (k != -FI_EAGAIN) {
                return cq_fail(cq, k);
            } else if (clk::now() > end) {
                fprintf(stderr, "%s: no completion\n", prov_);
                return false;
            }
        }
        return true;
    }

    void drain(struct fid_cq* cq) {
        struct fi_cq_entry e[64];
        for (int i = 0; i < 1000; ++i) {
            ssize_t k = fi_cq_read(cq, e, 64);
            if (k == -FI_EAVAIL) {
                struct fi_cq_err_entry err {};
                fi_cq_readerr(cq, &err, 0);
            } else if (k <= 0) {
                break;
            }
        }
    }

    bool wait_event(uint32_t& ev, struct fi_eq_cm_entry& ent) {
        alignas(struct fi_eq_cm_entry) uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
        ssize_t r = fi_eq_sread(eq_, &ev, buf, sizeof buf, 20000, 0);
        if (r == -FI_EAVAIL) {
            struct fi_eq_err_entry err {};
            fi_eq_readerr(eq_, &err, 0);
            fprintf(stderr, "%s: EQ error %s (prov_errno %d)\n", prov_, fi_strerror(err.err),
                    err.prov_errno);
            return false;
        }
        if (r < 0) {
            fprintf(stderr, "%s: fi_eq_sread: %s\n", prov_, fi_strerror(static_cast<int>(-r)));
            return false;
        }
        memcpy(&ent, buf, sizeof ent);
        return true;
    }

    void cleanup() {
        for (struct fid_ep** e : {&cep_, &sep_})
            if (*e) fi_close(&(*e)->fid);
        if (pep_) fi_close(&pep_->fid);
        if (smr_) fi_close(&smr_->fid);
        if (cmr_) fi_close(&cmr_->fid);
        if (scq_) fi_close(&scq_->fid);
        if (ccq_) fi_close(&ccq_->fid);
        if (sdom_) fi_close(&sdom_->fid);
        if (cdom_) fi_close(&cdom_->fid);
        if (eq_) fi_close(&eq_->fid);
        if (fab_) fi_close(&fab_->fid);
        if (sinfo_) fi_freeinfo(sinfo_);
        if (cinfo_) fi_freeinfo(cinfo_);
    }
};

// The connection cycle on bare librdmacm/libibverbs (-p rdmacm): what every
// rdma_cm based provider has to do at the least, with nothing of its own.
// The same queue shapes as the providers are asked for; the QP is created
// once the id is on its device (after ADDR_RESOLVED), as librdmacm wants.
class raw_cm {
public:
    ~raw_cm() { cleanup(); }
    std::vector<double> phase_us[kPhases];

    bool setup() {
        ch_ = rdma_create_event_channel();
        if (!ch_) return fail("rdma_create_event_channel");
        if (!addr(env_or("EVD_VM_ADDR0", "192.0.2.1"), port_, dst_) ||
            !addr(env_or("EVD_VM_ADDR1", "192.0.2.2"), 0, src_))
            return fail("address");
        if (rdma_create_id(ch_, &lid_, nullptr, RDMA_PS_TCP) ||
            rdma_bind_addr(lid_, reinterpret_cast<sockaddr*>(&dst_)) || rdma_listen(lid_, 128))
            return fail("listener");
        // an id bound to the client address gives the client device's context
        if (rdma_create_id(ch_, &cdev_id_, nullptr, RDMA_PS_TCP) ||
            rdma_bind_addr(cdev_id_, reinterpret_cast<sockaddr*>(&src_)))
            return fail("client device");
        for (int k = 0; k < 2; ++k) {
            ibv_context* v = k ? cdev_id_->verbs : lid_->verbs;
            pd_[k] = ibv_alloc_pd(v);
            cq_[k] = pd_[k] ? ibv_create_cq(v, 512, nullptr, nullptr, 0) : nullptr;
            if (!cq_[k]) return fail("pd/cq");
        }
        return true;
    }

    bool connect_once(double& connect_us) {
        auto tp = clk::now();
        rdma_cm_id* cid = nullptr;
        rdma_cm_id* sid = nullptr;
        auto bail = [&](const char* what) {
            for (rdma_cm_id* id : {cid, sid}) {
                if (!id) continue;
                if (id->qp) rdma_destroy_qp(id);
                rdma_destroy_id(id);
            }
            return fail(what);
        };
        if (rdma_create_id(ch_, &cid, nullptr, RDMA_PS_TCP)) return bail("rdma_create_id");
        auto t0 = clk::now();
        note(kEpOpen, tp, t0);
        if (rdma_resolve_addr(cid, reinterpret_cast<sockaddr*>(&src_),
                              reinterpret_cast<sockaddr*>(&dst_), 2000))
            return bail("rdma_resolve_addr");
        tp = clk::now();
        note(kConnectCall, t0, tp);
        bool c_up = false, s_up = false;
        while (!c_up || !s_up) {
            rdma_cm_event* ev = nullptr;
            if (rdma_get_cm_event(ch_, &ev)) return bail("rdma_get_cm_event");
            rdma_cm_event_type type = ev->event;
            rdma_cm_id* id = ev->id;
            int status = ev->status;
            rdma_ack_cm_event(ev);
            switch (type) {
            case RDMA_CM_EVENT_ADDR_RESOLVED: {
                ibv_qp_init_attr a = attr(1);
                if (rdma_create_qp(cid, pd_[1], &a)) return bail("rdma_create_qp (client)");
                if (rdma_resolve_route(cid, 2000)) return bail("rdma_resolve_route");
                break;
            }
            case RDMA_CM_EVENT_ROUTE_RESOLVED: {
                rdma_conn_param cp = param();
                if (rdma_connect(cid, &cp)) return bail("rdma_connect");
                break;
            }
            case RDMA_CM_EVENT_CONNECT_REQUEST: {
                auto ta = clk::now();
                note(kToConnreq, tp, ta);
                sid = id;
                ibv_qp_init_attr a = attr(0);
                if (rdma_create_qp(sid, pd_[0], &a)) return bail("rdma_create_qp (server)");
                rdma_conn_param cp = param();
                if (rdma_accept(sid, &cp)) return bail("rdma_accept");
                tp = clk::now();
                note(kAccept, ta, tp);
                break;
            }
            case RDMA_CM_EVENT_ESTABLISHED:
                if (id == cid) {
                    connect_us = std::chrono::duration<double, std::micro>(clk::now() - t0).count();
                    c_up = true;
                } else {
                    s_up = true;
                }
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
            case RDMA_CM_EVENT_TIMEWAIT_EXIT:
                break;  // an earlier cycle's ids are gone; nothing can arrive for them
            default:
                fprintf(stderr, "rdmacm: %s (status %d)\n", rdma_event_str(type), status);
                return bail("unexpected event");
            }
        }
        note(kToEstab, tp, clk::now());
        // teardown: the client disconnects, the server learns it
        auto ts = clk::now();
        if (rdma_disconnect(cid)) return bail("rdma_disconnect");
        for (;;) {
            rdma_cm_event* ev = nullptr;
            if (rdma_get_cm_event(ch_, &ev)) return bail("rdma_get_cm_event");
            bool done = ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == sid;
            rdma_ack_cm_event(ev);
            if (done) break;
        }
        auto t1 = clk::now();
        note(kToShutdown, ts, t1);
        for (rdma_cm_id* id : {cid, sid}) {
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
        note(kClose, t1, clk::now());
        return true;
    }

private:
    static bool addr(const char* ip, int port, sockaddr_in& out) {
        memset(&out, 0, sizeof out);
        out.sin_family = AF_INET;
        out.sin_port = htons(static_cast<uint16_t>(port));
        return inet_pton(AF_INET, ip, &out.sin_addr) == 1;
    }
    ibv_qp_init_attr attr(int k) const {
        ibv_qp_init_attr a {};
        a.qp_type = IBV_QPT_RC;
        a.send_cq = a.recv_cq = cq_[k];
        a.cap.max_send_wr = a.cap.max_recv_wr = 256;
        a.cap.max_send_sge = a.cap.max_recv_sge = static_cast<uint32_t>(g_iov ? g_iov : 1);
        a.cap.max_inline_data = static_cast<uint32_t>(g_inject);
        return a;
    }
    static rdma_conn_param param() {
        rdma_conn_param cp {};
        cp.responder_resources = cp.initiator_depth = 1;
        cp.retry_count = cp.rnr_retry_count = 7;
        return cp;
    }
    bool fail(const char* what) {
        fprintf(stderr, "rdmacm: %s: %s\n", what, strerror(errno));
        return false;
    }
    void note(phase p, clk::time_point a, clk::time_point b) {
        phase_us[p].push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
    void cleanup() {
        for (int k = 0; k < 2; ++k) {
            if (cq_[k]) ibv_destroy_cq(cq_[k]);
            if (pd_[k]) ibv_dealloc_pd(pd_[k]);
        }
        if (cdev_id_) rdma_destroy_id(cdev_id_);
        if (lid_) rdma_destroy_id(lid_);
        if (ch_) rdma_destroy_event_channel(ch_);
    }

    int port_ = 24000 + static_cast<int>(getpid() % 1000);
    rdma_event_channel* ch_ = nullptr;
    rdma_cm_id* lid_ = nullptr;
    rdma_cm_id* cdev_id_ = nullptr;
    sockaddr_in src_ {}, dst_ {};
    ibv_pd* pd_[2] = {};
    ibv_cq* cq_[2] = {};
};

double pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

int g_burst = 0;  // -c K: also K connections at once
int g_block = 1;  // -B N: sequential cycles in blocks of N per contestant
double g_warm = 0;  // -w S: seconds of uncounted churn before the cycles and each burst

// One round: every provider's objects are open at once and the sequential
// connect/teardown cycles alternate between providers cycle by cycle, so
// that the host's load (the guest is emulated on a shared machine) falls on
// both alike; conn/s is cycles over the summed cycle times of that provider.
// Then each provider's burst, latency and bandwidth in turn.
std::vector<result> run_round(const std::vector<std::string>& names, int round, int conns,
                              int iters, int bw_msgs) {
    std::vector<result> rs(names.size());
    std::vector<std::unique_ptr<bench>> bs;
    std::vector<std::unique_ptr<raw_cm>> raws(names.size());
    std::vector<std::vector<double>> lat(names.size());
    std::vector<double> busy(names.size(), 0.0);
    std::vector<bool> alive(names.size(), true);
    for (size_t k = 0; k < names.size(); ++k) {
        rs[k].prov = names[k];
        bs.push_back(std::make_unique<bench>(names[k].c_str()));
        if (names[k] == "rdmacm") {
            raws[k] = std::make_unique<raw_cm>();
            if (!raws[k]->setup()) alive[k] = false;
        } else if (!bs[k]->setup()) {
            alive[k] = false;
        }
    }
    // -w S: uncounted cycles, alternating, for S seconds.
    if (g_warm > 0) {
        auto end = clk::now() + std::chrono::microseconds(static_cast<long>(g_warm * 1e6));
        while (clk::now() < end) {
            for (size_t k = 0; k < names.size(); ++k) {
                if (!alive[k]) continue;
                std::vector<double>* ph = raws[k] ? raws[k]->phase_us : bs[k]->phase_us;
                size_t before[kPhases];
                for (int p = 0; p < kPhases; ++p) before[p] = ph[p].size();
                double us = 0;
                if (raws[k] ? !raws[k]->connect_once(us) : !bs[k]->connect_once(us, false)) {
                    fprintf(stderr, "%s: warm-up connection failed\n", names[k].c_str());
                    alive[k] = false;
                }
                for (int p = 0; p < kPhases; ++p) ph[p].resize(before[p]);
            }
        }
    }
    // evd: QPs reused and created by the counted endpoints (-w: the churn
    // before them leaves QPs to reuse).
    std::vector<uint64_t> ru0(names.size()), cr0(names.size()), ru1(names.size()), cr1(names.size());
    std::vector<bool> has_pool(names.size(), false);
    for (size_t k = 0; k < names.size(); ++k)
        if (!raws[k] && alive[k]) has_pool[k] = bs[k]->reuse(ru0[k], cr0[k]);
    // -B N: blocks of N counted cycles per contestant, each after one cycle
    // that is not counted: that one follows another contestant's cycle and
    // absorbs whatever kernel work (DREP, time-wait, deferred destruction)
    // the other left behind.
    for (int done = 0; done < conns;) {
        const int n = g_block > 1 ? std::min(g_block, conns - done) : 1;
        for (size_t k = 0; k < names.size(); ++k) {
            for (int j = g_block > 1 ? -1 : 0; j < n && alive[k]; ++j) {
                std::vector<double>* ph = raws[k] ? raws[k]->phase_us : bs[k]->phase_us;
                size_t before[kPhases];
                for (int p = 0; p < kPhases; ++p) before[p] = ph[p].size();
                double us = 0;
                auto t0 = clk::now();
                if (raws[k] ? !raws[k]->connect_once(us) : !bs[k]->connect_once(us, false)) {
                    fprintf(stderr, "%s: connection %d failed\n", names[k].c_str(), done + j);
                    alive[k] = false;
                    break;
                }
                if (j < 0) {  // the warm-up cycle: forget its phases too
                    for (int p = 0; p < kPhases; ++p) ph[p].resize(before[p]);
                    continue;
                }
                busy[k] += us_since(t0);
                lat[k].push_back(us);
            }
        }
        done += n;
    }
    for (size_t k = 0; k < names.size(); ++k)
        if (has_pool[k]) bs[k]->reuse(ru1[k], cr1[k]);
    // bursts one provider after the other, the order flipped every round
    for (size_t j = 0; j < names.size(); ++j) {
        size_t k = round % 2 ? names.size() - 1 - j : j;
        result& r = rs[k];
        bench& b = *bs[k];
        if (!alive[k]) continue;
        r.conns = conns;
        r.conn_rate = conns / (busy[k] / 1e6);
        r.conn_p50 = pct(lat[k], 50);
        r.conn_p99 = pct(lat[k], 99);
        {  // each counted cycle's endpoint phase, then its connect time
            const std::vector<double>& ep =
                raws[k] ? raws[k]->phase_us[kEpOpen] : b.phase_us[kEpOpen];
            std::vector<double> setup;
            for (size_t i = 0; i < lat[k].size() && i < ep.size(); ++i)
                setup.push_back(ep[i] + lat[k][i]);
            r.setup_p50 = pct(setup, 50);
            r.setup_p99 = pct(setup, 99);
        }
        if (has_pool[k]) {
            char line[160];
            snprintf(line, sizeof line, "endpoints that reused a QP: cycles: %llu of %llu",
                     static_cast<unsigned long long>(ru1[k] - ru0[k]),
                     static_cast<unsigned long long>(ru1[k] - ru0[k] + cr1[k] - cr0[k]));
            r.reuse = line;
        }
        if (raws[k]) {  // connection cycles only
            for (int p = 0; p < kPhases; ++p) r.phase_us[p] = raws[k]->phase_us[p];
            r.ok = true;
            continue;
        }
        for (int p = 0; p < kPhases; ++p) r.phase_us[p] = b.phase_us[p];
        if (g_burst > 0) {
            std::vector<double> bl;
            if (g_warm > 0) {  // -w: the same burst a while ago, closed since
                double unused = 0;
                if (!b.burst(g_burst, unused, bl)) {
                    fprintf(stderr, "%s: warm-up burst failed\n", r.prov.c_str());
                    alive[k] = false;
                    continue;
                }
                b.idle(g_warm);
            }
            uint64_t bru0 = 0, bcr0 = 0, bru1 = 0, bcr1 = 0;
            if (has_pool[k]) b.reuse(bru0, bcr0);
            if (!b.burst(g_burst, r.burst_rate, bl)) {
                fprintf(stderr, "%s: burst of %d connections failed\n", r.prov.c_str(), g_burst);
                alive[k] = false;
                continue;
            }
            r.burst_p50 = pct(bl, 50);
            r.burst_p99 = pct(bl, 99);
            if (has_pool[k] && b.reuse(bru1, bcr1)) {
                char line[160];
                snprintf(line, sizeof line, "; burst: %llu of %llu",
                         static_cast<unsigned long long>(bru1 - bru0),
                         static_cast<unsigned long long>(bru1 - bru0 + bcr1 - bcr0));
                r.reuse += line;
            }
        }
        double us = 0;
        if (!b.connect_once(us, true)) alive[k] = false;
    }
    // Latency and bandwidth on one kept connection per provider, in chunks
    // that alternate between the providers (like the cycles above): the
    // result is the provider's total time over its chunks.
    const int chunks = 8;
    std::vector<double> pp_us(names.size(), 0.0), bw_s(names.size(), 0.0);
    for (int c = 0; c < chunks; ++c) {
        for (size_t k = 0; k < names.size(); ++k) {
            if (!alive[k] || raws[k]) continue;
            int it = iters / chunks + (c < iters % chunks ? 1 : 0);
            int ms = bw_msgs / chunks + (c < bw_msgs % chunks ? 1 : 0);
            double lat = 0, mbs = 0;
            if (it > 0 && !bs[k]->pingpong(it, lat)) {
                alive[k] = false;
                continue;
            }
            pp_us[k] += lat * 2 * it;
            if (ms > 0 && !bs[k]->bandwidth(ms, mbs)) {
                alive[k] = false;
                continue;
            }
            if (ms > 0) bw_s[k] += static_cast<double>(ms) * 64 * 1024 / (mbs * 1e6);
        }
    }
    for (size_t k = 0; k < names.size(); ++k) {
        result& r = rs[k];
        if (!alive[k] || r.conns == 0 || raws[k]) continue;
        r.lat_us = pp_us[k] / iters / 2;
        r.bw_mbs = static_cast<double>(bw_msgs) * 64 * 1024 / bw_s[k] / 1e6;
        bs[k]->teardown();
        r.ok = true;
    }
    return rs;
}

}  // namespace

int main(int argc, char** argv) {
    int conns = 50, iters = 2000, bw = 2000, rounds = 3;
    std::string provs = "evd,verbs";
    int opt;
    while ((opt = getopt(argc, argv, "n:i:b:p:s:j:r:c:B:w:Ph")) != -1) {
        switch (opt) {
        case 'n': conns = atoi(optarg); break;
        case 'i': iters = atoi(optarg); break;
        case 'b': bw = atoi(optarg); break;
        case 'p': provs = optarg; break;
        case 'r': rounds = atoi(optarg); break;
        case 's': g_iov = strtoul(optarg, nullptr, 0); break;
        case 'j': g_inject = strtoul(optarg, nullptr, 0); break;
        case 'P': g_phases = true; break;
        case 'c': g_burst = atoi(optarg); break;
        case 'B': g_block = atoi(optarg); break;
        case 'w': g_warm = atof(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-n conns] [-i pingpongs] [-b 64KiB messages] [-p evd,verbs] "
                    "[-s iov_limit] [-j inject_size] [-r rounds] [-P] [-c burst] [-B block] [-w secs]\n",
                    argv[0]);
            return 2;
        }
    }
    if (conns < 1 || iters < 1 || bw < 1 || rounds < 1) {
        fprintf(stderr, "counts must be positive\n");
        return 2;
    }
    if (!getenv("FI_PROVIDER_PATH")) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = 0;
            std::string dir(self);
            dir = dir.substr(0, dir.rfind('/')) + "/.libs";
            setenv("FI_PROVIDER_PATH", dir.c_str(), 1);
        }
    }
    unsetenv("FI_PROVIDER");  // both providers must be visible
    std::vector<std::string> names;
    size_t pos = 0;
    while (pos <= provs.size()) {
        size_t comma = provs.find(',', pos);
        std::string p = provs.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (!p.empty()) names.push_back(p);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    // within a round the providers' connection cycles alternate (run_round);
    // the summary is the median of the rounds
    std::vector<std::vector<result>> all_res(names.size());
    const char* hdr = "%-8s %6s %12s %14s %14s %12s %14s\n";
    const char* row = "%-8s %6d %12.1f %14.0f %14.0f %12.2f %14.1f%s\n";
    printf(hdr, "provider", "conns", "conn/s", "p50 conn (us)", "p99 conn (us)", "lat 8B (us)",
           "bw 64K (MB/s)");
    bool all = true;
    for (int round = 0; round < rounds; ++round) {
        std::vector<result> rr = run_round(names, round, conns, iters, bw);
        for (size_t k = 0; k < names.size(); ++k) {
            const result& r = rr[k];
            if (!r.ok) all = false;
            printf(row, r.prov.c_str(), r.conns, r.conn_rate, r.conn_p50, r.conn_p99, r.lat_us,
                   r.bw_mbs, r.ok ? "" : "  (FAILED)");
            printf("%-8s setup (fi_endpoint to FI_CONNECTED): p50 %.0f us, p99 %.0f us\n",
                   r.prov.c_str(), r.setup_p50, r.setup_p99);
            if (g_burst > 0)
                printf("%-8s burst of %d: %.1f conn/s, connect p50 %.0f us, p99 %.0f us\n",
                       r.prov.c_str(), g_burst, r.burst_rate, r.burst_p50, r.burst_p99);
            if (!r.reuse.empty()) printf("%-8s %s\n", r.prov.c_str(), r.reuse.c_str());
            fflush(stdout);
            all_res[k].push_back(r);
        }
    }
    auto med = [](std::vector<double> v) { return pct(std::move(v), 50); };
    std::vector<result> res;
    for (size_t k = 0; k < names.size(); ++k) {
        result m;
        m.prov = names[k];
        m.ok = true;
        std::vector<double> a, b, c, d, e, ba, bb, bc, sa, sb;
        for (const auto& r : all_res[k]) {
            if (!r.ok) continue;
            m.conns += r.conns;
            ba.push_back(r.burst_rate);
            bb.push_back(r.burst_p50);
            bc.push_back(r.burst_p99);
            a.push_back(r.conn_rate);
            b.push_back(r.conn_p50);
            c.push_back(r.conn_p99);
            sa.push_back(r.setup_p50);
            sb.push_back(r.setup_p99);
            d.push_back(r.lat_us);
            e.push_back(r.bw_mbs);
        }
        m.ok = !a.empty();
        m.conn_rate = med(a);
        m.conn_p50 = med(b);
        m.conn_p99 = med(c);
        m.setup_p50 = med(sa);
        m.setup_p99 = med(sb);
        m.lat_us = med(d);
        m.bw_mbs = med(e);
        m.burst_rate = med(ba);
        m.burst_p50 = med(bb);
        m.burst_p99 = med(bc);
        res.push_back(m);
    }
    printf("\nmedian of %d round(s) (conns = total over the rounds):\n", rounds);
    printf(hdr, "provider", "conns", "conn/s", "p50 conn (us)", "p99 conn (us)", "lat 8B (us)",
           "bw 64K (MB/s)");
    for (const auto& r : res)
        printf(row, r.prov.c_str(), r.conns, r.conn_rate, r.conn_p50, r.conn_p99, r.lat_us,
               r.bw_mbs, r.ok ? "" : "  (FAILED)");
    for (const auto& r : res)
        printf("%-8s setup (fi_endpoint to FI_CONNECTED): p50 %.0f us, p99 %.0f us\n",
               r.prov.c_str(), r.setup_p50, r.setup_p99);
    if (g_burst > 0)
        for (const auto& r : res)
            printf("%-8s burst of %d: %.1f conn/s, connect p50 %.0f us, p99 %.0f us\n",
                   r.prov.c_str(), g_burst, r.burst_rate, r.burst_p50, r.burst_p99);
    if (g_phases) {
        // medians over every cycle of every round, per phase
        // mean (which adds up to the cycle) and median per phase, over every
        // cycle of every round
        printf("\nconnection cycle phases, us over all cycles (-P): mean / median / p99\n%-32s", "phase");
        for (const auto& n : names) printf(" %23s", n.c_str());
        printf("\n");
        std::vector<double> total(names.size());
        for (int p = 0; p < kPhases; ++p) {
            printf("%-32s", phase_name[p]);
            for (size_t k = 0; k < names.size(); ++k) {
                std::vector<double> v;
                for (const auto& r : all_res[k]) v.insert(v.end(), r.phase_us[p].begin(), r.phase_us[p].end());
                double sum = 0;
                for (double x : v) sum += x;
                double mean = v.empty() ? 0 : sum / static_cast<double>(v.size());
                total[k] += mean;
                printf(" %7.0f / %6.0f / %6.0f", mean, med(v), pct(v, 99));
            }
            printf("\n");
        }
        printf("%-32s", "sum of the means");
        for (double t : total) printf(" %7.0f                ", t);
        printf("\n");
    }
    // the rdma_cm floor, when run: how close each provider comes to it, and
    // the most any provider could gain over the other
    for (const auto& f : res) {
        if (f.prov != "rdmacm" || !f.ok || f.conn_rate <= 0) continue;
        printf("\n");
        for (const auto& r : res)
            if (r.prov != "rdmacm" && r.ok && r.conn_rate > 0)
                printf("%s/rdmacm: conn/s %.2fx (rdmacm/%s %.2fx)\n", r.prov.c_str(),
                       r.conn_rate / f.conn_rate, r.prov.c_str(), f.conn_rate / r.conn_rate);
    }
    if (res.size() >= 2 && res[0].ok && res[1].ok && res[0].prov != "rdmacm" &&
        res[1].prov != "rdmacm") {
        printf("\n%s/%s: conn/s %.2fx, p50 connect time %.2fx, latency %.2fx, bandwidth %.2fx\n",
               res[0].prov.c_str(), res[1].prov.c_str(), res[0].conn_rate / res[1].conn_rate,
               res[0].conn_p50 / res[1].conn_p50, res[0].lat_us / res[1].lat_us,
               res[0].bw_mbs / res[1].bw_mbs);
        printf("%s/%s: setup (fi_endpoint to FI_CONNECTED) p50 %.2fx, p99 %.2fx\n",
               res[0].prov.c_str(), res[1].prov.c_str(), res[0].setup_p50 / res[1].setup_p50,
               res[0].setup_p99 / res[1].setup_p99);
        if (g_burst > 0 && res[1].burst_rate > 0)
            printf("%s/%s: burst of %d: conn/s %.2fx, p50 connect time %.2fx\n", res[0].prov.c_str(),
                   res[1].prov.c_str(), g_burst, res[0].burst_rate / res[1].burst_rate,
                   res[0].burst_p50 / res[1].burst_p50);
    }
    return all ? 0 : 1;
}
