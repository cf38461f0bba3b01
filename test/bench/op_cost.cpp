// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// op_cost: what one data-path operation costs a provider, in instructions,
// counted exactly by callgrind, not timed: the counts do not depend on how
// busy the host is. test/bench/op-cost.sh runs it for evd (with and without
// resumable connections) and libfabric's verbs on the same device and
// writes the table to docs/.
//
// One process, a listener on EVD_VM_ADDR0 (rxe0) and a client on
// EVD_VM_ADDR1 (rxe1), one connection. Each iteration of -o OP does, each in
// a function of its own that callgrind is told to count (--toggle-collect):
//   cost_post      the client posts the operation (fi_send, fi_inject,
//                  fi_write, fi_read: -s bytes);
//   cost_repost    the server posts the receive a message consumed;
//   cost_reap_tx   one fi_cq_read on the client's CQ that returns the
//                  operation's completion (for fi_inject, one read that
//                  returns nothing: the hidden completion it may retire is
//                  part of what an inject costs);
//   cost_reap_rx   one fi_cq_read on the server's CQ that returns the
//                  receive's completion (messages only).
// -o mr-hit counts a registration-cache hit instead: each iteration
//   cost_mr_reg    fi_mr_reg of one page of the client's buffer, which the
//                  setup registered whole (so a cache finds it);
//   cost_mr_close  fi_close of that registration.
// -b N (sends only) posts N sends per iteration, all but the last with
//   FI_MORE (fi_sendmsg), in one cost_post_batch; the reads and reposts
//   follow for all N (reposts with FI_MORE too). op-cost.sh divides by the
//   sends, not the iterations.
// -o all runs one loop of each after the other in one process (for
//   test/gate/op-count.sh: one valgrind start for every count): send,
//   inject, write, read, mr-hit and sends in batches of -b (16 unless
//   given), each loop inside a function of its own, loop_send() ...
//   loop_batch(), so that callgrind's --separate-callers names the loop in
//   every counted function's context. Then three loops only -o all has:
//   loop_burst16() and loop_burst64() post 16 (64) sends uncounted and
//   count the one fi_cq_read that returns all their completions on each
//   side (cost_reap_many_tx, cost_reap_many_rx: per call, not per
//   completion); loop_eq() counts an fi_eq_read (cost_eq_read) of the
//   FI_NOTIFY entry an uncounted fi_eq_write put on an EQ of its own.
// -r SECONDS (sends only) times instead of counting: 8 B (-s) sends
//   streamed in batches of -b for that long, a window of kWindow in flight,
//   completions read 64 at a time and receives reposted as they are
//   consumed; prints the message rate. Not for valgrind.
// The loop runs between two getppid() calls, so that strace can count the
// system calls of the loop alone. Between the counted functions the program
// waits (uncounted, without a system call: a spin on the vDSO clock) long enough for rxe to have done its part, so each
// counted read finds its completion at once: an empty read would be
// counted too, and is reported (`empty reads`; 0 in a good run).
//
// Usage (inside the VM; valgrind counts user space only):
//   valgrind --tool=callgrind --toggle-collect='cost_*' ./op_cost -p evd -o send -n 2000
//   op_cost -p PROV -o send|inject|write|read|mr-hit|all [-n iterations] [-s bytes] [-w spin_us]
//           [-b batch] [-r seconds]
// FI_EVD_RESUME_TIMEOUT selects resumable endpoints for evd.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
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

enum class op { send, inject, write, read, mr_hit, all };

struct options {
    std::string prov = "evd";
    op kind = op::send;
    long iters = 2000;
    size_t size = 8;
    long spin_us = 2000;
    long batch = 0;  // -b: 0, the per-operation loop; N, batches of N
    double rate_s = 0;
};

// Sends in flight at most in the timed run, and the queues' depth.
constexpr long kWindow = 256;
constexpr size_t kDepth = 512;

using evdtool::spin;

class conn {
  public:
    explicit conn(const options& o) : o_(o), kind_(o.kind), batch_(o.batch) {}
    ~conn() {
        for (struct fid* f : {ep_fid(cep_), ep_fid(sep_), &pep_fid(), mr_fid(smr_), mr_fid(cmr_),
                              cq_fid(scq_), cq_fid(ccq_), dom_fid(sdom_), dom_fid(cdom_),
                              eq_fid(ueq_), eq_fid(eq_), fab_fid(fab_)})
            if (f) fi_close(f);
        fi_freeinfo(sinfo_);
        fi_freeinfo(cinfo_);
    }

    bool setup() {
        struct fi_info* h = evdtool::msg_hints(o_.prov.c_str(), kDepth);
        h->caps = FI_MSG | FI_RMA;
        h->tx_attr->inject_size = 64;
        const char* a0 = env_or("EVD_VM_ADDR0", "192.0.2.1");
        int rc = fi_getinfo(FI_VERSION(1, 17), a0, "7471", FI_SOURCE, h, &sinfo_);
        if (!rc) {
            struct sockaddr_in src {};
            src.sin_family = AF_INET;
            inet_pton(AF_INET, env_or("EVD_VM_ADDR1", "192.0.2.2"), &src.sin_addr);
            h->src_addr = malloc(sizeof src);
            memcpy(h->src_addr, &src, sizeof src);
            h->src_addrlen = sizeof src;
            rc = fi_getinfo(FI_VERSION(1, 17), a0, "7471", 0, h, &cinfo_);
        }
        fi_freeinfo(h);
        FI_CHECK(rc);  // a failed setup call ends the run, naming it (tool_util.h)
        FI_CHECK(fi_fabric(sinfo_->fabric_attr, &fab_, nullptr));
        struct fi_eq_attr ea {};
        ea.wait_obj = FI_WAIT_UNSPEC;
        FI_CHECK(fi_eq_open(fab_, &ea, &eq_, nullptr));
        FI_CHECK(fi_domain(fab_, sinfo_, &sdom_, nullptr));
        FI_CHECK(fi_domain(fab_, cinfo_, &cdom_, nullptr));
        struct fi_cq_attr ca {};
        ca.format = FI_CQ_FORMAT_DATA;
        ca.wait_obj = FI_WAIT_NONE;
        ca.size = 2 * kDepth;
        FI_CHECK(fi_cq_open(sdom_, &ca, &scq_, nullptr));
        FI_CHECK(fi_cq_open(cdom_, &ca, &ccq_, nullptr));
        buf_.assign(1 << 16, 1);
        target_.assign(1 << 16, 2);
        FI_CHECK(fi_mr_reg(cdom_, buf_.data(), buf_.size(), FI_SEND | FI_RECV | FI_READ | FI_WRITE, 0,
                        0, 0, &cmr_, nullptr));
        FI_CHECK(fi_mr_reg(sdom_, target_.data(), target_.size(),
                        FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &smr_,
                        nullptr));
        FI_CHECK(fi_passive_ep(fab_, sinfo_, &pep_, nullptr));
        FI_CHECK(fi_pep_bind(pep_, &eq_->fid, 0));
        FI_CHECK(fi_listen(pep_));
        FI_CHECK(fi_endpoint(cdom_, cinfo_, &cep_, nullptr));
        FI_CHECK(fi_ep_bind(cep_, &eq_->fid, 0));
        FI_CHECK(fi_ep_bind(cep_, &ccq_->fid, FI_TRANSMIT | FI_RECV));
        FI_CHECK(fi_enable(cep_));
        FI_CHECK(fi_connect(cep_, cinfo_->dest_addr, nullptr, 0));
        bool c_up = false, s_up = false;
        const auto end = clk::now() + std::chrono::seconds(30);
        while ((!c_up || !s_up) && clk::now() < end) {
            uint32_t ev;
            struct fi_eq_cm_entry ent {};
            ssize_t r = fi_eq_sread(eq_, &ev, &ent, sizeof ent, 100, 0);
            if (r == -FI_EAGAIN) continue;
            if (r < 0) {
                fprintf(stderr, "op_cost: fi_eq_sread: %s\n", fi_strerror(static_cast<int>(-r)));
                return false;
            }
            if (ev == FI_CONNREQ) {
                FI_CHECK(fi_endpoint(sdom_, ent.info, &sep_, nullptr));
                fi_freeinfo(ent.info);
                FI_CHECK(fi_ep_bind(sep_, &eq_->fid, 0));
                FI_CHECK(fi_ep_bind(sep_, &scq_->fid, FI_TRANSMIT | FI_RECV));
                FI_CHECK(fi_enable(sep_));
                const long pre = std::max<long>(16, o_.rate_s > 0 ? kWindow : batch_);
                for (long i = 0; i < pre; ++i) FI_CHECK(repost());  // not counted
                rx_posted_ = pre;
                FI_CHECK(fi_accept(sep_, nullptr, 0));
            } else if (ev == FI_CONNECTED) {
                (ent.fid == &cep_->fid ? c_up : s_up) = true;
            }
        }
        if (!c_up || !s_up) fprintf(stderr, "op_cost: the connection did not come up\n");
        return c_up && s_up;
    }

    // The counted functions (callgrind --toggle-collect='cost_*'); noinline
    // so that each is a function of its own.
    __attribute__((noinline)) int cost_post() {
        void* d = fi_mr_desc(cmr_);
        const uint64_t raddr = reinterpret_cast<uintptr_t>(target_.data());
        const uint64_t key = fi_mr_key(smr_);
        switch (kind_) {
        case op::send: return static_cast<int>(fi_send(cep_, buf_.data(), o_.size, d, 0, &ctx_));
        case op::inject: return static_cast<int>(fi_inject(cep_, buf_.data(), o_.size, 0));
        case op::write:
            return static_cast<int>(fi_write(cep_, buf_.data(), o_.size, d, 0, raddr, key, &ctx_));
        case op::read:
            return static_cast<int>(fi_read(cep_, buf_.data(), o_.size, d, 0, raddr, key, &ctx_));
        case op::mr_hit:
        case op::all: break;
        }
        return -FI_EINVAL;
    }
    __attribute__((noinline)) int cost_mr_reg(long i, struct fid_mr** out) {
        return fi_mr_reg(cdom_, buf_.data() + 4096 * (i % 8), 4096,
                         FI_SEND | FI_RECV | FI_READ | FI_WRITE, 0, 0, 0, out, nullptr);
    }
    __attribute__((noinline)) int cost_mr_close(struct fid_mr* m) { return fi_close(&m->fid); }

    // -o mr-hit: the registrations and closes alone.
    bool run_mr_hit() {
        // one registration and close first, uncounted: after it the cache
        // holds the range and the closed object's memory for the next
        // registration to reuse, as in any steady state
        struct fid_mr* w = nullptr;
        FI_CHECK(fi_mr_reg(cdom_, buf_.data(), 4096, FI_SEND | FI_RECV | FI_READ | FI_WRITE, 0, 0,
                           0, &w, nullptr));
        FI_CHECK(fi_close(&w->fid));
        syscall(SYS_getppid);
        for (long i = 0; i < o_.iters; ++i) {
            struct fid_mr* m = nullptr;
            FI_CHECK(cost_mr_reg(i, &m));
            FI_CHECK(cost_mr_close(m));
        }
        syscall(SYS_getppid);
        printf("op_cost: %s mr-hit: %ld iterations\n", o_.prov.c_str(), o_.iters);
        return true;
    }
    // An fi_msg of one iov, for fi_sendmsg and fi_recvmsg.
    static struct fi_msg one_iov(struct iovec* iov, void** desc, void* ctx) {
        struct fi_msg m {};
        m.msg_iov = iov;
        m.desc = desc;
        m.iov_count = 1;
        m.context = ctx;
        return m;
    }
    int repost(uint64_t flags = 0) {
        struct iovec iov {target_.data() + 4096, 4096};
        void* d = fi_mr_desc(smr_);
        const struct fi_msg m = one_iov(&iov, &d, &rctx_);
        return flags ? static_cast<int>(fi_recvmsg(sep_, &m, flags))
                     : static_cast<int>(fi_recv(sep_, iov.iov_base, iov.iov_len, d, 0, &rctx_));
    }
    // One send of the client's buffer by fi_sendmsg with `flags`.
    int send_msg(uint64_t flags) {
        struct iovec iov {buf_.data(), o_.size};
        void* d = fi_mr_desc(cmr_);
        const struct fi_msg m = one_iov(&iov, &d, &ctx_);
        return static_cast<int>(fi_sendmsg(cep_, &m, flags));
    }
    // -b N: N sends, all but the last with FI_MORE; stops at the first
    // failure and returns it with how many were posted.
    __attribute__((noinline)) int cost_post_batch(long n, long* posted) {
        for (*posted = 0; *posted < n; ++*posted) {
            const int r = send_msg(*posted + 1 < n ? FI_MORE : 0);
            if (r) return r;
        }
        return 0;
    }
    __attribute__((noinline)) int cost_repost_batch(long n) {
        for (long i = 0; i < n; ++i) {
            const int r = repost(i + 1 < n ? FI_MORE : 0);
            if (r) return r;
        }
        return 0;
    }
    __attribute__((noinline)) int cost_repost() { return repost(); }
    __attribute__((noinline)) ssize_t cost_reap_tx(struct fi_cq_data_entry* e) {
        return fi_cq_read(ccq_, e, 1);
    }
    __attribute__((noinline)) ssize_t cost_reap_rx(struct fi_cq_data_entry* e) {
        return fi_cq_read(scq_, e, 1);
    }

    // Reads one completion of cq with `reap`, spinning between tries; counts
    // the empty reads.
    template <class Reap>
    bool reap_one(Reap reap, const char* what) {
        struct fi_cq_data_entry e {};
        const auto end = clk::now() + std::chrono::seconds(10);
        for (;;) {
            const ssize_t r = reap(&e);
            if (r == 1) return true;
            if (r != -FI_EAGAIN) {
                fprintf(stderr, "op_cost: %s: %s\n", what, fi_strerror(static_cast<int>(-r)));
                return false;
            }
            ++empty_;
            if (clk::now() > end) {
                fprintf(stderr, "op_cost: %s: no completion\n", what);
                return false;
            }
            spin(o_.spin_us);
        }
    }

    bool run() {
        if (kind_ == op::all) return run_all();
        if (kind_ == op::mr_hit) return run_mr_hit();
        if (o_.rate_s > 0) return run_rate();
        if (batch_ > 0) return run_batch();
        const bool message = kind_ == op::send || kind_ == op::inject;
        const bool completes = kind_ != op::inject;
        // The loop between two getppid calls: strace's record of the system
        // calls in between is the loop's alone (op-cost.sh counts them).
        syscall(SYS_getppid);
        for (long i = 0; i < o_.iters; ++i) {
            int r;
            const auto end = clk::now() + std::chrono::seconds(10);
            while ((r = cost_post()) == -FI_EAGAIN && clk::now() < end) spin(o_.spin_us);
            FI_CHECK(r);
            spin(o_.spin_us);
            if (completes && !reap_one([&](auto* e) { return cost_reap_tx(e); }, "client CQ"))
                return false;
            if (!completes) {
                // an inject shows nothing, but a provider may have work for
                // the read all the same (a hidden completion to retire, on
                // resumable endpoints every one): one read, counted
                struct fi_cq_data_entry e {};
                const ssize_t rr = cost_reap_tx(&e);
                if (rr != -FI_EAGAIN) {
                    fprintf(stderr, "op_cost: an inject's read returned %zd\n", rr);
                    return false;
                }
            }
            if (message) {
                if (!reap_one([&](auto* e) { return cost_reap_rx(e); }, "server CQ")) return false;
                FI_CHECK(cost_repost());
            }
        }
        syscall(SYS_getppid);
        printf("op_cost: %s %s %zu bytes: %ld iterations, %ld empty reads\n", o_.prov.c_str(),
               kind_name(), o_.size, o_.iters, empty_);
        return true;
    }

    // -o all: every loop in turn, each under a function whose name callgrind's
    // --separate-callers puts in the context of what it counts.
    bool run_all() {
        const long b = batch_ > 0 ? batch_ : 16;
        batch_ = 0;
        return loop_send() && loop_inject() && loop_write() && loop_read() && loop_mr_hit() &&
               loop_batch(b) && loop_burst16() && loop_burst64() && loop_eq();
    }
    __attribute__((noinline)) bool loop_burst16() { return run_burst(16); }
    __attribute__((noinline)) bool loop_burst64() { return run_burst(64); }
    __attribute__((noinline)) bool loop_eq() { return run_eq(); }

    __attribute__((noinline)) ssize_t cost_reap_many_tx(struct fi_cq_data_entry* e, long n) {
        return fi_cq_read(ccq_, e, static_cast<size_t>(n));
    }
    __attribute__((noinline)) ssize_t cost_reap_many_rx(struct fi_cq_data_entry* e, long n) {
        return fi_cq_read(scq_, e, static_cast<size_t>(n));
    }
    __attribute__((noinline)) ssize_t cost_eq_read(uint32_t* ev, struct fi_eq_entry* e) {
        return fi_eq_read(ueq_, ev, e, sizeof *e, 0);
    }

    // One counted read of all n completions of cq with `reap`; a read that
    // found fewer (rxe not done yet: a busy guest) is counted as an empty
    // read and the rest read uncounted.
    template <class Reap>
    bool reap_all(Reap reap, struct fid_cq* cq, long n, const char* what) {
        struct fi_cq_data_entry e[64];
        ssize_t got = reap(e, n);
        if (got == n) return true;
        ++empty_;
        long have = got > 0 ? got : 0;
        if (got < 0 && got != -FI_EAGAIN) {
            fprintf(stderr, "op_cost: %s: %s\n", what, fi_strerror(static_cast<int>(-got)));
            return false;
        }
        const auto end = clk::now() + std::chrono::seconds(10);
        while (have < n && clk::now() < end) {
            spin(o_.spin_us);
            const ssize_t r = fi_cq_read(cq, e, static_cast<size_t>(n - have));
            if (r > 0) have += r;
            else if (r != -FI_EAGAIN) FI_CHECK(r);
        }
        if (have < n) fprintf(stderr, "op_cost: %s: %ld of %ld completions\n", what, have, n);
        return have == n;
    }

    // loop_burst16/64: n sends posted (with FI_MORE but the last, as a
    // streaming sender would), then one counted read of all n completions
    // on each side; the receives reposted uncounted.
    bool run_burst(long n) {
        for (; rx_posted_ < n; ++rx_posted_) FI_CHECK(repost());
        syscall(SYS_getppid);
        for (long i = 0; i < o_.iters; ++i) {
            for (long k = 0; k < n; ++k) FI_CHECK(send_msg(k + 1 < n ? FI_MORE : 0));
            spin(o_.spin_us * (1 + n / 16));
            if (!reap_all([&](auto* e, long m) { return cost_reap_many_tx(e, m); }, ccq_, n,
                          "client CQ") ||
                !reap_all([&](auto* e, long m) { return cost_reap_many_rx(e, m); }, scq_, n,
                          "server CQ"))
                return false;
            for (long k = 0; k < n; ++k) FI_CHECK(repost(k + 1 < n ? FI_MORE : 0));
        }
        syscall(SYS_getppid);
        printf("op_cost: %s reads of %ld completions: %ld iterations, %ld empty reads\n",
               o_.prov.c_str(), n, o_.iters, empty_);
        return true;
    }

    // loop_eq: an fi_eq_write of an FI_NOTIFY entry (uncounted), then the
    // counted fi_eq_read that returns it, on an EQ of its own.
    bool run_eq() {
        struct fi_eq_attr ea {};
        ea.wait_obj = FI_WAIT_UNSPEC;
        ea.flags = FI_WRITE;
        FI_CHECK(fi_eq_open(fab_, &ea, &ueq_, nullptr));
        syscall(SYS_getppid);
        for (long i = 0; i < o_.iters; ++i) {
            struct fi_eq_entry w {};
            w.context = &ctx_;
            w.data = static_cast<uint64_t>(i);
            if (fi_eq_write(ueq_, FI_NOTIFY, &w, sizeof w, 0) != static_cast<ssize_t>(sizeof w)) {
                fprintf(stderr, "op_cost: fi_eq_write failed\n");
                return false;
            }
            uint32_t ev = 0;
            struct fi_eq_entry r {};
            const ssize_t got = cost_eq_read(&ev, &r);
            if (got != static_cast<ssize_t>(sizeof r) || ev != FI_NOTIFY || r.data != w.data) {
                fprintf(stderr, "op_cost: fi_eq_read returned %zd\n", got);
                return false;
            }
        }
        syscall(SYS_getppid);
        printf("op_cost: %s eq reads: %ld iterations\n", o_.prov.c_str(), o_.iters);
        return true;
    }
    __attribute__((noinline)) bool loop_send() { return run_kind(op::send); }
    __attribute__((noinline)) bool loop_inject() { return run_kind(op::inject); }
    __attribute__((noinline)) bool loop_write() { return run_kind(op::write); }
    __attribute__((noinline)) bool loop_read() { return run_kind(op::read); }
    __attribute__((noinline)) bool loop_mr_hit() { return run_kind(op::mr_hit); }
    __attribute__((noinline)) bool loop_batch(long b) {
        batch_ = b;
        return run_kind(op::send);
    }
    bool run_kind(op k) {
        kind_ = k;
        return run();
    }

    // -b N: batches of N sends, each batch's completions and reposts after it.
    bool run_batch() {
        const long b = batch_;
        syscall(SYS_getppid);
        for (long i = 0; i < o_.iters; ++i) {
            long posted = 0;
            FI_CHECK(cost_post_batch(b, &posted));
            spin(o_.spin_us);
            for (long k = 0; k < b; ++k)
                if (!reap_one([&](auto* e) { return cost_reap_tx(e); }, "client CQ")) return false;
            for (long k = 0; k < b; ++k)
                if (!reap_one([&](auto* e) { return cost_reap_rx(e); }, "server CQ")) return false;
            FI_CHECK(cost_repost_batch(b));
        }
        syscall(SYS_getppid);
        printf("op_cost: %s send %zu bytes in batches of %ld: %ld iterations, %ld empty reads\n",
               o_.prov.c_str(), o_.size, b, o_.iters, empty_);
        return true;
    }

    // -r SECONDS: sends streamed for that long; the message rate.
    bool run_rate() {
        const long b = std::max<long>(1, batch_);
        long inflight = 0, sent = 0, received = 0;
        clk::duration in_post{};  // time inside the posting calls
        struct fi_cq_data_entry e[64];
        const auto start = clk::now();
        const auto end = start + std::chrono::duration_cast<clk::duration>(
                                     std::chrono::duration<double>(o_.rate_s));
        while (clk::now() < end) {
            if (inflight + b <= kWindow) {
                long posted = 0;
                const auto t0 = clk::now();
                const int r = cost_post_batch(b, &posted);
                in_post += clk::now() - t0;
                inflight += posted;
                sent += posted;
                if (r && r != -FI_EAGAIN) FI_CHECK(r);
                if (r == -FI_EAGAIN && posted) FI_CHECK(send_msg(0));  // flush what FI_MORE held
            }
            ssize_t t = fi_cq_read(ccq_, e, 64);
            if (t > 0) inflight -= t;
            else if (t != -FI_EAGAIN) FI_CHECK(t);
            ssize_t rr = fi_cq_read(scq_, e, 64);
            if (rr > 0) {
                received += rr;
                FI_CHECK(cost_repost_batch(rr));
            } else if (rr != -FI_EAGAIN) {
                FI_CHECK(rr);
            }
        }
        const double secs = std::chrono::duration<double>(clk::now() - start).count();
        printf("op_cost: %s send %zu bytes in batches of %ld: %ld sent, %ld received in %.2f s: "
               "rate %.0f msg/s, %.1f%% of the time posting\n",
               o_.prov.c_str(), o_.size, b, sent, received, secs, received / secs,
               100.0 * std::chrono::duration<double>(in_post).count() / secs);
        return true;
    }

    const char* kind_name() const {
        switch (kind_) {
        case op::send: return "send";
        case op::inject: return "inject";
        case op::write: return "write";
        case op::read: return "read";
        case op::mr_hit: return "mr-hit";
        case op::all: return "all";
        }
        return "?";
    }

  private:
    static struct fid* ep_fid(struct fid_ep* e) { return e ? &e->fid : nullptr; }
    struct fid& pep_fid() { return pep_ ? pep_->fid : null_; }
    static struct fid* mr_fid(struct fid_mr* m) { return m ? &m->fid : nullptr; }
    static struct fid* cq_fid(struct fid_cq* q) { return q ? &q->fid : nullptr; }
    static struct fid* dom_fid(struct fid_domain* d) { return d ? &d->fid : nullptr; }
    static struct fid* eq_fid(struct fid_eq* q) { return q ? &q->fid : nullptr; }
    static struct fid* fab_fid(struct fid_fabric* f) { return f ? &f->fid : nullptr; }

    const options& o_;
    op kind_;     // the loop's operation (-o; each in turn for -o all)
    long batch_;  // the loop's batch (-b)
    struct fi_info *sinfo_ = nullptr, *cinfo_ = nullptr;
    struct fid_fabric* fab_ = nullptr;
    struct fid_eq* eq_ = nullptr;
    struct fid_eq* ueq_ = nullptr;  // loop_eq's (FI_WRITE)
    long rx_posted_ = 0;            // receives the server has posted
    struct fid_domain *sdom_ = nullptr, *cdom_ = nullptr;
    struct fid_cq *scq_ = nullptr, *ccq_ = nullptr;
    struct fid_pep* pep_ = nullptr;
    struct fid_ep *cep_ = nullptr, *sep_ = nullptr;
    struct fid_mr *cmr_ = nullptr, *smr_ = nullptr;
    struct fid null_ {};
    std::vector<uint8_t> buf_, target_;
    struct fi_context2 ctx_ {}, rctx_ {};
    long empty_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    options o;
    int c;
    while ((c = getopt(argc, argv, "p:o:n:s:w:b:r:")) != -1) {
        switch (c) {
        case 'p': o.prov = optarg; break;
        case 'o':
            if (!strcmp(optarg, "send")) o.kind = op::send;
            else if (!strcmp(optarg, "inject")) o.kind = op::inject;
            else if (!strcmp(optarg, "write")) o.kind = op::write;
            else if (!strcmp(optarg, "read")) o.kind = op::read;
            else if (!strcmp(optarg, "mr-hit")) o.kind = op::mr_hit;
            else if (!strcmp(optarg, "all")) o.kind = op::all;
            else {
                fprintf(stderr, "op_cost: -o send|inject|write|read|mr-hit|all\n");
                return 2;
            }
            break;
        case 'n': o.iters = atol(optarg); break;
        case 's': o.size = strtoul(optarg, nullptr, 0); break;
        case 'w': o.spin_us = atol(optarg); break;
        case 'b': o.batch = atol(optarg); break;
        case 'r': o.rate_s = atof(optarg); break;
        default:
            fprintf(stderr, "usage: op_cost [-p prov] [-o send|inject|write|read|mr-hit|all] "
                            "[-n iters] "
                            "[-s bytes] [-w spin_us] [-b batch] [-r seconds]\n");
            return 2;
        }
    }
    if ((o.rate_s > 0 && o.kind != op::send) || (o.batch && o.kind != op::send && o.kind != op::all)) {
        fprintf(stderr, "op_cost: -b is for -o send and all, -r for send\n");
        return 2;
    }
    if (o.batch < 0 || o.batch > 64) {
        fprintf(stderr, "op_cost: -b takes 1 to 64\n");
        return 2;
    }
    evdtool::prog = "op_cost";
    conn k(o);
    if (!k.setup() || !k.run()) return 1;
    return 0;
}
