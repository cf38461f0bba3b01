// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evd::guard: an exception thrown inside an entry point becomes the documented
// error code (and a FI_WARN naming the entry point), never a crash.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <sys/types.h>

#include "evd.h"

namespace {

int entry_returns(int v) {
    return evd::guard([&] { return v; });
}
int entry_out_of_memory() {
    return evd::guard([]() -> int { throw std::bad_alloc(); });
}
ssize_t entry_std_exception() {
    return evd::guard([]() -> ssize_t { throw std::runtime_error("broken invariant"); });
}
int entry_anything_else() {
    return evd::guard([]() -> int { throw 42; });
}

TEST(Guard, PassesTheBodysResultThrough) {
    EXPECT_EQ(entry_returns(0), 0);
    EXPECT_EQ(entry_returns(-FI_EINVAL), -FI_EINVAL);
    EXPECT_EQ(entry_returns(7), 7);
}

TEST(Guard, AllocationFailureIsNoMemory) { EXPECT_EQ(entry_out_of_memory(), -FI_ENOMEM); }

TEST(Guard, OtherExceptionsAreOther) {
    EXPECT_EQ(entry_std_exception(), -FI_EOTHER);
    EXPECT_EQ(entry_anything_else(), -FI_EOTHER);
}

}  // namespace
