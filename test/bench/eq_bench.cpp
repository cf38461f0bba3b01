// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// EQ benchmark (not a test): evd against libfabric's own EQs and a raw
// eventfd floor, in one run, side by side.
//
//   make bench && FI_PROVIDER_PATH=$PWD/.libs ./eq_bench [-n events] [-p round-trips] [-r reps]
//
// Every measurement is repeated -r times (default 5), interleaved across the
// EQs so background load hits them alike: write+read reports the best
// repetition, ping-pongs pool all round trips.
//
// Columns:
//   w+r/1, w+r/64     fi_eq_write + fi_eq_read, ns per event, batches of 1 / 64
//                     (FI_WAIT_NONE and FI_WAIT_FD EQs)
//   allocs/ev         malloc calls per event in the w+r/1 (FD) loop, counted by
//                     interposing malloc/calloc/realloc in this process
//   sread p50/p99     two threads ping-pong through two EQs with fi_eq_sread, us
//                     per round trip
//   fdwake p50/p99    same with fi_trywait + poll(FI_GETWAIT fd) + fi_eq_read
// "evd pollfd" uses FI_WAIT_POLLFD EQs (fdwake polls the bare eventfd).
// The raw floor row replaces the EQs with two eventfds (blocking read for
// sread, poll + read for fdwake).
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

// ------------------------------------------------------------------ malloc counting
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
}
static std::atomic<uint64_t> g_allocs{0};
extern "C" void* malloc(size_t n) {
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
extern "C" void* calloc(size_t a, size_t b) {
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, size_t n) {
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(p, n);
}
extern "C" void free(void* p) { __libc_free(p); }

namespace {

uint64_t now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

struct pct {
    double p50 = -1, p99 = -1;
};
std::vector<uint64_t>* g_sink_fwd();
pct percentiles(std::vector<uint64_t>& v) {
    if (std::vector<uint64_t>* sink = g_sink_fwd()) sink->insert(sink->end(), v.begin(), v.end());
    pct r;
    if (v.empty()) return r;
    std::sort(v.begin(), v.end());
    r.p50 = v[v.size() / 2] / 1000.0;
    r.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)] / 1000.0;
    return r;
}

struct row {
    std::string name;
    double wr1_none = -1, wr64_none = -1, wr1_fd = -1, wr64_fd = -1, allocs = -1;
    pct sread, fdwake;
    std::string note;
};

// ------------------------------------------------------------------ providers
struct fid_fabric* open_fabric(const char* prov, std::string* why) {
    if (!strcmp(prov, "evd")) {
        struct fi_fabric_attr a {};
        a.name = const_cast<char*>("evd");
        a.prov_name = const_cast<char*>("evd");
        a.api_version = FI_VERSION(1, 17);
        struct fid_fabric* fab = nullptr;
        int rc = fi_fabric(&a, &fab, nullptr);
        if (rc) *why = std::string("fi_fabric: ") + fi_strerror(-rc) + " (FI_PROVIDER_PATH?)";
        return rc ? nullptr : fab;
    }
    struct fi_info* hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup(prov);
    hints->ep_attr->type = !strcmp(prov, "udp") ? FI_EP_DGRAM : FI_EP_MSG;
    hints->caps = FI_MSG;
    hints->mode = ~0ULL;  // accept any mode bits: only the fabric is used
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY | FI_MR_ENDPOINT;  // what verbs asks for
    struct fi_info* info = nullptr;
    const char* node = !strcmp(prov, "verbs") ? nullptr : "127.0.0.1";
    int rc = fi_getinfo(FI_VERSION(1, 17), node, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (rc || !info) {
        *why = std::string("fi_getinfo: ") + fi_strerror(-rc);
        return nullptr;
    }
    struct fid_fabric* fab = nullptr;
    rc = fi_fabric(info->fabric_attr, &fab, nullptr);
    fi_freeinfo(info);
    if (rc) *why = std::string("fi_fabric: ") + fi_strerror(-rc);
    return rc ? nullptr : fab;
}

struct fid_eq* open_eq(struct fid_fabric* fab, enum fi_wait_obj w) {
    struct fi_eq_attr a {};
    a.size = 1024;
    a.flags = FI_WRITE;
    a.wait_obj = w;
    struct fid_eq* q = nullptr;
    return fi_eq_open(fab, &a, &q, nullptr) ? nullptr : q;
}

// ns per event of write + read in batches
double write_read(struct fid_eq* q, int batch, long events, uint64_t* allocs) {
    struct fi_eq_entry e {};
    e.fid = &q->fid;
    uint32_t ev;
    struct fi_eq_entry out;
    // warm up
    for (int i = 0; i < 1000; i++) {
        if (fi_eq_write(q, FI_NOTIFY, &e, sizeof e, 0) != sizeof e) return -1;
        if (fi_eq_read(q, &ev, &out, sizeof out, 0) != sizeof out) return -1;
    }
    long rounds = events / batch;
    uint64_t a0 = g_allocs.load();
    uint64_t t0 = now_ns();
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < batch; i++) {
            e.data = uint64_t(i);
            if (fi_eq_write(q, FI_NOTIFY, &e, sizeof e, 0) != sizeof e) return -1;
        }
        for (int i = 0; i < batch; i++)
            if (fi_eq_read(q, &ev, &out, sizeof out, 0) != sizeof out) return -1;
    }
    uint64_t t1 = now_ns();
    if (allocs) *allocs = g_allocs.load() - a0;
    return double(t1 - t0) / double(rounds * batch);
}

// Ping-pong between two threads through EQs q1 (main -> peer) and q2 (back).
// fdwake: block with fi_trywait + poll on the FI_GETWAIT fd instead of sread.
pct pingpong(struct fid_fabric* fab, struct fid_eq* q1, struct fid_eq* q2, int samples,
             bool fdwake) {
    int fd1 = -1, fd2 = -1;
    auto getfd = [](struct fid_eq* q, int* fd) {
        enum fi_wait_obj w = FI_WAIT_NONE;
        if (fi_control(&q->fid, FI_GETWAITOBJ, &w)) return false;
        if (w != FI_WAIT_POLLFD) return fi_control(&q->fid, FI_GETWAIT, fd) == 0;
        struct pollfd p[8];
        struct fi_wait_pollfd pf {};
        pf.fd = p;
        pf.nfds = 8;
        if (fi_control(&q->fid, FI_GETWAIT, &pf) || pf.nfds != 1) return false;
        *fd = p[0].fd;
        return true;
    };
    if (fdwake && (!getfd(q1, &fd1) || !getfd(q2, &fd2))) return {};
    auto recv = [&](struct fid_eq* q, int fd) -> bool {
        uint32_t ev;
        struct fi_eq_entry out;
        if (!fdwake) {
            for (;;) {
                ssize_t r = fi_eq_sread(q, &ev, &out, sizeof out, 5000, 0);
                if (r == sizeof out) return true;
                if (r != -FI_EAGAIN) return false;
            }
        }
        for (;;) {
            if (fi_eq_read(q, &ev, &out, sizeof out, 0) == sizeof out) return true;
            struct fid* f = &q->fid;
            if (fi_trywait(fab, &f, 1) == FI_SUCCESS) {
                struct pollfd p = {fd, POLLIN, 0};
                if (poll(&p, 1, 5000) <= 0) return false;
            }
        }
    };
    struct fi_eq_entry e {};
    std::atomic<bool> ok{true};
    const int warm = 200;
    std::thread peer([&] {
        for (int i = 0; i < samples + warm; i++) {
            if (!recv(q1, fd1)) {
                ok = false;
                return;
            }
            if (fi_eq_write(q2, FI_NOTIFY, &e, sizeof e, 0) != sizeof e) {
                ok = false;
                return;
            }
        }
    });
    std::vector<uint64_t> rt;
    rt.reserve(samples);
    for (int i = 0; i < samples + warm && ok; i++) {
        uint64_t t0 = now_ns();
        if (fi_eq_write(q1, FI_NOTIFY, &e, sizeof e, 0) != sizeof e || !recv(q2, fd2)) {
            ok = false;
            break;
        }
        if (i >= warm) rt.push_back(now_ns() - t0);
    }
    peer.join();
    if (!ok) return {};
    return percentiles(rt);
}

// Raw floor: the same ping-pong over two eventfds.
pct raw_pingpong(int samples, bool use_poll) {
    int a = eventfd(0, 0), b = eventfd(0, 0);
    auto wait = [&](int fd) {
        uint64_t v;
        if (use_poll) {
            struct pollfd p = {fd, POLLIN, 0};
            (void)poll(&p, 1, -1);
        }
        return read(fd, &v, sizeof v) == sizeof v;
    };
    const int warm = 200;
    std::thread peer([&] {
        uint64_t one = 1;
        for (int i = 0; i < samples + warm; i++) {
            wait(a);
            (void)!write(b, &one, sizeof one);
        }
    });
    std::vector<uint64_t> rt;
    uint64_t one = 1;
    for (int i = 0; i < samples + warm; i++) {
        uint64_t t0 = now_ns();
        (void)!write(a, &one, sizeof one);
        wait(b);
        if (i >= warm) rt.push_back(now_ns() - t0);
    }
    peer.join();
    close(a);
    close(b);
    return percentiles(rt);
}

// One column set: a provider's fabric and the wait object of its "fd" EQs.
struct target {
    row r;
    struct fid_fabric* fab = nullptr;
    enum fi_wait_obj fdwait = FI_WAIT_FD;
    bool raw = false;
    std::vector<uint64_t> sread_ns, fdwake_ns;
};

void keep_min(double* best, double v) {
    if (v >= 0 && (*best < 0 || v < *best)) *best = v;
}

// Ping-pong runs append their raw samples (ns) here when set.
std::vector<uint64_t>* g_sink = nullptr;
std::vector<uint64_t>* g_sink_fwd() { return g_sink; }

// One repetition of every measurement for one target. w+r values keep the
// best repetition (the least disturbed by other load); ping-pong samples of
// all repetitions are pooled.
void run_once(target& t, long events, int samples) {
    if (t.raw) {
        g_sink = &t.sread_ns;
        raw_pingpong(samples, false);
        g_sink = &t.fdwake_ns;
        raw_pingpong(samples, true);
        g_sink = nullptr;
        return;
    }
    if (t.fdwait == FI_WAIT_FD) {
        if (struct fid_eq* q = open_eq(t.fab, FI_WAIT_NONE)) {
            keep_min(&t.r.wr1_none, write_read(q, 1, events, nullptr));
            keep_min(&t.r.wr64_none, write_read(q, 64, events, nullptr));
            fi_close(&q->fid);
        }
    }
    if (struct fid_eq* q = open_eq(t.fab, t.fdwait)) {
        uint64_t allocs = 0;
        keep_min(&t.r.wr1_fd, write_read(q, 1, events, &allocs));
        t.r.allocs = std::max(t.r.allocs, double(allocs) / double(events));
        keep_min(&t.r.wr64_fd, write_read(q, 64, events, nullptr));
        fi_close(&q->fid);
    }
    struct fid_eq* q1 = open_eq(t.fab, t.fdwait);
    struct fid_eq* q2 = open_eq(t.fab, t.fdwait);
    if (q1 && q2) {
        g_sink = &t.sread_ns;
        pingpong(t.fab, q1, q2, samples, false);
        g_sink = &t.fdwake_ns;
        pingpong(t.fab, q1, q2, samples, true);
        g_sink = nullptr;
    }
    if (q1) fi_close(&q1->fid);
    if (q2) fi_close(&q2->fid);
}

void print_cell(double v, const char* fmt = "%10.1f") {
    if (v < 0)
        printf("%10s", "n/a");
    else
        printf(fmt, v);
}

}  // namespace

int main(int argc, char** argv) {
    long events = 1000000;
    int samples = 20000;
    int reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) events = atol(argv[i + 1]);
        if (!strcmp(argv[i], "-p")) samples = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-r")) reps = std::max(1, atoi(argv[i + 1]));
    }
    if (!getenv("FI_PROVIDER_PATH"))
        fprintf(stderr, "eq_bench: set FI_PROVIDER_PATH to the directory holding libevd-fi.so\n");
    printf("eq_bench: %d repetitions (interleaved) of %ld events per write+read run and %d "
           "ping-pong round trips; %u CPUs online\n",
           reps, events, samples / reps, std::thread::hardware_concurrency());
    printf("w+r: best repetition; ping-pong: p50/p99 of all round trips pooled\n");

    std::vector<target> ts;
    for (const char* p : {"evd", "evd pollfd", "udp", "tcp", "verbs"}) {
        target t;
        t.r.name = p;
        bool pollfd = !strcmp(p, "evd pollfd");
        std::string why;
        t.fab = open_fabric(pollfd ? "evd" : p, &why);
        if (!t.fab) t.r.note = "skipped: " + why;
        if (pollfd) t.fdwait = FI_WAIT_POLLFD;
        ts.push_back(std::move(t));
    }
    target raw;
    raw.r.name = "raw eventfd";
    raw.raw = true;
    ts.push_back(std::move(raw));

    for (int rep = 0; rep < reps; rep++)
        for (auto& t : ts)
            if (t.fab || t.raw) run_once(t, events, samples / reps);

    printf("\n%-12s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "EQ", "w+r/1", "w+r/64",
           "w+r/1", "w+r/64", "allocs/ev", "sread", "sread", "fdwake", "fdwake");
    printf("%-12s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "", "none ns", "none ns",
           "fd ns", "fd ns", "(fd, b=1)", "p50 us", "p99 us", "p50 us", "p99 us");
    for (auto& t : ts) {
        row& r = t.r;
        r.sread = percentiles(t.sread_ns);
        r.fdwake = percentiles(t.fdwake_ns);
        printf("%-12s ", r.name.c_str());
        print_cell(r.wr1_none);
        printf(" ");
        print_cell(r.wr64_none);
        printf(" ");
        print_cell(r.wr1_fd);
        printf(" ");
        print_cell(r.wr64_fd);
        printf(" ");
        print_cell(r.allocs, "%10.2f");
        printf(" ");
        print_cell(r.sread.p50, "%10.2f");
        printf(" ");
        print_cell(r.sread.p99, "%10.2f");
        printf(" ");
        print_cell(r.fdwake.p50, "%10.2f");
        printf(" ");
        print_cell(r.fdwake.p99, "%10.2f");
        if (!r.note.empty()) printf("  %s", r.note.c_str());
        printf("\n");
    }
    for (auto& t : ts)
        if (t.fab) fi_close(&t.fab->fid);
    return 0;
}
