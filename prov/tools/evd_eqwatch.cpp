// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evd_eqwatch: prints every EQ record of every evd domain as it arrives, the
// way ibv_asyncwatch prints verbs async events, but showing what evd makes of
// them (event, fid, err, prov_errno, fi_eq_strerror).
//
//   evd_eqwatch [-d DEVICE] [-t SECONDS] [-n COUNT] [-q]
//
// Opens one domain per evd device with its own EQ bound with
// FI_EVD_NOTIFY_ASYNC (so notifications such as PORT_ACTIVE show too), waits
// on the EQs' wait fds with epoll, and exits on SIGINT/SIGTERM, after SECONDS
// or after COUNT records. Exit status: 0, or 1 when nothing could be watched.
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_evd.h>

#include <signal.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

uint64_t mono_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string wall_time() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    char buf[64];
    size_t n = strftime(buf, sizeof buf, "%H:%M:%S", &tm);
    snprintf(buf + n, sizeof buf - n, ".%06ld", ts.tv_nsec / 1000);
    return buf;
}

struct watched {
    std::string name;
    struct fid_domain* domain = nullptr;
    struct fid_eq* eq = nullptr;
    int fd = -1;
    struct fi_evd_async_ops* ops = nullptr;
};

const char* port_state_name(int s) {
    switch (s) {
        case 1: return "DOWN";
        case 2: return "INIT";
        case 3: return "ARMED";
        case 4: return "ACTIVE";
        case 5: return "ACTIVE_DEFER";
        default: return "UNKNOWN";
    }
}

// "IBV_EVENT_PORT_ERR" out of "... (IBV_EVENT_PORT_ERR)".
std::string event_name(const char* sentence, int type) {
    if (sentence) {
        const char* p = strrchr(sentence, '(');
        const char* q = p ? strchr(p, ')') : nullptr;
        if (p && q && strncmp(p + 1, "IBV_EVENT_", 10) == 0) return std::string(p + 1, q);
    }
    return "event " + std::to_string(type);
}

// The sentence evd prints for a notification: fi_eq_strerror on an err_data
// rebuilt from the FI_NOTIFY data (same table as error records).
std::string notify_sentence(const watched& w, uint64_t data, char* buf, size_t len) {
    struct fi_evd_async_err d;
    memset(&d, 0, sizeof d);
    d.magic = FI_EVD_ASYNC_MAGIC;
    d.version = FI_EVD_ASYNC_VERSION;
    d.size = sizeof d;
    d.event_type = FI_EVD_NOTIFY_EVENT(data);
    snprintf(d.device, sizeof d.device, "%s", w.name.c_str());
    d.port_num = FI_EVD_NOTIFY_PORT(data);
    d.qp_num = d.srq_handle = d.wq_num = d.cq_handle = FI_EVD_NOTIFY_NUM(data);
    const char* s = fi_eq_strerror(w.eq, d.event_type, &d, buf, len);
    return s ? s : "";
}

std::string fid_name(const watched& w, const struct fid* f) {
    char buf[64];
    if (f == &w.domain->fid) {
        snprintf(buf, sizeof buf, "domain %s", w.name.c_str());
        return buf;
    }
    snprintf(buf, sizeof buf, "fid %p", static_cast<const void*>(f));
    return buf;
}

void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [-d DEVICE] [-t SECONDS] [-n COUNT] [-q]\n"
            "  prints every EQ record of every evd domain (async events: port, device, ...)\n"
            "  -d DEVICE  watch only this device (e.g. rxe0); repeatable\n"
            "  -t SECONDS exit after SECONDS\n"
            "  -n COUNT   exit after COUNT records\n"
            "  -q         no banner and no counters at exit\n",
            prog);
}

// Reads everything pending on w's EQ; returns the number of records printed.
long drain(watched& w) {
    long n = 0;
    for (;;) {
        uint32_t event = 0;
        union {
            struct fi_eq_entry ent;
            struct fi_eq_cm_entry cm;
            char raw[512];
        } u;
        ssize_t r = fi_eq_read(w.eq, &event, &u, sizeof u, 0);
        char buf[512];
        if (r == -FI_EAVAIL) {
            struct fi_eq_err_entry e;
            memset(&e, 0, sizeof e);
            r = fi_eq_readerr(w.eq, &e, 0);
            if (r < 0) {
                fprintf(stderr, "%s: fi_eq_readerr: %s\n", w.name.c_str(), fi_strerror((int)-r));
                return n;
            }
            const char* s = fi_eq_strerror(w.eq, e.prov_errno, e.err_data, buf, sizeof buf);
            std::string age = "";
            if (e.err_data && e.err_data_size == sizeof(struct fi_evd_async_err)) {
                struct fi_evd_async_err d;
                memcpy(&d, e.err_data, sizeof d);
                if (d.magic == FI_EVD_ASYNC_MAGIC) {
                    char a[64];
                    snprintf(a, sizeof a, " read+%.3fms seq=%" PRIu64,
                             (double)(mono_ns() - d.timestamp_ns) / 1e6, d.seq);
                    age = a;
                }
            }
            printf("%s %s %s error fid=[%s] err=%d (%s) prov_errno=%d%s \"%s\"\n",
                   wall_time().c_str(), w.name.c_str(), event_name(s, e.prov_errno).c_str(),
                   fid_name(w, e.fid).c_str(), e.err, fi_strerror(e.err), e.prov_errno,
                   age.c_str(), s ? s : "");
            ++n;
            continue;
        }
        if (r == -FI_EAGAIN) return n;
        if (r < 0) {
            fprintf(stderr, "%s: fi_eq_read: %s\n", w.name.c_str(), fi_strerror((int)-r));
            return n;
        }
        if (event == FI_NOTIFY && FI_EVD_NOTIFY_IS_ASYNC(u.ent.data)) {
            std::string s = notify_sentence(w, u.ent.data, buf, sizeof buf);
            printf("%s %s %s notify fid=[%s] err=0 prov_errno=%d data=0x%016" PRIx64 " \"%s\"\n",
                   wall_time().c_str(), w.name.c_str(),
                   event_name(s.c_str(), FI_EVD_NOTIFY_EVENT(u.ent.data)).c_str(),
                   fid_name(w, u.ent.fid).c_str(), FI_EVD_NOTIFY_EVENT(u.ent.data), u.ent.data,
                   s.c_str());
        } else {
            printf("%s %s event %u fid=[%s] (%zd bytes)\n", wall_time().c_str(), w.name.c_str(),
                   event, fid_name(w, u.ent.fid).c_str(), r);
        }
        ++n;
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> only;
    double seconds = -1;
    long count = -1;
    bool quiet = false;
    for (int c; (c = getopt(argc, argv, "d:t:n:qh")) != -1;) {
        switch (c) {
            case 'd': only.push_back(optarg); break;
            case 't': seconds = atof(optarg); break;
            case 'n': count = atol(optarg); break;
            case 'q': quiet = true; break;
            default: usage(argv[0]); return c == 'h' ? 0 : 2;
        }
    }
    setvbuf(stdout, nullptr, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    struct fi_info* hints = fi_allocinfo();
    if (!hints) return 1;
    hints->fabric_attr->prov_name = strdup("evd");
    hints->ep_attr->type = FI_EP_MSG;
    // evd_eqwatch registers no memory and posts nothing: it accepts every mode
    // and memory registration mode a provider may ask for.
    hints->mode = ~0ULL;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT |
                                  FI_MR_ENDPOINT | FI_MR_HMEM;
    struct fi_info* info = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (ret) {
        fprintf(stderr, "evd_eqwatch: fi_getinfo(evd): %s (is FI_PROVIDER_PATH set?)\n",
                fi_strerror(-ret));
        return 1;
    }

    struct fid_fabric* fabric = nullptr;
    std::vector<watched> ws;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (struct fi_info* i = info; i; i = i->next) {
        const char* dn = i->domain_attr ? i->domain_attr->name : nullptr;
        if (!dn) continue;
        bool seen = false;
        for (auto& w : ws) seen = seen || w.name == dn;
        if (seen) continue;
        if (!only.empty()) {
            bool want = false;
            for (auto& o : only) want = want || o == dn;
            if (!want) continue;
        }
        if (!fabric && (ret = fi_fabric(i->fabric_attr, &fabric, nullptr))) {
            fprintf(stderr, "evd_eqwatch: fi_fabric: %s\n", fi_strerror(-ret));
            break;
        }
        watched w;
        w.name = dn;
        if ((ret = fi_domain(fabric, i, &w.domain, nullptr))) {
            fprintf(stderr, "evd_eqwatch: fi_domain(%s): %s\n", dn, fi_strerror(-ret));
            continue;
        }
        struct fi_eq_attr ea;
        memset(&ea, 0, sizeof ea);
        ea.wait_obj = FI_WAIT_FD;
        if ((ret = fi_eq_open(fabric, &ea, &w.eq, nullptr)) ||
            (ret = fi_domain_bind(w.domain, &w.eq->fid, FI_EVD_NOTIFY_ASYNC)) ||
            (ret = fi_control(&w.eq->fid, FI_GETWAIT, &w.fd))) {
            fprintf(stderr, "evd_eqwatch: EQ for %s: %s\n", dn, fi_strerror(-ret));
            if (w.eq) fi_close(&w.eq->fid);
            fi_close(&w.domain->fid);
            continue;
        }
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN;
        ev.data.u64 = ws.size();
        epoll_ctl(ep, EPOLL_CTL_ADD, w.fd, &ev);
        if (fi_open_ops(&w.domain->fid, FI_EVD_ASYNC_OPS, 0, reinterpret_cast<void**>(&w.ops),
                        nullptr))
            w.ops = nullptr;
        if (!quiet) {
            struct fi_evd_port_state st;
            memset(&st, 0, sizeof st);
            if (w.ops && w.ops->port_state(w.domain, &st) == 0)
                printf("# watching %s port %u (%s)\n", dn, st.port_num,
                       port_state_name(st.state));
            else
                printf("# watching %s\n", dn);
        }
        ws.push_back(w);
    }
    fi_freeinfo(info);
    if (ws.empty()) {
        fprintf(stderr, "evd_eqwatch: no evd domain to watch\n");
        if (fabric) fi_close(&fabric->fid);
        return 1;
    }

    const uint64_t deadline = seconds >= 0 ? mono_ns() + (uint64_t)(seconds * 1e9) : 0;
    long total = 0;
    std::vector<struct fid*> fids;
    for (auto& w : ws) fids.push_back(&w.eq->fid);
    while (!g_stop && (count < 0 || total < count)) {
        for (auto& w : ws) total += drain(w);
        if (count >= 0 && total >= count) break;
        // fi_trywait: only block when no EQ has anything pending.
        if (fi_trywait(fabric, fids.data(), (int)fids.size()) == -FI_EAGAIN) continue;
        int tmo = -1;
        if (deadline) {
            uint64_t now = mono_ns();
            if (now >= deadline) break;
            tmo = (int)((deadline - now) / 1000000) + 1;
        }
        struct epoll_event evs[8];
        int n = epoll_wait(ep, evs, 8, tmo);
        if (n < 0 && errno != EINTR) {
            perror("evd_eqwatch: epoll_wait");
            break;
        }
    }

    if (!quiet) {
        for (auto& w : ws) {
            struct fi_evd_async_counters c;
            memset(&c, 0, sizeof c);
            if (w.ops && w.ops->counters(w.domain, &c) == 0)
                printf("# %s: %" PRIu64 " async events, %" PRIu64 " records, %" PRIu64
                       " undeliverable, %" PRIu64 " suppressed\n",
                       w.name.c_str(), c.events, c.delivered, c.undeliverable, c.suppressed);
        }
        printf("# %ld records\n", total);
    }
    for (auto& w : ws) {
        fi_close(&w.domain->fid);
        fi_close(&w.eq->fid);
    }
    close(ep);
    fi_close(&fabric->fid);
    return 0;
}
