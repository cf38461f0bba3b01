// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The fixture of the internal tests that need a fabric and EQs: both opened
// by calling evd's own entry points (no libfabric core in between; the API
// tests' fixture, eq_util.h, goes through libfabric instead).
#pragma once

#include <gtest/gtest.h>

#include "eq/eq.h"
#include "fabric.h"

namespace evdtest {

class InternalFabric : public ::testing::Test {
protected:
    struct fid_fabric* fab = nullptr;

    void SetUp() override {
        struct fi_fabric_attr a {};
        a.api_version = FI_VERSION(1, 17);
        ASSERT_EQ(evd::fabric_open(&a, &fab, nullptr), 0);
    }
    void TearDown() override {
        if (fab) {
            EXPECT_EQ(fi_close(&fab->fid), 0);
        }
        fab = nullptr;
    }
    // An EQ on fab (the caller closes it).
    struct fid_eq* open_eq(size_t size, enum fi_wait_obj w = FI_WAIT_FD, uint64_t flags = FI_WRITE) {
        struct fi_eq_attr a {};
        a.size = size;
        a.flags = flags;
        a.wait_obj = w;
        struct fid_eq* q = nullptr;
        EXPECT_EQ(evd::eq_open(fab, &a, &q, nullptr), 0);
        return q;
    }
};

}  // namespace evdtest
