// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Which atomic operations evd offers on MSG endpoints (fi_atomic(3)), and
// how each becomes one verbs work request: data in atomic_table.cpp, one row
// per (kind, op, datatype), covered by test/unit/atomic_table.cpp and printed
// in fi_evd(7) "ATOMIC OPERATIONS". A combination without a row is not
// offered (-FI_EOPNOTSUPP).
//
// What verbs hardware does atomically is an 8-byte fetch-and-add and an
// 8-byte compare-and-swap on a naturally aligned target. Everything evd
// offers is one of those, or an aligned 8-byte RDMA write or read (the
// FI_ATOMIC_WRITE/FI_ATOMIC_READ of libfabric's verbs provider): one element
// (count 1) per request, always.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/fi_atomic.h>

#include <cstddef>
#include <cstdint>

namespace evd {

// Which of the three fi_atomic families a call belongs to.
enum class atomic_kind : uint8_t { base = 0, fetch, compare };

// How a row is carried out on the wire.
enum class atomic_wire : uint8_t {
    fetch_add,   // IBV_WR_ATOMIC_FETCH_AND_ADD: compare_add = operand
    cmp_swap,    // IBV_WR_ATOMIC_CMP_AND_SWP: compare_add = compare, swap = operand
    rdma_write,  // IBV_WR_RDMA_WRITE of the 8-byte operand
    rdma_read,   // IBV_WR_RDMA_READ of the 8-byte target into the result
};

struct atomic_row {
    atomic_kind kind;
    enum fi_op op;
    enum fi_datatype datatype;
    atomic_wire wire;
    uint64_t counter;  // the counter it counts in: FI_READ or FI_WRITE (fi_cntr(3))
    const char* how;   // one line for the man page
};

extern const atomic_row atomic_table[];
extern const size_t atomic_table_len;

// Size of the one element every row works on.
inline constexpr size_t kAtomicSize = 8;

// The row for (kind, op, datatype), or nullptr (not offered).
const atomic_row* atomic_lookup(atomic_kind kind, enum fi_op op, enum fi_datatype dt) noexcept;

// fi_query_atomic's answer on a device (atomic_cap from ibv_query_device):
// 0 with attr filled (count 1, size 8), -FI_EBADFLAGS for flags outside
// FI_FETCH_ATOMIC|FI_COMPARE_ATOMIC|FI_TAGGED or with both of the first two,
// -FI_EOPNOTSUPP for FI_TAGGED (evd has no tagged atomics), for a device
// without atomics and for combinations without a row (any datatype or op
// value, known to this libfabric or not), -FI_EINVAL for a NULL attr. Logs
// why at info level.
int atomic_query(int atomic_cap, enum fi_datatype dt, enum fi_op op, struct fi_atomic_attr* attr,
                 uint64_t flags) noexcept;

// The same rule for the endpoint's fi_*atomicvalid calls: *count = 1.
int atomic_valid(int atomic_cap, atomic_kind kind, enum fi_datatype dt, enum fi_op op,
                 size_t* count) noexcept;

const char* atomic_kind_name(atomic_kind k) noexcept;
const char* atomic_wire_name(atomic_wire w) noexcept;

}  // namespace evd
