// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// evd's fabric entry point called directly: its own argument checks, which
// libfabric's core never lets an application reach (it refuses NULL first).
#include <gtest/gtest.h>

#include "fabric.h"

namespace {

TEST(FabricOpen, NullArgumentsAreInvalid) {
    struct fi_fabric_attr attr {};
    attr.api_version = FI_VERSION(1, 17);
    struct fid_fabric* fab = nullptr;
    EXPECT_EQ(evd::fabric_open(nullptr, &fab, nullptr), -FI_EINVAL);
    EXPECT_EQ(fab, nullptr);
    EXPECT_EQ(evd::fabric_open(&attr, nullptr, nullptr), -FI_EINVAL);
    ASSERT_EQ(evd::fabric_open(&attr, &fab, nullptr), 0);
    ASSERT_NE(fab, nullptr);
    EXPECT_EQ(fab->fid.fclass, FI_CLASS_FABRIC);
    EXPECT_EQ(fi_close(&fab->fid), 0);
}

}  // namespace
