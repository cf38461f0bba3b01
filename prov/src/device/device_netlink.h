// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The one question evd asks the kernel's RDMA netlink interface (device_netlink.cpp).
#pragma once

#include <cstdint>

namespace evd {

// Asks the kernel (RDMA netlink, NLDEV GET dump, which lists registered
// devices only) whether the device with this index is still registered: an
// unregistering device leaves the dump at once, while its sysfs nodes (and a
// GET by index) linger until every user context is closed. No heap
// allocation (this runs on every last-domain close of a device).
// 1: registered, 0: gone, -1: cannot tell.
int rdma_nl_device_registered(uint32_t index);

}  // namespace evd
