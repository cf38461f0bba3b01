// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Atomic operations of an active MSG endpoint (fi_atomic(3)): each call is
// one row of atomic_table.h, carried out as one verbs work request on
// ep->qp and posted through ep_post_sq (ep_data.cpp), so completions,
// counters, selective completion and the endpoint's one terminal event work
// as for RMA.
//
// Every request works on one 8-byte element at an 8-byte aligned remote
// address (count 1; fi_*atomicvalid say so). The operand and the compare
// value are read at the call and travel in the work request, so they need
// no registration; the result buffer of a fetching call is written by the
// device and needs its descriptor (FI_MR_LOCAL). Nothing is allocated and
// no lock is taken.
#include <cstring>

#include "cq/cntr.h"
#include "domain.h"
#include "mr/mr.h"
#include "msg/atomic_table.h"
#include "msg/ep.h"

namespace evd {

namespace {

// The one element of an fi_ioc list, or an error: the list must describe
// exactly one element (-FI_EMSGSIZE for more: fi_atomic(3)).
ssize_t one_element(const char* what, const struct fi_ioc* iov, size_t n, void** desc,
                    void*& addr, void*& d) {
    size_t total = 0;
    addr = nullptr;
    d = nullptr;
    if (n && !iov) {
        EVD_WARN(FI_LOG_EP_DATA, "atomic: %s: %zu entries but a NULL list\n", what, n);
        return -FI_EINVAL;
    }
    for (size_t i = 0; i < n; ++i) {
        if (!iov[i].count) continue;
        if (iov[i].count > 1 || total) {  // checked before adding: no wrap-around
            EVD_WARN(FI_LOG_EP_DATA, "atomic: %s has more than one element; evd does one per "
                     "request (fi_atomicvalid count 1)\n", what);
            return -FI_EMSGSIZE;
        }
        total += iov[i].count;
        addr = iov[i].addr;
        d = desc ? desc[i] : nullptr;
    }
    if (total == 0 || !addr) {
        EVD_WARN(FI_LOG_EP_DATA, "atomic: %s has no element (count 0 or a NULL buffer)\n", what);
        return -FI_EINVAL;
    }
    return 0;
}

uint64_t load8(const void* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

struct atomic_req {
    atomic_kind kind;
    const struct fi_ioc* op_iov;
    void** op_desc;
    size_t op_count;
    const struct fi_ioc* cmp_iov;  // compare only
    size_t cmp_count;
    struct fi_ioc* res_iov;        // fetch and compare
    void** res_desc;
    size_t res_count;
    uint64_t addr;
    uint64_t key;
    enum fi_datatype dt;
    enum fi_op op;
    void* context;
    uint64_t flags;
    bool no_ctx;                   // fi_inject_atomic
};

// What the request asks, checked against the device and atomic_table.h
// before any buffer is looked at: the row to carry out, or an error.
ssize_t check_request(ep* e, const atomic_req& q, const atomic_row*& row) {
    const char* name = atomic_kind_name(q.kind);
    if (!e->dom->dev->atomics) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: %s has no atomic operations (atomic_cap NONE)\n", name,
                 e->dom->dev->name.c_str());
        return -FI_EOPNOTSUPP;
    }
    row = atomic_lookup(q.kind, q.op, q.dt);
    if (!row) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: op %d on datatype %d is not offered (fi_evd(7), ATOMIC "
                 "OPERATIONS; fi_atomicvalid answers -FI_EOPNOTSUPP)\n", name,
                 static_cast<int>(q.op), static_cast<int>(q.dt));
        return -FI_EOPNOTSUPP;
    }
    if (q.flags & FI_TAGGED) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: FI_TAGGED: evd has no tagged atomics\n", name);
        return -FI_EOPNOTSUPP;
    }
    if (q.flags & FI_REMOTE_CQ_DATA) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: FI_REMOTE_CQ_DATA: a verbs atomic carries no immediate "
                 "data\n", name);
        return -FI_EOPNOTSUPP;
    }
    if ((q.flags & FI_INJECT) && q.kind != atomic_kind::base) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: FI_INJECT applies to base atomics only (the result is "
                 "written later)\n", name);
        return -FI_EINVAL;
    }
    if (q.addr % kAtomicSize) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: remote address 0x%llx is not 8-byte aligned\n", name,
                 static_cast<unsigned long long>(q.addr));
        return -FI_EINVAL;
    }
    if (q.key > UINT32_MAX) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: key 0x%llx is not an evd key (keys are 32-bit rkeys)\n",
                 name, static_cast<unsigned long long>(q.key));
        return -FI_EINVAL;
    }
    return 0;
}

// The request's buffers, one element each: the operand (ignored by
// FI_ATOMIC_READ, whose buffer may be NULL), the result (fetching and
// compare calls; registered, as the device writes it) and the compare value.
struct atomic_bufs {
    void* opnd = nullptr;
    void* opnd_desc = nullptr;
    void* res = nullptr;
    void* res_desc = nullptr;
    void* cmp = nullptr;
};

ssize_t gather_buffers(const atomic_req& q, const atomic_row& row, atomic_bufs& b) {
    if (row.wire != atomic_wire::rdma_read)
        if (ssize_t r = one_element("the operand", q.op_iov, q.op_count, q.op_desc, b.opnd,
                                    b.opnd_desc))
            return r;
    if (q.kind != atomic_kind::base) {
        if (ssize_t r = one_element("the result", q.res_iov, q.res_count, q.res_desc, b.res,
                                    b.res_desc))
            return r;
        if (!b.res_desc) {
            EVD_WARN(FI_LOG_EP_DATA, "%s: the result buffer has no memory descriptor (FI_MR_LOCAL: "
                     "pass fi_mr_desc() of a registration covering it)\n", atomic_kind_name(q.kind));
            return -FI_EINVAL;
        }
    }
    void* cmp_desc = nullptr;
    if (q.kind == atomic_kind::compare)
        if (ssize_t r = one_element("the compare value", q.cmp_iov, q.cmp_count, nullptr, b.cmp,
                                    cmp_desc))
            return r;
    return 0;
}

// The verbs work request of the row: the opcode, the remote side, and where
// the 8 bytes come from or go to. The operand and compare values are copied
// into the request now.
ssize_t build_wr(ep* e, const atomic_req& q, const atomic_row& row, const atomic_bufs& b,
                 struct ibv_send_wr& wr, struct ibv_sge& sge) {
    sge.length = kAtomicSize;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (q.flags & FI_FENCE) wr.send_flags |= IBV_SEND_FENCE;
    switch (row.wire) {
    case atomic_wire::fetch_add:
    case atomic_wire::cmp_swap:
        wr.opcode = row.wire == atomic_wire::fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD
                                                       : IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.remote_addr = q.addr;
        wr.wr.atomic.rkey = static_cast<uint32_t>(q.key);
        if (row.wire == atomic_wire::fetch_add) {
            wr.wr.atomic.compare_add = load8(b.opnd);
        } else {
            wr.wr.atomic.compare_add = load8(b.cmp);
            wr.wr.atomic.swap = load8(b.opnd);
        }
        if (q.kind == atomic_kind::base) {  // the old value goes to the domain's sink
            if (!e->dom->atomic_sink_mr) {
                EVD_WARN(FI_LOG_EP_DATA, "fi_atomic(FI_SUM): the domain has no atomic sink (see "
                         "the fi_domain warning)\n");
                return -FI_ENOMEM;
            }
            sge.addr = reinterpret_cast<uintptr_t>(e->dom->atomic_sink.get());
            sge.lkey = e->dom->atomic_sink_mr->lkey;
        } else {
            sge.addr = reinterpret_cast<uintptr_t>(b.res);
            sge.lkey = mr_desc_lkey(b.res_desc);
        }
        return 0;
    case atomic_wire::rdma_write: {
        const bool inject = q.flags & FI_INJECT;
        wr.opcode = IBV_WR_RDMA_WRITE;
        sge.addr = reinterpret_cast<uintptr_t>(b.opnd);
        if (ep_max_inline(e) >= kAtomicSize) {
            wr.send_flags |= IBV_SEND_INLINE;  // copied now: no descriptor needed
        } else if (inject || !b.opnd_desc) {
            EVD_WARN(FI_LOG_EP_DATA, "fi_atomic(FI_ATOMIC_WRITE): the endpoint cannot send 8 "
                     "bytes inline%s\n", inject ? " (FI_INJECT)" : "; pass the operand's descriptor");
            return -FI_EINVAL;
        } else {
            sge.lkey = mr_desc_lkey(b.opnd_desc);
        }
        break;
    }
    case atomic_wire::rdma_read:
        wr.opcode = IBV_WR_RDMA_READ;
        sge.addr = reinterpret_cast<uintptr_t>(b.res);
        sge.lkey = mr_desc_lkey(b.res_desc);
        break;
    }
    wr.wr.rdma.remote_addr = q.addr;  // RDMA write and read
    wr.wr.rdma.rkey = static_cast<uint32_t>(q.key);
    return 0;
}

ssize_t do_atomic(ep* e, const atomic_req& q) {
    const atomic_row* row = nullptr;
    if (ssize_t r = check_request(e, q, row)) return r;
    atomic_bufs b;
    if (ssize_t r = gather_buffers(q, *row, b)) return r;
    struct ibv_send_wr wr {};
    struct ibv_sge sge {};
    if (ssize_t r = build_wr(e, q, *row, b, wr, sge)) return r;
    const tx_kind kind = row->counter == FI_READ ? tx_kind::read : tx_kind::write;
    return ep_post_sq(e, wr, kind, !q.no_ctx && ep_tx_completion(e, q.flags), q.no_ctx,
                      q.context);
}

// ---------------------------------------------------------------- base
ssize_t at_write(struct fid_ep* f, const void* buf, size_t count, void* desc, fi_addr_t,
                 uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct fi_ioc ioc = {const_cast<void*>(buf), count};
    return do_atomic(e, {atomic_kind::base, &ioc, &desc, 1, nullptr, 0, nullptr, nullptr, 0, addr,
                         key, dt, op, context, e->op_flags_tx, false});
}

ssize_t at_writev(struct fid_ep* f, const struct fi_ioc* iov, void** desc, size_t count,
                  fi_addr_t, uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
                  void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    return do_atomic(e, {atomic_kind::base, iov, desc, count, nullptr, 0, nullptr, nullptr, 0,
                         addr, key, dt, op, context, e->op_flags_tx, false});
}

int check_msg(const char* who, const struct fi_msg_atomic* msg) {
    if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: exactly one rma_iov is supported\n", who);
        return -FI_EINVAL;
    }
    if (msg->rma_iov[0].count > 1) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: rma_iov count %zu; evd does one element per request\n",
                 who, msg->rma_iov[0].count);
        return -FI_EMSGSIZE;
    }
    if (!msg->rma_iov[0].count) {
        EVD_WARN(FI_LOG_EP_DATA, "%s: rma_iov count 0\n", who);
        return -FI_EINVAL;
    }
    return 0;
}

ssize_t at_writemsg(struct fid_ep* f, const struct fi_msg_atomic* msg, uint64_t flags) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    if (int r = check_msg("fi_atomicmsg", msg)) return r;
    return do_atomic(e, {atomic_kind::base, msg->msg_iov, msg->desc, msg->iov_count, nullptr, 0,
                         nullptr, nullptr, 0, msg->rma_iov[0].addr, msg->rma_iov[0].key,
                         msg->datatype, msg->op, msg->context, flags, false});
}

ssize_t at_inject(struct fid_ep* f, const void* buf, size_t count, fi_addr_t, uint64_t addr,
                  uint64_t key, enum fi_datatype dt, enum fi_op op) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct fi_ioc ioc = {const_cast<void*>(buf), count};
    return do_atomic(e, {atomic_kind::base, &ioc, nullptr, 1, nullptr, 0, nullptr, nullptr, 0,
                         addr, key, dt, op, nullptr, FI_INJECT, true});
}

// ---------------------------------------------------------------- fetch
ssize_t at_readwrite(struct fid_ep* f, const void* buf, size_t count, void* desc, void* result,
                     void* result_desc, fi_addr_t, uint64_t addr, uint64_t key,
                     enum fi_datatype dt, enum fi_op op, void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct fi_ioc ioc = {const_cast<void*>(buf), count};
    struct fi_ioc res = {result, count};
    return do_atomic(e, {atomic_kind::fetch, &ioc, &desc, 1, nullptr, 0, &res, &result_desc, 1,
                         addr, key, dt, op, context, e->op_flags_tx, false});
}

ssize_t at_readwritev(struct fid_ep* f, const struct fi_ioc* iov, void** desc, size_t count,
                      struct fi_ioc* resultv, void** result_desc, size_t result_count, fi_addr_t,
                      uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
                      void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    return do_atomic(e, {atomic_kind::fetch, iov, desc, count, nullptr, 0, resultv, result_desc,
                         result_count, addr, key, dt, op, context, e->op_flags_tx, false});
}

ssize_t at_readwritemsg(struct fid_ep* f, const struct fi_msg_atomic* msg, struct fi_ioc* resultv,
                        void** result_desc, size_t result_count, uint64_t flags) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    if (int r = check_msg("fi_fetch_atomicmsg", msg)) return r;
    return do_atomic(e, {atomic_kind::fetch, msg->msg_iov, msg->desc, msg->iov_count, nullptr, 0,
                         resultv, result_desc, result_count, msg->rma_iov[0].addr,
                         msg->rma_iov[0].key, msg->datatype, msg->op, msg->context, flags, false});
}

// ---------------------------------------------------------------- compare
ssize_t at_compwrite(struct fid_ep* f, const void* buf, size_t count, void* desc,
                     const void* compare, void*, void* result, void* result_desc, fi_addr_t,
                     uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
                     void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    struct fi_ioc ioc = {const_cast<void*>(buf), count};
    struct fi_ioc cmp = {const_cast<void*>(compare), count};
    struct fi_ioc res = {result, count};
    return do_atomic(e, {atomic_kind::compare, &ioc, &desc, 1, &cmp, 1, &res, &result_desc, 1,
                         addr, key, dt, op, context, e->op_flags_tx, false});
}

ssize_t at_compwritev(struct fid_ep* f, const struct fi_ioc* iov, void** desc, size_t count,
                      const struct fi_ioc* comparev, void**, size_t compare_count,
                      struct fi_ioc* resultv, void** result_desc, size_t result_count, fi_addr_t,
                      uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
                      void* context) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    return do_atomic(e, {atomic_kind::compare, iov, desc, count, comparev, compare_count, resultv,
                         result_desc, result_count, addr, key, dt, op, context, e->op_flags_tx,
                         false});
}

ssize_t at_compwritemsg(struct fid_ep* f, const struct fi_msg_atomic* msg,
                        const struct fi_ioc* comparev, void**, size_t compare_count,
                        struct fi_ioc* resultv, void** result_desc, size_t result_count,
                        uint64_t flags) {
    ep* e = ep_of(f);
    if (!e) return -FI_EINVAL;
    if (int r = check_msg("fi_compare_atomicmsg", msg)) return r;
    return do_atomic(e, {atomic_kind::compare, msg->msg_iov, msg->desc, msg->iov_count, comparev,
                         compare_count, resultv, result_desc, result_count, msg->rma_iov[0].addr,
                         msg->rma_iov[0].key, msg->datatype, msg->op, msg->context, flags, false});
}

// ---------------------------------------------------------------- valid
int valid(struct fid_ep* f, atomic_kind k, enum fi_datatype dt, enum fi_op op, size_t* count) {
    ep* e = ep_of(f);
    if (!e || !count) {
        EVD_WARN(FI_LOG_EP_DATA, "%s valid: %s\n", atomic_kind_name(k),
                 e ? "count is NULL" : "not an evd endpoint");
        return -FI_EINVAL;
    }
    return atomic_valid(e->dom->dev->attr.orig_attr.atomic_cap, k, dt, op, count);
}
int at_writevalid(struct fid_ep* f, enum fi_datatype dt, enum fi_op op, size_t* count) {
    return valid(f, atomic_kind::base, dt, op, count);
}
int at_readwritevalid(struct fid_ep* f, enum fi_datatype dt, enum fi_op op, size_t* count) {
    return valid(f, atomic_kind::fetch, dt, op, count);
}
int at_compwritevalid(struct fid_ep* f, enum fi_datatype dt, enum fi_op op, size_t* count) {
    return valid(f, atomic_kind::compare, dt, op, count);
}

}  // namespace

// ---------------------------------------------------------------- ops table
struct fi_ops_atomic ep_atomic_ops = {
    .size = sizeof(struct fi_ops_atomic),
    .write = at_write,
    .writev = at_writev,
    .writemsg = at_writemsg,
    .inject = at_inject,
    .readwrite = at_readwrite,
    .readwritev = at_readwritev,
    .readwritemsg = at_readwritemsg,
    .compwrite = at_compwrite,
    .compwritev = at_compwritev,
    .compwritemsg = at_compwritemsg,
    .writevalid = at_writevalid,
    .readwritevalid = at_readwritevalid,
    .compwritevalid = at_compwritevalid,
};

}  // namespace evd
