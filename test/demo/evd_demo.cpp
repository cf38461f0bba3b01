// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evd_demo: the main job, run inside the Soft-RoCE VM by test/demo/run-demo.sh.
//
// One process, two rxe devices: a server on EVD_VM_ADDR0 (rxe0) and a client
// on EVD_VM_ADDR1 (rxe1). It connects, moves data, flaps the link under rxe0
// and finally removes rxe1, printing every record exactly as evd's EQs
// deliver it (fi_eq_read / fi_eq_readerr / fi_eq_strerror), with a timestamp.
// Everything goes through the public libfabric API with FI_PROVIDER=evd.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_evd.h>
#include <rdma/fi_rma.h>

#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

double now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
double g_t0;

[[noreturn]] void die(const char* what, int rc) {
    std::fprintf(stderr, "evd_demo: %s: %s (%d)\n", what, fi_strerror(-rc), rc);
    std::exit(1);
}
#define CHECK(call)                          \
    do {                                     \
        int rc_ = (int)(call);               \
        if (rc_ < 0) die(#call, rc_);        \
    } while (0)

const char* event_name(uint32_t ev) {
    switch (ev) {
    case FI_NOTIFY: return "FI_NOTIFY";
    case FI_CONNREQ: return "FI_CONNREQ";
    case FI_CONNECTED: return "FI_CONNECTED";
    case FI_SHUTDOWN: return "FI_SHUTDOWN";
    case FI_MR_COMPLETE: return "FI_MR_COMPLETE";
    case FI_AV_COMPLETE: return "FI_AV_COMPLETE";
    case FI_JOIN_COMPLETE: return "FI_JOIN_COMPLETE";
    default: return "?";
    }
}

struct named_eq {
    const char* name;
    fid_eq* eq;
};

struct record {
    bool error = false;
    uint32_t event = 0;
    fid_t fid = nullptr;
    int err = 0;
    int prov_errno = 0;
    uint64_t data = 0;
    fi_info* info = nullptr;  // FI_CONNREQ
};

std::vector<std::pair<fid_t, std::string>> g_names;
std::string fid_name(fid_t f) {
    for (auto& [k, v] : g_names)
        if (k == f) return v;
    char b[32];
    std::snprintf(b, sizeof b, "fid %p", (void*)f);
    return b;
}

// Reads one record from q if there is one, printing it as delivered.
bool read_one(const named_eq& q, record& r) {
    alignas(8) unsigned char buf[sizeof(fi_eq_cm_entry) + 512];
    uint32_t ev = 0;
    ssize_t n = fi_eq_read(q.eq, &ev, buf, sizeof buf, 0);
    if (n == -FI_EAGAIN) return false;
    r = record{};
    if (n == -FI_EAVAIL) {
        unsigned char edata[512];
        fi_eq_err_entry e{};
        e.err_data = edata;
        e.err_data_size = sizeof edata;
        ssize_t m = fi_eq_readerr(q.eq, &e, 0);
        if (m < 0) die("fi_eq_readerr", (int)m);
        char sbuf[256] = "";
        const char* s = fi_eq_strerror(q.eq, e.prov_errno, e.err_data, sbuf, sizeof sbuf);
        std::printf("[%9.3f ms] %-9s ERROR  fid=%-14s err=%s (%d) prov_errno=%d: %s\n",
                    now_ms() - g_t0, q.name, fid_name(e.fid).c_str(), fi_strerror(e.err), e.err,
                    e.prov_errno, s ? s : sbuf);
        r.error = true;
        r.fid = e.fid;
        r.err = e.err;
        r.prov_errno = e.prov_errno;
        std::fflush(stdout);
        return true;
    }
    if (n < 0) die("fi_eq_read", (int)n);
    r.event = ev;
    if (ev == FI_CONNREQ || ev == FI_CONNECTED || ev == FI_SHUTDOWN) {
        auto* cm = reinterpret_cast<fi_eq_cm_entry*>(buf);
        r.fid = cm->fid;
        r.info = cm->info;
        size_t dlen = (size_t)n > sizeof *cm ? (size_t)n - sizeof *cm : 0;
        std::printf("[%9.3f ms] %-9s %-13s fid=%-14s cm data=%zu bytes%s%.*s%s\n", now_ms() - g_t0,
                    q.name, event_name(ev), fid_name(cm->fid).c_str(), dlen, dlen ? " \"" : "",
                    (int)dlen, (const char*)cm->data, dlen ? "\"" : "");
    } else {
        auto* e = reinterpret_cast<fi_eq_entry*>(buf);
        r.fid = e->fid;
        r.data = e->data;
        char what[128] = "";
        if (ev == FI_NOTIFY && FI_EVD_NOTIFY_IS_ASYNC(e->data))
            std::snprintf(what, sizeof what, " (%s, port %u)",
                          ibv_event_type_str(static_cast<ibv_event_type>(FI_EVD_NOTIFY_EVENT(e->data))),
                          FI_EVD_NOTIFY_PORT(e->data));
        std::printf("[%9.3f ms] %-9s %-13s fid=%-14s data=0x%llx%s\n", now_ms() - g_t0, q.name,
                    event_name(ev), fid_name(e->fid).c_str(), (unsigned long long)e->data, what);
    }
    std::fflush(stdout);
    return true;
}

// Pumps every EQ until pred(record) returns true for some record or timeout.
bool pump(std::vector<named_eq>& eqs, double timeout_ms,
          const std::function<bool(const named_eq&, record&)>& pred) {
    double end = now_ms() + timeout_ms;
    while (now_ms() < end) {
        bool any = false;
        for (auto& q : eqs) {
            record r;
            while (read_one(q, r)) {
                any = true;
                if (pred(q, r)) return true;
            }
        }
        if (!any) usleep(200);
    }
    return false;
}

// fi_getinfo for evd: node/service (FI_SOURCE when `source`), and an
// explicit source address when `src` is given (the client's own device).
fi_info* info_for(const char* node, bool source, const char* src = nullptr) {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = FI_MSG | FI_RMA;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup("evd");
    hints->addr_format = FI_SOCKADDR_IN;
    if (src) {
        auto* sin = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
        sin->sin_family = AF_INET;
        inet_pton(AF_INET, src, &sin->sin_addr);
        hints->src_addr = sin;
        hints->src_addrlen = sizeof *sin;
    }
    fi_info* info = nullptr;
    int rc = fi_getinfo(FI_VERSION(1, 17), node, "7471", source ? FI_SOURCE : 0, hints, &info);
    fi_freeinfo(hints);
    if (rc) die(source ? "fi_getinfo(server)" : "fi_getinfo(client)", rc);
    return info;
}

void section(const char* s) {
    std::printf("\n== %s\n", s);
    std::fflush(stdout);
}

void shell(const char* cmd) {
    std::printf("[%9.3f ms] $ %s\n", now_ms() - g_t0, cmd);
    std::fflush(stdout);
    if (std::system(cmd) != 0) std::fprintf(stderr, "evd_demo: '%s' failed\n", cmd);
}

}  // namespace

int main() {
    const char* a0 = std::getenv("EVD_VM_ADDR0");
    const char* a1 = std::getenv("EVD_VM_ADDR1");
    const char* nd0 = std::getenv("EVD_VM_NETDEV0");
    const char* dev1 = std::getenv("EVD_VM_DEV1");
    if (!a0 || !a1 || !nd0 || !dev1) {
        std::fprintf(stderr, "evd_demo: run me inside the evd VM (test/demo/run-demo.sh)\n");
        return 2;
    }
    setvbuf(stdout, nullptr, _IOLBF, 0);
    g_t0 = now_ms();

    section("open: one fabric, a domain and an EQ per device");
    fi_info* sinfo = info_for(a0, true);        // server: listens on a0 (rxe0)
    fi_info* cinfo = info_for(a0, false, a1);   // client: from a1 (rxe1) to a0
    std::printf("server: fabric %s domain %s\nclient: fabric %s domain %s\n",
                sinfo->fabric_attr->name, sinfo->domain_attr->name, cinfo->fabric_attr->name,
                cinfo->domain_attr->name);

    fid_fabric* fab;
    CHECK(fi_fabric(sinfo->fabric_attr, &fab, nullptr));
    fid_domain *sdom, *cdom;
    CHECK(fi_domain(fab, sinfo, &sdom, nullptr));
    CHECK(fi_domain(fab, cinfo, &cdom, nullptr));
    fi_eq_attr eqa{};
    eqa.size = 64;
    eqa.wait_obj = FI_WAIT_UNSPEC;
    fid_eq *seq, *ceq;
    CHECK(fi_eq_open(fab, &eqa, &seq, nullptr));
    CHECK(fi_eq_open(fab, &eqa, &ceq, nullptr));
    uint64_t notify = 0;
#ifdef FI_EVD_NOTIFY_ASYNC
    notify = FI_EVD_NOTIFY_ASYNC;  // opt in to FI_NOTIFY records (PORT_ACTIVE, ...)
#endif
    CHECK(fi_domain_bind(sdom, &seq->fid, notify));
    CHECK(fi_domain_bind(cdom, &ceq->fid, notify));
    g_names = {{&sdom->fid, std::string("domain:") + sinfo->domain_attr->name},
               {&cdom->fid, std::string("domain:") + cinfo->domain_attr->name}};
    std::vector<named_eq> eqs = {{"server-eq", seq}, {"client-eq", ceq}};

    section("connect: passive endpoint on the server, active endpoint on the client");
    fid_pep* pep;
    CHECK(fi_passive_ep(fab, sinfo, &pep, nullptr));
    CHECK(fi_pep_bind(pep, &seq->fid, 0));
    CHECK(fi_listen(pep));
    g_names.push_back({&pep->fid, "pep"});

    fi_cq_attr cqa{};
    cqa.size = 256;
    cqa.format = FI_CQ_FORMAT_DATA;
    cqa.wait_obj = FI_WAIT_NONE;
    fid_cq *scq, *ccq;
    CHECK(fi_cq_open(sdom, &cqa, &scq, nullptr));
    CHECK(fi_cq_open(cdom, &cqa, &ccq, nullptr));

    fid_ep* cep;
    CHECK(fi_endpoint(cdom, cinfo, &cep, nullptr));
    CHECK(fi_ep_bind(cep, &ceq->fid, 0));
    CHECK(fi_ep_bind(cep, &ccq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(cep));
    g_names.push_back({&cep->fid, "client-ep"});
    const char hello[] = "hello from the client";
    CHECK(fi_connect(cep, sinfo->src_addr, hello, sizeof hello - 1));

    fid_ep* sep = nullptr;
    int connected = 0;
    pump(eqs, 10000, [&](const named_eq&, record& r) {
        if (r.event == FI_CONNECTED) ++connected;
        if (r.event == FI_CONNREQ && r.info) {
            CHECK(fi_endpoint(sdom, r.info, &sep, nullptr));
            CHECK(fi_ep_bind(sep, &seq->fid, 0));
            CHECK(fi_ep_bind(sep, &scq->fid, FI_TRANSMIT | FI_RECV));
            CHECK(fi_enable(sep));
            g_names.push_back({&sep->fid, "server-ep"});
            const char welcome[] = "welcome";
            CHECK(fi_accept(sep, welcome, sizeof welcome - 1));
            fi_freeinfo(r.info);
        }
        return connected == 2;
    });
    if (connected != 2) {
        std::fprintf(stderr, "evd_demo: connection not established\n");
        return 1;
    }

    section("traffic: 1000 x 4 KiB sends, then a 1 MiB RDMA write, data checked");
    const size_t msg = 4096, n = 1000, big = 1 << 20;
    std::vector<char> sbuf(big), rbuf(big);
    fid_mr *smr, *cmr;
    CHECK(fi_mr_reg(sdom, rbuf.data(), big, FI_RECV | FI_REMOTE_WRITE, 0, 0, 0, &smr, nullptr));
    CHECK(fi_mr_reg(cdom, sbuf.data(), big, FI_SEND | FI_WRITE, 0, 0, 0, &cmr, nullptr));
    double t_start = now_ms();
    size_t done_rx = 0, done_tx = 0, posted_rx = 0, posted_tx = 0;
    fi_cq_data_entry ce[16];
    while (done_rx < n || done_tx < n) {
        while (posted_rx < n && posted_rx - done_rx < 64) {
            if (fi_recv(sep, rbuf.data() + (posted_rx % 64) * msg, msg, fi_mr_desc(smr), 0,
                        nullptr) != 0)
                break;
            ++posted_rx;
        }
        while (posted_tx < n && posted_tx - done_tx < 32 && posted_tx < posted_rx) {
            std::memset(sbuf.data() + (posted_tx % 64) * msg, (int)(posted_tx & 0x7f), msg);
            if (fi_send(cep, sbuf.data() + (posted_tx % 64) * msg, msg, fi_mr_desc(cmr), 0,
                        nullptr) != 0)
                break;
            ++posted_tx;
        }
        ssize_t k = fi_cq_read(scq, ce, 16);
        if (k > 0) {
            for (ssize_t i = 0; i < k; ++i) {
                const char* p = rbuf.data() + (done_rx % 64) * msg;
                if (p[0] != (char)(done_rx & 0x7f) || p[msg - 1] != (char)(done_rx & 0x7f)) {
                    std::fprintf(stderr, "evd_demo: data mismatch in message %zu\n", done_rx);
                    return 1;
                }
                ++done_rx;
            }
        } else if (k != -FI_EAGAIN) die("fi_cq_read(server)", (int)k);
        k = fi_cq_read(ccq, ce, 16);
        if (k > 0) done_tx += k;
        else if (k != -FI_EAGAIN) die("fi_cq_read(client)", (int)k);
        if (now_ms() - t_start > 60000) {
            std::fprintf(stderr, "evd_demo: traffic stalled (%zu/%zu)\n", done_rx, done_tx);
            return 1;
        }
    }
    double dt = now_ms() - t_start;
    std::printf("[%9.3f ms] %zu sends of %zu B received and checked in %.1f ms (%.1f MB/s)\n",
                now_ms() - g_t0, n, msg, dt, n * msg / dt / 1e3);
    for (size_t i = 0; i < big; ++i) sbuf[i] = (char)(i * 7);
    t_start = now_ms();
    CHECK(fi_write(cep, sbuf.data(), big, fi_mr_desc(cmr), 0, (uint64_t)(uintptr_t)rbuf.data(),
                   fi_mr_key(smr), nullptr));
    for (;;) {
        ssize_t k = fi_cq_read(ccq, ce, 1);
        if (k == 1) break;
        if (k != -FI_EAGAIN) die("fi_cq_read(write)", (int)k);
        if (now_ms() - t_start > 60000) die("RDMA write timed out", -FI_ETIMEDOUT);
    }
    for (size_t i = 0; i < big; ++i)
        if (rbuf[i] != (char)(i * 7)) {
            std::fprintf(stderr, "evd_demo: RDMA write data mismatch at %zu\n", i);
            return 1;
        }
    std::printf("[%9.3f ms] 1 MiB RDMA write landed and checked in %.1f ms\n", now_ms() - g_t0,
                now_ms() - t_start);

    section("link flap: the netdev under the server's device goes down, then up");
    {
        std::string down = std::string("ip link set ") + nd0 + " down";
        std::string up = std::string("ip link set ") + nd0 + " up";
        shell(down.c_str());
        bool got = pump(eqs, 15000, [&](const named_eq& q, record& r) {
            return r.error && r.fid == &sdom->fid;
        });
        if (!got) std::printf("(no port error record arrived within 15 s)\n");
        shell(up.c_str());
        pump(eqs, notify ? 15000 : 3000, [&](const named_eq&, record& r) {
            return !r.error && r.event == FI_NOTIFY && r.fid == &sdom->fid;
        });
    }

    section("device removal: rdma link delete of the client's device under a live connection");
    {
        std::string del = std::string("rdma link delete ") + dev1 + " &";
        shell(del.c_str());
        int terminal = 0;
        bool removed = false, server_gone = false;
        pump(eqs, 20000, [&](const named_eq&, record& r) {
            if (r.error && r.fid == &cdom->fid) removed = true;
            if (r.fid == &sep->fid && (r.error || r.event == FI_SHUTDOWN)) server_gone = true;
            if ((r.error || r.event == FI_SHUTDOWN) && (r.fid == &cep->fid)) ++terminal;
            return removed && terminal >= 1;
        });
        std::printf("[%9.3f ms] closing the client's objects so the kernel can finish the removal\n",
                    now_ms() - g_t0);
        fi_close(&cep->fid);
        fi_close(&cmr->fid);
        fi_close(&ccq->fid);
        // The server sees its peer go away (unless it already has).
        if (!server_gone)
            pump(eqs, 10000, [&](const named_eq&, record& r) {
                return r.fid == &sep->fid && (r.error || r.event == FI_SHUTDOWN);
            });
        fi_close(&cdom->fid);
    }
    {
        // `rdma link delete` finishes once no process holds the device.
        double until = now_ms() + 30000;
        bool finished = false;
        while (now_ms() < until) {
            if (std::system("rdma link show 2>/dev/null | grep -q \"link $EVD_VM_DEV1/\"") != 0) {
                finished = true;
                break;
            }
            usleep(100000);
        }
        std::printf("[%9.3f ms] %s\n", now_ms() - g_t0,
                    finished ? "device removal completed: evd released the device"
                             : "device removal still pending after 30 s (the device is still held)");
    }
    shell("rdma link show");

    section("close");
    fi_close(&sep->fid);
    fi_close(&smr->fid);
    fi_close(&scq->fid);
    fi_close(&pep->fid);
    fi_close(&sdom->fid);
    fi_close(&seq->fid);
    fi_close(&ceq->fid);
    fi_close(&fab->fid);
    fi_freeinfo(sinfo);
    fi_freeinfo(cinfo);
    std::printf("done in %.1f ms\n", now_ms() - g_t0);
    return 0;
}
