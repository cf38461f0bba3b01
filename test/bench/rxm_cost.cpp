// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rxm_cost: what a tagged send costs through libfabric's ofi_rxm, the way
// MPI uses evd and verbs, counted exactly by callgrind as op_cost does
// (test/bench/op_cost.cpp). test/bench/op-cost.sh's "rxm" table runs it for
// "evd;ofi_rxm" and "verbs;ofi_rxm" and splits each instruction between
// rxm (and libfabric's util code it calls) and the core provider below it
// (test/gate/callgrind-split.awk with -v rxm=1).
//
// One process, two FI_EP_RDM endpoints: the server on EVD_VM_ADDR0 (rxe0),
// the client on EVD_VM_ADDR1 (rxe1), each with its own domain, CQ and AV
// holding the other's address. A warm-up message, uncounted, makes rxm
// connect. Each iteration of -o OP (tsend or tinject, -s bytes) then does,
// each in a function of its own that callgrind is told to count:
//   cost_post      the client's fi_tsend (fi_tinject);
//   cost_reap_tx   one fi_cq_read of the client's CQ that returns the
//                  send's completion (for fi_tinject, one that returns
//                  nothing);
//   cost_reap_rx   one fi_cq_read of the server's CQ that returns the
//                  receive's;
//   cost_repost    the server's fi_trecv that replaces it.
// Both loops (loop_tsend, loop_tinject) run in one process with -o all.
// Between the counted calls the program spins without entering a provider
// or the kernel. rxm makes progress only inside its calls: a counted read
// that finds nothing is reported (`empty reads`, 0 in a good run) and the
// completion then read uncounted.
//
// Usage (inside the VM):
//   valgrind --tool=callgrind --toggle-collect='*::cost_*' ./rxm_cost -p 'evd;ofi_rxm' -o all
//   rxm_cost -p PROV -o tsend|tinject|all [-n iterations] [-s bytes] [-w spin_us]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../common/tool_util.h"
#include "../common/vm_link.h"

namespace {

using clk = std::chrono::steady_clock;
using rxetest::env_or;

enum class op { tsend, tinject, all };

struct options {
    std::string prov = "evd;ofi_rxm";
    op kind = op::all;
    long iters = 100;
    size_t size = 8;
    long spin_us = 3000;
};

constexpr uint64_t kTag = 0x5a;

using evdtool::spin;

// One side: its info, domain, CQ, AV and endpoint.
struct side {
    struct fi_info* info = nullptr;
    struct fid_domain* dom = nullptr;
    struct fid_cq* cq = nullptr;
    struct fid_av* av = nullptr;
    struct fid_ep* ep = nullptr;
    fi_addr_t peer = FI_ADDR_UNSPEC;

    void close() {
        for (struct fid* f : {ep ? &ep->fid : nullptr, av ? &av->fid : nullptr,
                              cq ? &cq->fid : nullptr, dom ? &dom->fid : nullptr})
            if (f) fi_close(f);
        fi_freeinfo(info);
    }
};

class bed {
  public:
    explicit bed(const options& o) : o_(o), kind_(o.kind) {}
    ~bed() {
        cli_.close();
        srv_.close();
        if (fab_) fi_close(&fab_->fid);
    }

    bool setup() {
        struct fi_info* h = fi_allocinfo();
        h->ep_attr->type = FI_EP_RDM;
        h->caps = FI_TAGGED | FI_MSG;
        h->mode = FI_CONTEXT;
        h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        h->fabric_attr->prov_name = strdup(o_.prov.c_str());
        h->tx_attr->inject_size = 64;
        const char* a0 = env_or("EVD_VM_ADDR0", "192.0.2.1");
        const char* a1 = env_or("EVD_VM_ADDR1", "192.0.2.2");
        int rc = fi_getinfo(FI_VERSION(1, 17), a0, "7481", FI_SOURCE, h, &srv_.info);
        if (!rc) rc = fi_getinfo(FI_VERSION(1, 17), a1, "7482", FI_SOURCE, h, &cli_.info);
        fi_freeinfo(h);
        FI_CHECK(rc);
        FI_CHECK(fi_fabric(srv_.info->fabric_attr, &fab_, nullptr));
        if (!open_side(srv_) || !open_side(cli_)) return false;
        if (!meet(srv_, cli_) || !meet(cli_, srv_)) return false;
        buf_.assign(1 << 16, 1);
        rbuf_.assign(1 << 16, 0);
        FI_CHECK(fi_mr_reg(cli_.dom, buf_.data(), buf_.size(), FI_SEND, 0, 0, 0, &cmr_, nullptr));
        FI_CHECK(fi_mr_reg(srv_.dom, rbuf_.data(), rbuf_.size(), FI_RECV, 0, 0, 0, &smr_, nullptr));
        for (int i = 0; i < 16; ++i) FI_CHECK(repost());
        // the warm-up: rxm connects on the first send, answering -FI_EAGAIN
        // until its connection is up (both sides' reads drive it)
        const auto end = clk::now() + std::chrono::seconds(30);
        int r;
        while ((r = static_cast<int>(fi_tsend(cli_.ep, buf_.data(), o_.size, fi_mr_desc(cmr_),
                                              cli_.peer, kTag, &ctx_))) == -FI_EAGAIN &&
               clk::now() < end) {
            (void)fi_cq_read(cli_.cq, nullptr, 0);
            (void)fi_cq_read(srv_.cq, nullptr, 0);
            spin(100);
        }
        FI_CHECK(r);
        return reap(cli_.cq, "warm-up send") && reap(srv_.cq, "warm-up receive") &&
               repost() == 0;
    }

    __attribute__((noinline)) int cost_post() {
        if (kind_ == op::tinject)
            return static_cast<int>(fi_tinject(cli_.ep, buf_.data(), o_.size, cli_.peer, kTag));
        return static_cast<int>(
            fi_tsend(cli_.ep, buf_.data(), o_.size, fi_mr_desc(cmr_), cli_.peer, kTag, &ctx_));
    }
    __attribute__((noinline)) ssize_t cost_reap_tx(struct fi_cq_tagged_entry* e) {
        return fi_cq_read(cli_.cq, e, 1);
    }
    __attribute__((noinline)) ssize_t cost_reap_rx(struct fi_cq_tagged_entry* e) {
        return fi_cq_read(srv_.cq, e, 1);
    }
    __attribute__((noinline)) int cost_repost() { return repost(); }

    bool run() {
        if (kind_ == op::all) return loop_tsend() && loop_tinject();
        return run_kind(kind_);
    }
    __attribute__((noinline)) bool loop_tsend() { return run_kind(op::tsend); }
    __attribute__((noinline)) bool loop_tinject() { return run_kind(op::tinject); }

  private:
    bool open_side(side& s) {
        FI_CHECK(fi_domain(fab_, s.info, &s.dom, nullptr));
        struct fi_cq_attr ca {};
        ca.format = FI_CQ_FORMAT_TAGGED;
        ca.wait_obj = FI_WAIT_NONE;
        ca.size = 256;
        FI_CHECK(fi_cq_open(s.dom, &ca, &s.cq, nullptr));
        struct fi_av_attr aa {};
        aa.type = FI_AV_TABLE;
        FI_CHECK(fi_av_open(s.dom, &aa, &s.av, nullptr));
        FI_CHECK(fi_endpoint(s.dom, s.info, &s.ep, nullptr));
        FI_CHECK(fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV));
        FI_CHECK(fi_ep_bind(s.ep, &s.av->fid, 0));
        FI_CHECK(fi_enable(s.ep));
        return true;
    }
    // Puts b's address in a's AV.
    static bool meet(side& a, side& b) {
        char name[256];
        size_t len = sizeof name;
        FI_CHECK(fi_getname(&b.ep->fid, name, &len));
        if (fi_av_insert(a.av, name, 1, &a.peer, 0, nullptr) != 1) {
            fprintf(stderr, "rxm_cost: fi_av_insert failed\n");
            return false;
        }
        return true;
    }
    int repost() {
        return static_cast<int>(fi_trecv(srv_.ep, rbuf_.data(), 4096, fi_mr_desc(smr_),
                                         FI_ADDR_UNSPEC, kTag, 0, &rctx_));
    }
    // Reads one completion of cq, uncounted, driving both sides' progress.
    bool reap(struct fid_cq* cq, const char* what) {
        struct fi_cq_tagged_entry e {};
        const auto end = clk::now() + std::chrono::seconds(30);
        while (clk::now() < end) {
            const ssize_t r = fi_cq_read(cq, &e, 1);
            if (r == 1) return true;
            if (r != -FI_EAGAIN) {
                fprintf(stderr, "rxm_cost: %s: %s\n", what, fi_strerror(static_cast<int>(-r)));
                return false;
            }
            struct fid_cq* other = cq == cli_.cq ? srv_.cq : cli_.cq;
            (void)fi_cq_read(other, nullptr, 0);  // progress the other side
            spin(100);
        }
        fprintf(stderr, "rxm_cost: %s: no completion\n", what);
        return false;
    }
    // One counted read that should return a completion; a miss is counted
    // as empty and the completion read uncounted.
    template <class Reap>
    bool reap_counted(Reap r, struct fid_cq* cq, const char* what) {
        struct fi_cq_tagged_entry e {};
        const ssize_t got = r(&e);
        if (got == 1) return true;
        if (got != -FI_EAGAIN) {
            fprintf(stderr, "rxm_cost: %s: %s\n", what, fi_strerror(static_cast<int>(-got)));
            return false;
        }
        ++empty_;
        return reap(cq, what);
    }
    bool run_kind(op k) {
        kind_ = k;
        for (long i = 0; i < o_.iters; ++i) {
            int r;
            const auto end = clk::now() + std::chrono::seconds(10);
            while ((r = cost_post()) == -FI_EAGAIN && clk::now() < end) spin(o_.spin_us);
            FI_CHECK(r);
            spin(o_.spin_us);
            if (k == op::tsend) {
                if (!reap_counted([&](auto* e) { return cost_reap_tx(e); }, cli_.cq, "client CQ"))
                    return false;
            } else {
                // an inject shows nothing; one counted read all the same
                struct fi_cq_tagged_entry e {};
                const ssize_t rr = cost_reap_tx(&e);
                if (rr != -FI_EAGAIN) {
                    fprintf(stderr, "rxm_cost: an inject's read returned %zd\n", rr);
                    return false;
                }
            }
            if (!reap_counted([&](auto* e) { return cost_reap_rx(e); }, srv_.cq, "server CQ"))
                return false;
            FI_CHECK(cost_repost());
        }
        printf("rxm_cost: %s %s %zu bytes: %ld iterations, %ld empty reads\n", o_.prov.c_str(),
               k == op::tsend ? "tsend" : "tinject", o_.size, o_.iters, empty_);
        return true;
    }

    const options& o_;
    op kind_;
    struct fid_fabric* fab_ = nullptr;
    side srv_, cli_;
    struct fid_mr *cmr_ = nullptr, *smr_ = nullptr;
    std::vector<uint8_t> buf_, rbuf_;
    struct fi_context2 ctx_ {}, rctx_ {};
    long empty_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    options o;
    int c;
    while ((c = getopt(argc, argv, "p:o:n:s:w:")) != -1) {
        switch (c) {
        case 'p': o.prov = optarg; break;
        case 'o':
            if (!strcmp(optarg, "tsend")) o.kind = op::tsend;
            else if (!strcmp(optarg, "tinject")) o.kind = op::tinject;
            else if (!strcmp(optarg, "all")) o.kind = op::all;
            else {
                fprintf(stderr, "rxm_cost: -o tsend|tinject|all\n");
                return 2;
            }
            break;
        case 'n': o.iters = atol(optarg); break;
        case 's': o.size = strtoul(optarg, nullptr, 0); break;
        case 'w': o.spin_us = atol(optarg); break;
        default:
            fprintf(stderr, "usage: rxm_cost [-p prov] [-o tsend|tinject|all] [-n iters] [-s bytes] "
                            "[-w spin_us]\n");
            return 2;
        }
    }
    evdtool::prog = "rxm_cost";
    bed b(o);
    if (!b.setup() || !b.run()) return 1;
    return 0;
}
