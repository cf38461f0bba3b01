// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evdtest::held (test/common/held.h), the owner tests give the objects they
// open: it closes what it holds when its scope ends, and keeps what refused
// to close. Through the real libfabric, on a fabric with no device.
#include <gtest/gtest.h>
#include <rdma/fi_eq.h>

#include "../common/common.h"
#include "../common/held.h"

using evdtest::held;

namespace {

// What a failed ASSERT_* returning early from a test leaves: the EQ is closed
// with its owner's scope, so its fabric closes afterwards.
TEST(Held, ClosesWhatItHoldsAtTheEndOfItsScope) {
    held<struct fid_fabric> fab{evdtest::open_fabric()};
    ASSERT_NE(fab.get(), nullptr);
    {
        held<struct fid_eq> eq;
        struct fi_eq_attr a {};
        ASSERT_EQ(fi_eq_open(fab, &a, eq.out(), nullptr), 0);
        ASSERT_NE(eq.get(), nullptr);
        EXPECT_EQ(fi_close(&fab->fid), -FI_EBUSY);  // the EQ is open on it
    }
    EXPECT_EQ(fab.close(), 0);
    EXPECT_EQ(fab.get(), nullptr);
    EXPECT_EQ(fab.close(), 0);  // nothing held: nothing to close
}

// close() returns fi_close's answer; an object that refused stays held, as
// it stays open, and closes later.
TEST(Held, KeepsWhatRefusedToClose) {
    held<struct fid_fabric> fab{evdtest::open_fabric()};
    ASSERT_NE(fab.get(), nullptr);
    held<struct fid_eq> eq;
    struct fi_eq_attr a {};
    ASSERT_EQ(fi_eq_open(fab, &a, eq.out(), nullptr), 0);
    EXPECT_EQ(fab.close(), -FI_EBUSY);
    EXPECT_NE(fab.get(), nullptr);
    EXPECT_EQ(eq.close(), 0);
    EXPECT_EQ(fab.close(), 0);
}

// Moving hands the object over; out() closes what was held before the open
// call writes the new one.
TEST(Held, MovesAndReopens) {
    held<struct fid_fabric> fab{evdtest::open_fabric()};
    ASSERT_NE(fab.get(), nullptr);
    struct fi_eq_attr a {};
    held<struct fid_eq> first;
    ASSERT_EQ(fi_eq_open(fab, &a, first.out(), nullptr), 0);
    held<struct fid_eq> second = std::move(first);
    EXPECT_EQ(first.get(), nullptr);
    ASSERT_NE(second.get(), nullptr);
    ASSERT_EQ(fi_eq_open(fab, &a, second.out(), nullptr), 0);  // the first EQ closed
    EXPECT_EQ(second.close(), 0);
    EXPECT_EQ(fab.close(), 0);  // one EQ was opened twice, none is left
}

}  // namespace
