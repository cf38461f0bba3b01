// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// An evd CQ without a device, for the CQ's unit tests (cq_read.cpp,
// cq_route.cpp): its ibv_cq is a fake whose ibv_poll_cq (its context's
// poll_cq op) hands out the work completions a test queued.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/fi_eq.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "cq/cq_state.h"

namespace cqtest {

// An ibv_cq that answers ibv_poll_cq from a queue the test fills.
struct fake_ibcq {
    struct ibv_context ctx {};
    struct ibv_cq cq {};
    std::deque<struct ibv_wc> pending;
    int polls = 0;
};

inline int fake_poll(struct ibv_cq* cq, int n, struct ibv_wc* wc) {
    auto* f = static_cast<fake_ibcq*>(cq->cq_context);
    ++f->polls;
    int i = 0;
    for (; i < n && !f->pending.empty(); ++i) {
        wc[i] = f->pending.front();
        f->pending.pop_front();
    }
    return i;
}

inline constexpr uint32_t kQpn = 77;

// An evd CQ on the fake, as fi_cq_open leaves it, in `format`.
struct test_cq {
    fake_ibcq f;
    evd::cq c;

    explicit test_cq(enum fi_cq_format format = FI_CQ_FORMAT_CONTEXT) {
        f.ctx.ops.poll_cq = fake_poll;
        f.cq.context = &f.ctx;
        f.cq.cq_context = &f;
        f.cq.cqe = 16;
        c.ibcq.reset(&f.cq);
        c.format = format;
        c.entry_size = format == FI_CQ_FORMAT_MSG    ? sizeof(struct fi_cq_msg_entry)
                       : format == FI_CQ_FORMAT_DATA ? sizeof(struct fi_cq_data_entry)
                                                     : sizeof(struct fi_cq_entry);
        evd::lock_guard lk(c.mu);
        c.ring_cap = static_cast<size_t>(f.cq.cqe) + evd::kBatch;
        c.ring.reset(new struct ibv_wc[c.ring_cap]);
    }
    ~test_cq() { (void)c.ibcq.release(); }  // the fake is not rdma-core's to destroy
    test_cq(const test_cq&) = delete;
    test_cq& operator=(const test_cq&) = delete;

    void push(uint64_t wr_id, enum ibv_wc_status st = IBV_WC_SUCCESS,
              enum ibv_wc_opcode op = IBV_WC_SEND, uint32_t len = 0, uint32_t qpn = kQpn) {
        struct ibv_wc wc {};
        wc.wr_id = wr_id;
        wc.status = st;
        wc.opcode = op;
        wc.byte_len = len;
        wc.qp_num = qpn;
        f.pending.push_back(wc);
    }
    ssize_t read(void* buf, size_t count) { return evd::cq_do_read(&c, buf, count, nullptr); }
    // fi_cq_read's own entry with a count of one (its short path, cq_read_one)
    ssize_t read_one(void* buf) { return evd::cq_read(reinterpret_cast<struct fid_cq*>(&c.fid), buf, 1); }
    ssize_t readerr(struct fi_cq_err_entry* e) { return evd::cq_readerr(&c.fid, e, 0); }
    std::vector<uint32_t> markers() {
        evd::lock_guard lk(c.mu);
        return c.markers;
    }
    std::vector<uint32_t> probes() {
        evd::lock_guard lk(c.mu);
        return c.probes;
    }
    // The QP numbers c routes (fi_ep_bind's cq_attach_qp), and those whose
    // receives it admits as datagrams.
    std::vector<uint32_t> qps() {
        evd::lock_guard lk(c.reg_mu);
        std::vector<uint32_t> v;
        for (auto& [qpn, owner] : c.qps) v.push_back(qpn);
        return v;
    }
    std::vector<uint32_t> ud_qps() {
        evd::lock_guard lk(c.mu);
        std::vector<uint32_t> v;
        for (auto& [qpn, owner] : c.ud) v.push_back(qpn);
        return v;
    }
};

}  // namespace cqtest
