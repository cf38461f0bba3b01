// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Helpers shared by tests that reach evd through the real libfabric API.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

namespace evdtest {

// Points libfabric at the freshly built plugin (EVD_PROVIDER_DIR) and selects
// evd. Idempotent; called by every fixture before the first fi_* call.
void use_build_tree_provider();

// Opens an evd fabric without any RDMA device (fi_fabric with prov_name "evd").
struct fid_fabric* open_fabric();

}  // namespace evdtest
