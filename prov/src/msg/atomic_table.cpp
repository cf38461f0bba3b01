// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The atomic operations evd offers (atomic_table.h) and the rules of
// fi_query_atomic / fi_*atomicvalid over them.
#include "msg/atomic_table.h"

#include <rdma/fi_errno.h>

#include "evd.h"

namespace evd {

// FI_DOUBLE is offered only where the operation copies the 8 bytes
// unchanged (read, write): the device adds and compares integers, so a sum
// or a compare of doubles would be wrong (-0.0 and 0.0 differ bitwise).
// FI_FLOAT (4 bytes) has no 4-byte hardware atomic.
// clang-format off
const atomic_row atomic_table[] = {
    {atomic_kind::base,    FI_SUM,          FI_INT64,  atomic_wire::fetch_add,  FI_WRITE, "fetch-and-add; the old value is discarded"},
    {atomic_kind::base,    FI_SUM,          FI_UINT64, atomic_wire::fetch_add,  FI_WRITE, "fetch-and-add; the old value is discarded"},
    {atomic_kind::base,    FI_ATOMIC_WRITE, FI_INT64,  atomic_wire::rdma_write, FI_WRITE, "aligned 8-byte RDMA write"},
    {atomic_kind::base,    FI_ATOMIC_WRITE, FI_UINT64, atomic_wire::rdma_write, FI_WRITE, "aligned 8-byte RDMA write"},
    {atomic_kind::base,    FI_ATOMIC_WRITE, FI_DOUBLE, atomic_wire::rdma_write, FI_WRITE, "aligned 8-byte RDMA write"},
    {atomic_kind::fetch,   FI_SUM,          FI_INT64,  atomic_wire::fetch_add,  FI_READ,  "fetch-and-add"},
    {atomic_kind::fetch,   FI_SUM,          FI_UINT64, atomic_wire::fetch_add,  FI_READ,  "fetch-and-add"},
    {atomic_kind::fetch,   FI_ATOMIC_READ,  FI_INT64,  atomic_wire::rdma_read,  FI_READ,  "aligned 8-byte RDMA read"},
    {atomic_kind::fetch,   FI_ATOMIC_READ,  FI_UINT64, atomic_wire::rdma_read,  FI_READ,  "aligned 8-byte RDMA read"},
    {atomic_kind::fetch,   FI_ATOMIC_READ,  FI_DOUBLE, atomic_wire::rdma_read,  FI_READ,  "aligned 8-byte RDMA read"},
    {atomic_kind::compare, FI_CSWAP,        FI_INT64,  atomic_wire::cmp_swap,   FI_READ,  "compare-and-swap"},
    {atomic_kind::compare, FI_CSWAP,        FI_UINT64, atomic_wire::cmp_swap,   FI_READ,  "compare-and-swap"},
};
// clang-format on
const size_t atomic_table_len = sizeof(atomic_table) / sizeof(atomic_table[0]);

const atomic_row* atomic_lookup(atomic_kind kind, enum fi_op op, enum fi_datatype dt) noexcept {
    for (size_t i = 0; i < atomic_table_len; ++i) {
        const atomic_row& r = atomic_table[i];
        if (r.kind == kind && r.op == op && r.datatype == dt) return &r;
    }
    return nullptr;
}

const char* atomic_kind_name(atomic_kind k) noexcept {
    switch (k) {
    case atomic_kind::base: return "fi_atomic";
    case atomic_kind::fetch: return "fi_fetch_atomic";
    case atomic_kind::compare: return "fi_compare_atomic";
    }
    return "?";
}

const char* atomic_wire_name(atomic_wire w) noexcept {
    switch (w) {
    case atomic_wire::fetch_add: return "IBV_WR_ATOMIC_FETCH_AND_ADD";
    case atomic_wire::cmp_swap: return "IBV_WR_ATOMIC_CMP_AND_SWP";
    case atomic_wire::rdma_write: return "IBV_WR_RDMA_WRITE";
    case atomic_wire::rdma_read: return "IBV_WR_RDMA_READ";
    }
    return "?";
}

int atomic_valid(int atomic_cap, atomic_kind kind, enum fi_datatype dt, enum fi_op op,
                 size_t* count) noexcept {
    if (atomic_cap == IBV_ATOMIC_NONE) {
        EVD_INFO(FI_LOG_EP_DATA, "%s: the device has no atomic operations (atomic_cap NONE)\n",
                 atomic_kind_name(kind));
        return -FI_EOPNOTSUPP;
    }
    if (!atomic_lookup(kind, op, dt)) {
        char ops[32] = "", dts[32] = "";
        fi_tostr_r(ops, sizeof ops, &op, FI_TYPE_ATOMIC_OP);
        fi_tostr_r(dts, sizeof dts, &dt, FI_TYPE_ATOMIC_TYPE);
        EVD_INFO(FI_LOG_EP_DATA, "%s: %s on %s is not offered (fi_evd(7), ATOMIC OPERATIONS)\n",
                 atomic_kind_name(kind), ops, dts);
        return -FI_EOPNOTSUPP;
    }
    if (count) *count = 1;
    return 0;
}

int atomic_query(int atomic_cap, enum fi_datatype dt, enum fi_op op, struct fi_atomic_attr* attr,
                 uint64_t flags) noexcept {
    if (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC | FI_TAGGED)) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_query_atomic: flags 0x%llx: only FI_FETCH_ATOMIC, "
                 "FI_COMPARE_ATOMIC and FI_TAGGED are defined\n",
                 static_cast<unsigned long long>(flags));
        return -FI_EBADFLAGS;
    }
    if ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC)) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_query_atomic: FI_FETCH_ATOMIC and FI_COMPARE_ATOMIC "
                 "together\n");
        return -FI_EBADFLAGS;
    }
    if (flags & FI_TAGGED) {
        EVD_INFO(FI_LOG_DOMAIN, "fi_query_atomic: evd has no tagged atomics (FI_TAGGED)\n");
        return -FI_EOPNOTSUPP;
    }
    if (!attr) {
        EVD_WARN(FI_LOG_DOMAIN, "fi_query_atomic: attr is NULL\n");
        return -FI_EINVAL;
    }
    const atomic_kind k = (flags & FI_FETCH_ATOMIC)     ? atomic_kind::fetch
                          : (flags & FI_COMPARE_ATOMIC) ? atomic_kind::compare
                                                        : atomic_kind::base;
    size_t count = 0;
    if (int r = atomic_valid(atomic_cap, k, dt, op, &count)) return r;
    attr->count = count;
    attr->size = kAtomicSize;
    return 0;
}

}  // namespace evd
