// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evd_rdm_flap: an RDM ping-pong over a utility provider (default
// "evd;ofi_rxm") between an endpoint on rxe0 (A, EVD_VM_ADDR0) and one on
// rxe1 (B, EVD_VM_ADDR1) in one process, across a flap of veth0 (the link
// under rxe0). Both sides send with fi_inject and fi_send in turn; every
// payload is checked. It measures how long the application takes to see the
// failure and how long after the link returns round trips work again.
//
//   evd_rdm_flap [-p PROV] [-d DOWN_S] [-w WARMUP_S] [-r RECOVER_S] [--report] [--no-error]
//   evd_rdm_flap --soak FLAPS [-p PROV] [-d DOWN_S] [-u UP_S] [-r RECOVER_S]
//
// Prints one "# ..." summary line and "ok - ..." / "not ok - ..." (unless
// --report, which only measures: for providers evd is compared with). Passes
// when the process survives, no payload is wrong, no completion carries a
// context the program did not give, and round trips resume within RECOVER_S
// (default 10) seconds of the link returning. --no-error (a resumable
// connection, FI_EVD_RESUME_TIMEOUT): passes only when, besides, no error at
// all reached the application: no CQ error, no failed post, no EQ record.
//
// --soak FLAPS (resumable connections, issue 35's soak): FLAPS flaps of
// DOWN_S seconds (default 4), UP_S seconds (default 6) apart, under a
// windowed ping-pong: A keeps up to 16 pings out (so it posts while the link
// is down, where a request on rxe fails at once), none ever sent again, so
// on a connection that loses nothing B sees every ping once and in order
// and A every pong. Passes when no error reached the application (no CQ error, no
// failed post), no ping or pong was lost, duplicated or out of order, no
// payload or context was wrong, every send completed once, round trips came
// back within RECOVER_S of every link up, and the process's file
// descriptors and resident memory stayed flat from the end of the first
// flap to the end (fds equal, RSS within 1 MiB).
#include <dirent.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/vm_link.h"

namespace {

using clk = std::chrono::steady_clock;

using rxetest::env_or;
using rxetest::secs;

constexpr size_t kMsg = 64;
constexpr int kRecvs = 8;
constexpr int kSendCtx = 256;

struct msg {
    uint64_t seq;
    uint8_t kind;  // 1 ping, 2 pong
    uint8_t body[kMsg - 9];
};

void fill(msg& m, uint64_t seq, uint8_t kind) {
    m.seq = seq;
    m.kind = kind;
    for (size_t i = 0; i < sizeof m.body; ++i) m.body[i] = static_cast<uint8_t>(seq * 31 + i * 7 + kind);
}
bool good(const msg& m) {
    msg ref;
    fill(ref, m.seq, m.kind);
    return (m.kind == 1 || m.kind == 2) && std::memcmp(ref.body, m.body, sizeof m.body) == 0;
}

struct stats {
    uint64_t round_trips = 0, bad_payloads = 0, foreign_ctx = 0, null_ctx = 0;
    uint64_t cq_errors = 0, post_errors = 0;
    uint64_t before = 0, during = 0, after = 0;
};

struct side {
    const char* name;
    struct fi_info* info = nullptr;
    struct fid_fabric* fab = nullptr;
    struct fid_domain* dom = nullptr;
    struct fid_av* av = nullptr;
    struct fid_cq* cq = nullptr;
    struct fid_ep* ep = nullptr;
    fi_addr_t peer = FI_ADDR_UNSPEC;
    msg rbuf[kRecvs];
    struct fi_context rctx[kRecvs];
    msg sbuf[kSendCtx];
    struct fi_context sctx[kSendCtx];
    bool sbusy[kSendCtx] = {};
    unsigned next_send = 0;
    unsigned sends = 0;  // alternates inject / send
};

int fail(const char* what, int ret) {
    std::printf("not ok - evd_rdm_flap: %s: %s (%d)\n", what, fi_strerror(-ret), ret);
    return 1;
}

int open_side(side& s, const char* prov, const char* addr) {
    struct fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_MSG;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->fabric_attr->prov_name = strdup(prov);
    h->addr_format = FI_SOCKADDR_IN;
    h->tx_attr->size = 256;
    h->rx_attr->size = 256;
    int ret = fi_getinfo(FI_VERSION(1, 17), addr, "0", FI_SOURCE, h, &s.info);
    fi_freeinfo(h);
    if (ret) return fail("fi_getinfo", ret);
    if ((ret = fi_fabric(s.info->fabric_attr, &s.fab, nullptr))) return fail("fi_fabric", ret);
    if ((ret = fi_domain(s.fab, s.info, &s.dom, nullptr))) return fail("fi_domain", ret);
    struct fi_av_attr aa = {};
    aa.type = FI_AV_TABLE;
    if ((ret = fi_av_open(s.dom, &aa, &s.av, nullptr))) return fail("fi_av_open", ret);
    struct fi_cq_attr ca = {};
    ca.format = FI_CQ_FORMAT_MSG;
    ca.size = 1024;
    if ((ret = fi_cq_open(s.dom, &ca, &s.cq, nullptr))) return fail("fi_cq_open", ret);
    if ((ret = fi_endpoint(s.dom, s.info, &s.ep, nullptr))) return fail("fi_endpoint", ret);
    if ((ret = fi_ep_bind(s.ep, &s.av->fid, 0))) return fail("fi_ep_bind(av)", ret);
    if ((ret = fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV))) return fail("fi_ep_bind(cq)", ret);
    if ((ret = fi_enable(s.ep))) return fail("fi_enable", ret);
    return 0;
}

int introduce(side& a, side& b) {
    char name[128];
    size_t len = sizeof name;
    int ret = fi_getname(&b.ep->fid, name, &len);
    if (ret) return fail("fi_getname", ret);
    ret = fi_av_insert(a.av, name, 1, &a.peer, 0, nullptr);
    if (ret != 1) return fail("fi_av_insert", ret < 0 ? ret : -FI_EINVAL);
    return 0;
}

void post_recv(side& s, int i, stats& st) {
    for (;;) {
        ssize_t r = fi_recv(s.ep, &s.rbuf[i], sizeof(msg), nullptr, FI_ADDR_UNSPEC, &s.rctx[i]);
        if (r == 0) return;
        if (r != -FI_EAGAIN) {
            st.post_errors++;
            return;
        }
        struct fi_cq_msg_entry e;
        (void)fi_cq_read(s.cq, &e, 0);  // progress
    }
}

// Sends one message (inject and send in turn). False when it was not posted.
bool send_one(side& s, uint64_t seq, uint8_t kind, stats& st) {
    bool inject = (s.sends++ & 1) == 0;
    msg m;
    fill(m, seq, kind);
    ssize_t r;
    if (inject) {
        r = fi_inject(s.ep, &m, sizeof m, s.peer);
    } else {
        unsigned i = s.next_send;
        if (s.sbusy[i]) return false;  // the ring is full of sends still out
        s.next_send = (i + 1) % kSendCtx;
        s.sbuf[i] = m;
        r = fi_send(s.ep, &s.sbuf[i], sizeof m, nullptr, s.peer, &s.sctx[i]);
        if (r == 0) s.sbusy[i] = true;
    }
    if (r && r != -FI_EAGAIN) st.post_errors++;
    return r == 0;
}

// Which of s's contexts ctx is: 0..kRecvs-1 receives, kRecvs + i sends, -1 foreign.
int which(const side& s, const void* ctx) {
    for (int i = 0; i < kRecvs; ++i)
        if (ctx == &s.rctx[i]) return i;
    for (int i = 0; i < kSendCtx; ++i)
        if (ctx == &s.sctx[i]) return kRecvs + i;
    return -1;
}

// A on rxe0 and B on rxe1, each knowing the other, their receives posted.
int open_pair(side& A, side& B, const char* prov, stats& st) {
    A.name = "A";
    B.name = "B";
    if (open_side(A, prov, env_or("EVD_VM_ADDR0", "192.0.2.1")) ||
        open_side(B, prov, env_or("EVD_VM_ADDR1", "192.0.2.2")) || introduce(A, B) ||
        introduce(B, A))
        return 1;
    for (int i = 0; i < kRecvs; ++i) {
        post_recv(A, i, st);
        post_recv(B, i, st);
    }
    return 0;
}

void close_side(side& s) {
    if (s.ep) fi_close(&s.ep->fid);
    if (s.cq) fi_close(&s.cq->fid);
    if (s.av) fi_close(&s.av->fid);
    if (s.dom) fi_close(&s.dom->fid);
    if (s.fab) fi_close(&s.fab->fid);
    if (s.info) fi_freeinfo(s.info);
}

// One read of s's CQ: an error entry goes to on_error(entry, which) (which:
// the context's index, -1 foreign, -2 none); a send's completion to
// on_send(i), after its slot is freed; a receive is reposted, its payload
// checked (a wrong one counted) and a good one given to on_msg(m). Returns
// whether anything was read.
template <class OnError, class OnSend, class OnMsg>
bool read_cq(side& s, stats& st, OnError&& on_error, OnSend&& on_send, OnMsg&& on_msg) {
    struct fi_cq_msg_entry e[8];
    ssize_t n = fi_cq_read(s.cq, e, 8);
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {};
        if (fi_cq_readerr(s.cq, &err, 0) == 1) {
            st.cq_errors++;
            int w = err.op_context ? which(s, err.op_context) : -2;
            if (w == -1) st.foreign_ctx++;
            if (w == -2) st.null_ctx++;
            on_error(w);
        }
        return true;
    }
    for (ssize_t k = 0; k < n; ++k) {
        int w = which(s, e[k].op_context);
        if (w < 0) {
            st.foreign_ctx++;
            continue;
        }
        if (w >= kRecvs) {
            on_send(w - kRecvs);
            s.sbusy[w - kRecvs] = false;
            continue;
        }
        msg m = s.rbuf[w];
        post_recv(s, w, st);
        if (e[k].len != sizeof(msg) || !good(m)) {
            st.bad_payloads++;
            continue;
        }
        on_msg(m);
    }
    return n > 0;
}

// The process's open file descriptors and resident KiB.
int fd_count() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (struct dirent* e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
    }
    return n - 1;  // the directory's own
}
long rss_kib() {
    long pages = 0, res = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
        std::fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

// --soak (see the top): A pings, B pongs, across FLAPS flaps.
int soak(const char* prov, int flaps, double down_s, double up_s, double recover_s) {
    side A, B;
    stats st;
    if (open_pair(A, B, prov, st)) return 1;
    uint64_t lost = 0, dups = 0, sends_done = 0, sends_posted = 0, pending_pongs = 0;
    uint64_t b_last = 0, a_last = 0;  // the last ping B saw, the last pong A saw
    std::vector<double> back;         // per flap: s from link up to the next round trip
    std::atomic<int> flap_no{0};      // flaps begun
    std::atomic<bool> down{false}, over{false};
    std::atomic<int64_t> up_ns{0};
    const auto t0 = clk::now();
    std::thread flapper([&] {
        for (int i = 0; i < flaps; ++i) {
            std::this_thread::sleep_for(std::chrono::duration<double>(up_s));
            // down from before the command to after the link is back up:
            // under emulation `ip link` itself can take seconds
            down.store(true);
            flap_no.store(i + 1);
            if (rxetest::link_down()) std::printf("# link down failed\n");
            std::this_thread::sleep_for(std::chrono::duration<double>(down_s));
            if (rxetest::link_set_up()) std::printf("# link up failed\n");
            up_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            clk::now().time_since_epoch()).count());
            down.store(false);
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(up_s));
        over.store(true);
    });
    int fds0 = -1, seen_flap = 0;
    long rss0 = 0;
    constexpr uint64_t kWindow = 16;  // pings out at once
    bool measured = true, stalled = false;
    uint64_t seq = 0;
    auto last_rt = clk::now();
    const struct timespec pause = {0, 100000};
    while (!over.load()) {
        bool busy = false;
        while (seq - a_last < kWindow && send_one(A, seq + 1, 1, st)) {
            ++seq;
            busy = true;
            if ((A.sends & 1) == 0) ++sends_posted;  // the send of the pair (inject has no completion)
        }
        for (side* s : {&A, &B}) {
            auto sent = [&](int i) {
                if (!s->sbusy[i]) dups++;  // a send completed twice
                ++sends_done;
            };
            busy |= read_cq(*s, st, [](int) {}, sent, [&](const msg& m) {
                uint64_t& last = s == &B ? b_last : a_last;
                if (m.seq <= last) dups++;
                else lost += m.seq - last - 1;
                last = std::max(last, m.seq);
                if (s == &B && m.kind == 1) {
                    ++pending_pongs;
                } else if (s == &A && m.kind == 2) {
                    st.round_trips++;
                    last_rt = clk::now();
                    if (!measured) {
                        const auto up = clk::time_point(std::chrono::nanoseconds(up_ns.load()));
                        back.push_back(secs(up, last_rt));
                        measured = true;
                    }
                }
            });
        }
        // B answers every ping it got, in order (a pong it cannot post yet
        // waits for the next turn: nothing is sent twice)
        while (pending_pongs && send_one(B, b_last - pending_pongs + 1, 2, st)) {
            --pending_pongs;
            if ((B.sends & 1) == 0) ++sends_posted;
            busy = true;
        }
        const int f = flap_no.load();
        if (f != seen_flap && !down.load()) {  // flap f is over: its recovery is timed
            seen_flap = f;
            measured = false;
            if (f == 1) {
                fds0 = fd_count();
                rss0 = rss_kib();
            }
        }
        // once traffic flowed, it must flow whenever the link has been back
        // for RECOVER_S: timed from the link's return, not from the last
        // round trip
        if (!down.load() && st.round_trips > 0) {
            const int64_t u = up_ns.load();
            const auto since = u ? clk::time_point(std::chrono::nanoseconds(u)) : t0;
            const auto now = clk::now();
            if (secs(since, now) > recover_s && secs(std::max(since, last_rt), now) > recover_s)
                stalled = true;
        }
        if (!busy) nanosleep(&pause, nullptr);
    }
    flapper.join();
    const int fds1 = fd_count();
    const long rss1 = rss_kib();
    // the sends still out complete by the end: read them
    const auto drain_end = clk::now() + std::chrono::seconds(5);
    while (sends_done < sends_posted && clk::now() < drain_end) {
        for (side* s : {&A, &B})
            read_cq(*s, st, [](int) {}, [&](int i) {
                if (!s->sbusy[i]) dups++;
                ++sends_done;
            }, [](const msg&) {});
    }
    double worst = 0;
    std::string backs;
    for (double b : back) {
        worst = std::max(worst, b);
        char t[16];
        std::snprintf(t, sizeof t, "%s%.1f", backs.empty() ? "" : " ", b);
        backs += t;
    }
    std::printf("# %s soak: %d flaps of %.0f s, %.0f s apart, %.0f s: %llu round trips; B got %llu "
                "pings, A %llu pongs; lost %llu, duplicated or out of order %llu; sends %llu "
                "posted, %llu completed; cq errors %llu, post errors %llu, bad payloads %llu, "
                "foreign contexts %llu; round trips again after each link up (s): %s;%s fds %d -> "
                "%d, RSS %ld -> %ld KiB\n",
                prov, flaps, down_s, up_s, secs(t0, clk::now()),
                (unsigned long long)st.round_trips, (unsigned long long)b_last,
                (unsigned long long)a_last, (unsigned long long)lost, (unsigned long long)dups,
                (unsigned long long)sends_posted, (unsigned long long)sends_done,
                (unsigned long long)st.cq_errors, (unsigned long long)st.post_errors,
                (unsigned long long)st.bad_payloads, (unsigned long long)st.foreign_ctx,
                backs.empty() ? "none" : backs.c_str(),
                stalled ? " STALLED (no round trip for RECOVER_S with the link up);" : "", fds0,
                fds1, rss0, rss1);
    const bool ok = st.round_trips > 0 && lost == 0 && dups == 0 && st.cq_errors == 0 &&
                    st.post_errors == 0 && st.bad_payloads == 0 && st.foreign_ctx == 0 &&
                    sends_done == sends_posted && static_cast<int>(back.size()) == flaps &&
                    worst <= recover_s && !stalled && fds0 == fds1 && rss1 - rss0 <= 1024;
    for (side* s : {&A, &B}) close_side(*s);
    std::printf("%s - evd_rdm_flap %s: soak of %d flaps: every ping and pong once and in order, "
                "every send completed once, no error reached the application, round trips back "
                "within %.0f s of each link up, fds and RSS flat\n",
                ok ? "ok" : "not ok", prov, flaps, recover_s);
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const char* prov = "evd;ofi_rxm";
    double down_s = 4, warm_s = 3, recover_s = 10, up_s = 6;
    bool report = false, no_error = false;
    int soak_flaps = 0;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-p" && i + 1 < argc) prov = argv[++i];
        else if (a == "--soak" && i + 1 < argc) soak_flaps = std::atoi(argv[++i]);
        else if (a == "-u" && i + 1 < argc) up_s = std::atof(argv[++i]);
        else if (a == "-d" && i + 1 < argc) down_s = std::atof(argv[++i]);
        else if (a == "-w" && i + 1 < argc) warm_s = std::atof(argv[++i]);
        else if (a == "-r" && i + 1 < argc) recover_s = std::atof(argv[++i]);
        else if (a == "--report") report = true;
        else if (a == "--no-error") no_error = true;
        else {
            std::fprintf(stderr, "usage: evd_rdm_flap [-p PROV] [-d DOWN_S] [-w WARMUP_S] [-r RECOVER_S] [--report] [--no-error]\n"
                                 "       evd_rdm_flap --soak FLAPS [-p PROV] [-d DOWN_S] [-u UP_S] [-r RECOVER_S]\n");
            return 2;
        }
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (soak_flaps > 0) return soak(prov, soak_flaps, down_s, up_s, recover_s);
    side A, B;
    stats st;
    if (open_pair(A, B, prov, st)) return report ? 0 : 1;

    const auto t0 = clk::now();
    std::atomic<int> phase{0};  // 0 before, 1 link down, 2 link back
    clk::time_point t_down{}, t_up{};
    std::thread flapper = rxetest::start_flap(warm_s, down_s, phase, t_down, t_up);

    uint64_t seq = 0;
    bool waiting = false;
    clk::time_point sent_at = t0, first_err{}, recovered{}, last_rt = t0;
    double gap = 0, gap_from = 0;  // longest stretch without a round trip, and its start
    // Judged from when the link really came back: under emulation `ip link`
    // itself has been seen to take 26 s to return. 60 s more at most.
    const double limit = warm_s + down_s + recover_s + 60;
    for (;;) {
        auto now = clk::now();
        double t = secs(t0, now);
        if (t > limit) break;
        if (phase.load() == 2 && secs(t_up, now) > recover_s + 3) break;
        if (phase.load() == 2 && recovered != clk::time_point{} && secs(recovered, now) > 2) break;
        // A pings: a new ping when the last was answered or seems lost
        if (!waiting || secs(sent_at, now) > 0.2) {
            if (send_one(A, ++seq, 1, st)) {
                waiting = true;
                sent_at = now;
            } else {
                waiting = false;
            }
        }
        for (side* s : {&A, &B}) {
            auto failed = [&](int w) {
                if (first_err == clk::time_point{} && phase.load() >= 1) first_err = clk::now();
                if (w >= 0 && w < kRecvs) post_recv(*s, w, st);
                if (w >= kRecvs) s->sbusy[w - kRecvs] = false;
            };
            read_cq(*s, st, failed, [](int) {}, [&](const msg& m) {
                if (s == &B && m.kind == 1) {
                    send_one(B, m.seq, 2, st);  // pong
                } else if (s == &A && m.kind == 2 && waiting && m.seq == seq) {
                    waiting = false;
                    st.round_trips++;
                    auto rt = clk::now();
                    if (secs(last_rt, rt) > gap) {
                        gap = secs(last_rt, rt);
                        gap_from = secs(t0, last_rt);
                    }
                    last_rt = rt;
                    int ph = phase.load();
                    if (ph == 0) st.before++;
                    else if (ph == 1) st.during++;
                    else {
                        st.after++;
                        if (recovered == clk::time_point{}) recovered = clk::now();
                    }
                }
            });
        }
        if (first_err == clk::time_point{} && phase.load() >= 1 && st.post_errors)
            first_err = clk::now();
    }
    if (secs(last_rt, clk::now()) > gap) {  // the stretch that never ended
        gap = secs(last_rt, clk::now());
        gap_from = secs(t0, last_rt);
    }
    flapper.join();

    char err_at[32] = "never", rec_at[32] = "never";
    if (first_err != clk::time_point{}) std::snprintf(err_at, sizeof err_at, "%.2f s", secs(t_down, first_err));
    if (recovered != clk::time_point{}) std::snprintf(rec_at, sizeof rec_at, "%.2f s", secs(t_up, recovered));
    std::printf("# %s: %.0f s flap: round trips %llu before / %llu down / %llu after; first error "
                "%s after link down; round trips again %s after link up; cq errors %llu, post "
                "errors %llu, bad payloads %llu, foreign contexts %llu, NULL contexts %llu; "
                "longest stretch without a round trip %.2f s from %.2f s (link down at %.2f s, "
                "up at %.2f s)\n",
                prov, down_s, (unsigned long long)st.before, (unsigned long long)st.during,
                (unsigned long long)st.after, err_at, rec_at, (unsigned long long)st.cq_errors,
                (unsigned long long)st.post_errors, (unsigned long long)st.bad_payloads,
                (unsigned long long)st.foreign_ctx, (unsigned long long)st.null_ctx, gap, gap_from,
                secs(t0, t_down), secs(t0, t_up));
    bool ok = st.before > 0 && st.bad_payloads == 0 && st.foreign_ctx == 0 && st.null_ctx == 0 &&
              recovered != clk::time_point{} && secs(t_up, recovered) <= recover_s;
    if (no_error)
        ok = ok && st.cq_errors == 0 && st.post_errors == 0 && first_err == clk::time_point{};
    for (side* s : {&A, &B}) close_side(*s);
    if (report) return 0;
    std::printf("%s - evd_rdm_flap %s: round trips resume within %.0f s of the link returning, "
                "every payload checked%s\n", ok ? "ok" : "not ok", prov, recover_s,
                no_error ? ", no error reached the application" : "");
    return ok ? 0 : 1;
}
