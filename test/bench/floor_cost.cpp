// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// floor_cost: the floor under op_cost's figures (op_cost.cpp), counted
// with no provider at all: the same work requests evd posts for each
// operation, on an RC queue pair that rdma_cm connected, posted with
// ibv_post_send/ibv_post_recv and reaped with ibv_poll_cq. What callgrind
// counts inside its cost_* functions is then rdma-core's alone (libibverbs
// and the device's driver, with the libc calls they make), which is what
// any provider pays for the same work; provider overhead = provider's
// count - this. test/bench/op-cost.sh runs it beside op_cost and checks
// that test/gate/callgrind-split.awk finds no provider instructions in it.
//
// One process, a listener on EVD_VM_ADDR0 (rxe0) and a client from
// EVD_VM_ADDR1 (rxe1), one connection, the queues 512 deep with 64 bytes of
// inline data (op_cost's hints). -o all runs, each loop in a function of its
// own named as op_cost's (so the split names its phases alike):
//   loop_send    8 B inline signaled SEND: cost_post, cost_reap_tx (one
//                ibv_poll_cq of 1 that returns it), cost_reap_rx (the
//                server's), cost_repost (the receive that replaces it);
//   loop_inject  the same SEND unsignaled: cost_post, cost_reap_tx (a poll
//                that returns nothing), cost_reap_rx, cost_repost;
//   loop_write   8 B inline signaled RDMA_WRITE: cost_post, cost_reap_tx;
//   loop_read    8 B signaled RDMA_READ: cost_post, cost_reap_tx;
//   loop_batch   16 sends chained in one ibv_post_send (what evd posts for
//                a batch held with FI_MORE): cost_post_batch, and the 16
//                receives chained in one ibv_post_recv: cost_repost_batch;
//   loop_burst16/64  one ibv_poll_cq of 16 (64) that returns them all, on
//                each side: cost_reap_many_tx, cost_reap_many_rx.
// The cost_* functions are noipa: two with the same body would otherwise be
// folded into one, and the split would name one phase for both.
// -g N creates the send queue with N scatter entries (1 by default; a
// provider that asks the device's maximum pays for it in the driver's
// post: op-cost.sh shows both).
// Between counted calls it spins (uncounted, on the vDSO clock) -w µs, so
// that each counted poll finds its completions at once; a poll that finds
// fewer is reported as an empty read (0 in a good run).
//
//   valgrind --tool=callgrind --toggle-collect='*::cost_*' ./floor_cost -o all -n 100
//   floor_cost [-o all] [-n iterations] [-w spin_us] [-g send_sge]
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/syscall.h>
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
using evdtool::spin;

constexpr int kDepth = 512;
constexpr uint32_t kInline = 64;
constexpr size_t kSize = 8;
constexpr int kMaxChain = 64;

#define CHECK(x)                                                                  \
    do {                                                                          \
        if (!(x)) {                                                               \
            fprintf(stderr, "floor_cost: %s failed: %s\n", #x, strerror(errno)); \
            return false;                                                         \
        }                                                                         \
    } while (0)

// One side of the connection: its id, protection domain, CQ and buffer.
struct side {
    struct rdma_cm_id* id = nullptr;
    struct ibv_pd* pd = nullptr;
    struct ibv_cq* cq = nullptr;
    struct ibv_mr* mr = nullptr;
    std::vector<unsigned char> buf = std::vector<unsigned char>(1 << 16);
    bool has_qp = false;

    bool open(struct rdma_cm_id* with, uint32_t send_sge) {
        id = with;
        CHECK((pd = ibv_alloc_pd(id->verbs)));
        CHECK((cq = ibv_create_cq(id->verbs, 2 * kDepth, nullptr, nullptr, 0)));
        struct ibv_qp_init_attr a {};
        a.send_cq = a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = a.cap.max_recv_wr = kDepth;
        a.cap.max_send_sge = send_sge;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = kInline;
        CHECK(rdma_create_qp(id, pd, &a) == 0);
        has_qp = true;
        CHECK((mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_WRITE)));
        return true;
    }
    void close() {
        if (has_qp) rdma_destroy_qp(id);
        if (mr) ibv_dereg_mr(mr);
        if (cq) ibv_destroy_cq(cq);
        if (pd) ibv_dealloc_pd(pd);
        if (id) rdma_destroy_id(id);
    }
};

class floor_conn {
  public:
    floor_conn(long iters, long spin_us, uint32_t send_sge)
        : iters_(iters), spin_us_(spin_us), send_sge_(send_sge) {}
    ~floor_conn() {
        client_.close();
        server_.close();
        if (listen_) rdma_destroy_id(listen_);
        if (ch_) rdma_destroy_event_channel(ch_);
    }

    // The listener, the client's resolution and connect, the server's
    // accept, all on one event channel, in whatever order rdma_cm reports.
    bool setup() {
        CHECK((ch_ = rdma_create_event_channel()));
        struct sockaddr_in a0 = addr(env_or("EVD_VM_ADDR0", "192.0.2.1"), 7479);
        struct sockaddr_in a1 = addr(env_or("EVD_VM_ADDR1", "192.0.2.2"), 0);
        CHECK(rdma_create_id(ch_, &listen_, nullptr, RDMA_PS_TCP) == 0);
        CHECK(rdma_bind_addr(listen_, reinterpret_cast<struct sockaddr*>(&a0)) == 0);
        CHECK(rdma_listen(listen_, 4) == 0);
        struct rdma_cm_id* cid = nullptr;
        CHECK(rdma_create_id(ch_, &cid, nullptr, RDMA_PS_TCP) == 0);
        client_.id = cid;
        CHECK(rdma_resolve_addr(cid, reinterpret_cast<struct sockaddr*>(&a1),
                                reinterpret_cast<struct sockaddr*>(&a0), 2000) == 0);
        int established = 0;
        while (established < 2) {
            struct rdma_cm_event* ev = nullptr;
            CHECK(rdma_get_cm_event(ch_, &ev) == 0);
            const enum rdma_cm_event_type t = ev->event;
            struct rdma_cm_id* id = ev->id;
            rdma_ack_cm_event(ev);
            switch (t) {
            case RDMA_CM_EVENT_ADDR_RESOLVED: CHECK(rdma_resolve_route(id, 2000) == 0); break;
            case RDMA_CM_EVENT_ROUTE_RESOLVED: {
                if (!client_.open(id, send_sge_)) return false;
                struct rdma_conn_param p {};
                p.retry_count = 6;
                p.rnr_retry_count = 7;
                p.initiator_depth = p.responder_resources = 1;  // fi_read needs both
                CHECK(rdma_connect(id, &p) == 0);
                break;
            }
            case RDMA_CM_EVENT_CONNECT_REQUEST: {
                if (!server_.open(id, send_sge_)) return false;
                for (int i = 0; i < kDepth / 2; ++i) CHECK(post_recv(++next_id_) == 0);
                struct rdma_conn_param p {};
                p.rnr_retry_count = 7;
                p.initiator_depth = p.responder_resources = 1;
                CHECK(rdma_accept(id, &p) == 0);
                break;
            }
            case RDMA_CM_EVENT_ESTABLISHED: ++established; break;
            default:
                fprintf(stderr, "floor_cost: rdma_cm event %s\n", rdma_event_str(t));
                return false;
            }
        }
        return true;
    }

    bool run_all() {
        syscall(SYS_getppid);
        const bool ok = loop_send() && loop_inject() && loop_write() && loop_read() &&
                        loop_batch() && loop_burst16() && loop_burst64();
        syscall(SYS_getppid);
        printf("floor_cost: %ld iterations a loop, %ld empty reads\n", iters_, empty_);
        return ok;
    }

  private:
    static struct sockaddr_in addr(const char* ip, uint16_t port) {
        struct sockaddr_in a {};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        inet_pton(AF_INET, ip, &a.sin_addr);
        return a;
    }

    // The work requests evd posts: an 8 B send or write inline (evd sends
    // anything up to the inject size inline), a read with the buffer's key.
    struct ibv_send_wr sq_wr(enum ibv_wr_opcode op, bool signaled, struct ibv_sge* sge) {
        sge->addr = reinterpret_cast<uintptr_t>(client_.buf.data());
        sge->length = kSize;
        sge->lkey = client_.mr->lkey;
        struct ibv_send_wr w {};
        w.wr_id = ++next_id_;
        w.sg_list = sge;
        w.num_sge = 1;
        w.opcode = op;
        if (op != IBV_WR_RDMA_READ) w.send_flags |= IBV_SEND_INLINE;
        if (signaled) w.send_flags |= IBV_SEND_SIGNALED;
        if (op != IBV_WR_SEND) {
            w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(server_.buf.data()) + 4096;
            w.wr.rdma.rkey = server_.mr->rkey;
        }
        return w;
    }

    __attribute__((noipa)) int cost_post(struct ibv_send_wr* w) {
        struct ibv_send_wr* bad = nullptr;
        return ibv_post_send(client_.id->qp, w, &bad);
    }
    int post_recv(uint64_t id) {
        struct ibv_sge s {reinterpret_cast<uintptr_t>(server_.buf.data()) + 8192, 4096,
                          server_.mr->lkey};
        struct ibv_recv_wr w {};
        w.wr_id = id;
        w.sg_list = &s;
        w.num_sge = 1;
        struct ibv_recv_wr* bad = nullptr;
        return ibv_post_recv(server_.id->qp, &w, &bad);
    }
    __attribute__((noipa)) int cost_repost() { return post_recv(++next_id_); }
    __attribute__((noipa)) int cost_post_batch(struct ibv_send_wr* chain) {
        struct ibv_send_wr* bad = nullptr;
        return ibv_post_send(client_.id->qp, chain, &bad);
    }
    __attribute__((noipa)) int cost_repost_batch(struct ibv_recv_wr* chain) {
        struct ibv_recv_wr* bad = nullptr;
        return ibv_post_recv(server_.id->qp, chain, &bad);
    }
    __attribute__((noipa)) int cost_reap_tx(struct ibv_wc* wc) {
        return ibv_poll_cq(client_.cq, 1, wc);
    }
    __attribute__((noipa)) int cost_reap_rx(struct ibv_wc* wc) {
        return ibv_poll_cq(server_.cq, 1, wc);
    }
    __attribute__((noipa)) int cost_reap_many_tx(struct ibv_wc* wc, int n) {
        return ibv_poll_cq(client_.cq, n, wc);
    }
    __attribute__((noipa)) int cost_reap_many_rx(struct ibv_wc* wc, int n) {
        return ibv_poll_cq(server_.cq, n, wc);
    }

    // A counted poll that must return `want` successes at once; what it did
    // not find is read uncounted and the read reported as empty.
    template <class Poll>
    bool reap(Poll poll, struct ibv_cq* cq, int want, const char* what) {
        struct ibv_wc wc[kMaxChain];
        int got = poll(wc, want);
        if (got < 0) {
            fprintf(stderr, "floor_cost: %s: ibv_poll_cq %d\n", what, got);
            return false;
        }
        for (int i = 0; i < got; ++i)
            if (wc[i].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "floor_cost: %s: %s\n", what, ibv_wc_status_str(wc[i].status));
                return false;
            }
        if (got == want) return true;
        ++empty_;
        const auto end = clk::now() + std::chrono::seconds(10);
        while (got < want && clk::now() < end) {
            spin(spin_us_);
            const int r = ibv_poll_cq(cq, want - got, wc);
            if (r < 0) return false;
            got += r;
        }
        if (got < want) fprintf(stderr, "floor_cost: %s: %d of %d completions\n", what, got, want);
        return got == want;
    }

    // send, inject, write, read: post, then the reads that op_cost counts.
    bool run_kind(enum ibv_wr_opcode op, bool signaled, bool message) {
        for (long i = 0; i < iters_; ++i) {
            struct ibv_sge s;
            // an unsignaled send's queue slot is freed by a later signaled
            // one: every 64th inject is signaled, and reaped uncounted
            const bool sig = signaled || i % 64 == 63;
            struct ibv_send_wr w = sq_wr(op, sig, &s);
            if (cost_post(&w)) {
                fprintf(stderr, "floor_cost: ibv_post_send: %s\n", strerror(errno));
                return false;
            }
            spin(spin_us_);
            if (signaled) {
                if (!reap([&](struct ibv_wc* wc, int) { return cost_reap_tx(wc); }, client_.cq, 1,
                          "client CQ"))
                    return false;
            } else {
                // the periodic signaled one's completion first, uncounted;
                // then the counted poll, which finds nothing (as op_cost's
                // read after an inject)
                if (sig && !reap([&](struct ibv_wc* c, int) { return ibv_poll_cq(client_.cq, 1, c); },
                                 client_.cq, 1, "client CQ"))
                    return false;
                struct ibv_wc wc;
                const int r = cost_reap_tx(&wc);
                if (r != 0) {
                    fprintf(stderr, "floor_cost: an unsignaled send completed (%d)\n", r);
                    return false;
                }
            }
            if (message) {
                if (!reap([&](struct ibv_wc* wc, int) { return cost_reap_rx(wc); }, server_.cq, 1,
                          "server CQ"))
                    return false;
                if (cost_repost()) return false;
            }
        }
        return true;
    }
    __attribute__((noinline)) bool loop_send() { return run_kind(IBV_WR_SEND, true, true); }
    __attribute__((noinline)) bool loop_inject() { return run_kind(IBV_WR_SEND, false, true); }
    __attribute__((noinline)) bool loop_write() { return run_kind(IBV_WR_RDMA_WRITE, true, false); }
    __attribute__((noinline)) bool loop_read() { return run_kind(IBV_WR_RDMA_READ, true, false); }

    // n sends chained into one post, n receives into another; the reads of
    // their completions one at a time (batch) or all at once (burst).
    bool run_chain(int n, bool burst) {
        struct ibv_sge ss[kMaxChain], rs[kMaxChain];
        struct ibv_send_wr sw[kMaxChain];
        struct ibv_recv_wr rw[kMaxChain];
        for (long i = 0; i < iters_; ++i) {
            for (int k = 0; k < n; ++k) {
                sw[k] = sq_wr(IBV_WR_SEND, true, &ss[k]);
                sw[k].next = k + 1 < n ? &sw[k + 1] : nullptr;
            }
            struct ibv_send_wr* sbad = nullptr;
            if (burst ? ibv_post_send(client_.id->qp, sw, &sbad) : cost_post_batch(sw)) return false;
            spin(spin_us_ * (1 + n / 16));
            if (burst) {
                if (!reap([&](struct ibv_wc* wc, int m) { return cost_reap_many_tx(wc, m); },
                          client_.cq, n, "client CQ") ||
                    !reap([&](struct ibv_wc* wc, int m) { return cost_reap_many_rx(wc, m); },
                          server_.cq, n, "server CQ"))
                    return false;
            } else {
                for (int k = 0; k < n; ++k)
                    if (!reap([&](struct ibv_wc* wc, int) { return cost_reap_tx(wc); }, client_.cq,
                              1, "client CQ"))
                        return false;
                for (int k = 0; k < n; ++k)
                    if (!reap([&](struct ibv_wc* wc, int) { return cost_reap_rx(wc); }, server_.cq,
                              1, "server CQ"))
                        return false;
            }
            for (int k = 0; k < n; ++k) {
                rs[k] = {reinterpret_cast<uintptr_t>(server_.buf.data()) + 8192, 4096,
                         server_.mr->lkey};
                rw[k] = {};
                rw[k].wr_id = ++next_id_;
                rw[k].sg_list = &rs[k];
                rw[k].num_sge = 1;
                rw[k].next = k + 1 < n ? &rw[k + 1] : nullptr;
            }
            struct ibv_recv_wr* bad = nullptr;
            if (burst ? ibv_post_recv(server_.id->qp, rw, &bad) : cost_repost_batch(rw)) return false;
        }
        return true;
    }
    __attribute__((noinline)) bool loop_batch() { return run_chain(16, false); }
    __attribute__((noinline)) bool loop_burst16() { return run_chain(16, true); }
    __attribute__((noinline)) bool loop_burst64() { return run_chain(64, true); }

    const long iters_, spin_us_;
    const uint32_t send_sge_;
    struct rdma_event_channel* ch_ = nullptr;
    struct rdma_cm_id* listen_ = nullptr;
    side client_, server_;
    uint64_t next_id_ = 0;
    long empty_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    evdtool::prog = "floor_cost";
    long iters = 100, spin_us = 3000, send_sge = 1;
    int c;
    while ((c = getopt(argc, argv, "o:n:w:g:")) != -1) {
        switch (c) {
        case 'o':
            if (strcmp(optarg, "all") != 0) {
                fprintf(stderr, "floor_cost: -o all is the only mode\n");
                return 2;
            }
            break;
        case 'n': iters = atol(optarg); break;
        case 'w': spin_us = atol(optarg); break;
        case 'g': send_sge = atol(optarg); break;
        default:
            fprintf(stderr, "usage: floor_cost [-o all] [-n iterations] [-w spin_us] [-g send_sge]\n");
            return 2;
        }
    }
    floor_conn f(iters, spin_us, static_cast<uint32_t>(send_sge < 1 ? 1 : send_sge));
    if (!f.setup()) return 1;
    return f.run_all() ? 0 : 1;
}
