// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The atomic operations evd offers (prov/src/msg/atomic_table.cpp): exactly the
// combinations listed here, with fi_query_atomic's and fi_*atomicvalid's
// rules, and every row printed in fi_evd(7).
#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "msg/atomic_table.h"

using namespace evd;

namespace {

using combo = std::tuple<atomic_kind, int, int>;

// Written out independently of the table: what a verbs device can do
// atomically on one 8-byte word, and the aligned 8-byte read/write verbs'
// provider calls atomic.
const std::set<combo> kExpected = {
    {atomic_kind::base, FI_SUM, FI_INT64},
    {atomic_kind::base, FI_SUM, FI_UINT64},
    {atomic_kind::base, FI_ATOMIC_WRITE, FI_INT64},
    {atomic_kind::base, FI_ATOMIC_WRITE, FI_UINT64},
    {atomic_kind::base, FI_ATOMIC_WRITE, FI_DOUBLE},
    {atomic_kind::fetch, FI_SUM, FI_INT64},
    {atomic_kind::fetch, FI_SUM, FI_UINT64},
    {atomic_kind::fetch, FI_ATOMIC_READ, FI_INT64},
    {atomic_kind::fetch, FI_ATOMIC_READ, FI_UINT64},
    {atomic_kind::fetch, FI_ATOMIC_READ, FI_DOUBLE},
    {atomic_kind::compare, FI_CSWAP, FI_INT64},
    {atomic_kind::compare, FI_CSWAP, FI_UINT64},
};

const atomic_kind kKinds[] = {atomic_kind::base, atomic_kind::fetch, atomic_kind::compare};

uint64_t query_flags(atomic_kind k) {
    return k == atomic_kind::fetch ? FI_FETCH_ATOMIC : k == atomic_kind::compare ? FI_COMPARE_ATOMIC : 0;
}

}  // namespace

TEST(AtomicTable, ExactlyTheExpectedCombinations) {
    EXPECT_EQ(atomic_table_len, kExpected.size());
    for (atomic_kind k : kKinds)
        // every op and datatype of libfabric 1.17 and 2.x, and some past them
        for (int op = 0; op < 24; ++op)
            for (int dt = 0; dt < 24; ++dt) {
                const bool want = kExpected.count({k, op, dt}) > 0;
                const auto eop = static_cast<enum fi_op>(op);
                const auto edt = static_cast<enum fi_datatype>(dt);
                size_t count = 99;
                int r = atomic_valid(IBV_ATOMIC_HCA, k, edt, eop, &count);
                EXPECT_EQ(r, want ? 0 : -FI_EOPNOTSUPP)
                    << atomic_kind_name(k) << " op " << op << " dt " << dt;
                if (want) {
                    EXPECT_EQ(count, 1u);
                }
                EXPECT_EQ(atomic_lookup(k, eop, edt) != nullptr, want);
                struct fi_atomic_attr attr = {99, 99};
                r = atomic_query(IBV_ATOMIC_GLOB, edt, eop, &attr, query_flags(k));
                EXPECT_EQ(r, want ? 0 : -FI_EOPNOTSUPP);
                if (want) {
                    EXPECT_EQ(attr.count, 1u);
                    EXPECT_EQ(attr.size, 8u);
                }
            }
}

TEST(AtomicTable, DeviceWithoutAtomicsOffersNone) {
    for (const combo& c : kExpected) {
        size_t count = 0;
        EXPECT_EQ(atomic_valid(IBV_ATOMIC_NONE, std::get<0>(c),
                               static_cast<enum fi_datatype>(std::get<2>(c)),
                               static_cast<enum fi_op>(std::get<1>(c)), &count),
                  -FI_EOPNOTSUPP);
        struct fi_atomic_attr attr = {};
        EXPECT_EQ(atomic_query(IBV_ATOMIC_NONE, static_cast<enum fi_datatype>(std::get<2>(c)),
                               static_cast<enum fi_op>(std::get<1>(c)), &attr,
                               query_flags(std::get<0>(c))),
                  -FI_EOPNOTSUPP);
    }
}

TEST(AtomicTable, QueryFlagRules) {
    struct fi_atomic_attr attr = {};
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_CSWAP, &attr,
                           FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC),
              -FI_EBADFLAGS);
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_SUM, &attr, FI_TAGGED), -FI_EOPNOTSUPP);
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_SUM, &attr, FI_SEND), -FI_EBADFLAGS);
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_SUM, nullptr, 0), -FI_EINVAL);
    // values past the enums (2.x added FI_DIFF and small floats): not offered
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, static_cast<enum fi_datatype>(40), FI_SUM, &attr, 0),
              -FI_EOPNOTSUPP);
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, static_cast<enum fi_op>(40), &attr, 0),
              -FI_EOPNOTSUPP);
    // the kinds are told apart by the flags: a compare op is no base op
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_CSWAP, &attr, 0), -FI_EOPNOTSUPP);
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_ATOMIC_READ, &attr, 0), -FI_EOPNOTSUPP);
    EXPECT_EQ(atomic_query(IBV_ATOMIC_HCA, FI_UINT64, FI_ATOMIC_READ, &attr, FI_FETCH_ATOMIC), 0);
}

// What each row does on the wire and which counter it counts in
// (fi_endpoint(3): FI_READ counts fetching and compare atomics, FI_WRITE
// base atomics).
TEST(AtomicTable, WireAndCounterFollowTheKind) {
    for (size_t i = 0; i < atomic_table_len; ++i) {
        const atomic_row& r = atomic_table[i];
        EXPECT_EQ(r.counter, r.kind == atomic_kind::base ? uint64_t{FI_WRITE} : uint64_t{FI_READ});
        switch (r.op) {
        case FI_SUM: EXPECT_EQ(r.wire, atomic_wire::fetch_add); break;
        case FI_CSWAP: EXPECT_EQ(r.wire, atomic_wire::cmp_swap); break;
        case FI_ATOMIC_READ: EXPECT_EQ(r.wire, atomic_wire::rdma_read); break;
        case FI_ATOMIC_WRITE: EXPECT_EQ(r.wire, atomic_wire::rdma_write); break;
        default: ADD_FAILURE() << "unexpected op " << r.op;
        }
        // an integer add or compare of a double would be wrong
        if (r.datatype == FI_DOUBLE) {
            EXPECT_TRUE(r.wire == atomic_wire::rdma_read || r.wire == atomic_wire::rdma_write);
        }
    }
}

#ifdef EVD_SRCDIR
// man/parts/atomic.7 prints the table: one line per row, "kind<TAB>op<TAB>
// datatype<TAB>verbs work request<TAB>counter<TAB>what it does".
TEST(AtomicTable, ManPagePrintsEveryRow) {
    std::ifstream in(std::string(EVD_SRCDIR) + "/man/parts/atomic.7");
    ASSERT_TRUE(in.good()) << "man/parts/atomic.7 not found under " << EVD_SRCDIR;
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    size_t printed = 0;
    for (const auto& l : lines)
        if (l.rfind("fi_", 0) == 0 && l.find('\t') != std::string::npos) ++printed;
    EXPECT_EQ(printed, atomic_table_len) << "table lines in man/parts/atomic.7";
    for (size_t i = 0; i < atomic_table_len; ++i) {
        const atomic_row& r = atomic_table[i];
        char want[256], ops[32] = "", dts[32] = "";
        fi_tostr_r(ops, sizeof ops, &r.op, FI_TYPE_ATOMIC_OP);
        fi_tostr_r(dts, sizeof dts, &r.datatype, FI_TYPE_ATOMIC_TYPE);
        std::snprintf(want, sizeof want, "%s\t%s\t%s\t%s\t%s\t%s", atomic_kind_name(r.kind), ops,
                      dts, atomic_wire_name(r.wire), r.counter == FI_READ ? "FI_READ" : "FI_WRITE",
                      r.how);
        bool found = false;
        for (const auto& l : lines)
            if (l == want) found = true;
        EXPECT_TRUE(found) << "missing from man/parts/atomic.7: " << want;
    }
}
#endif
