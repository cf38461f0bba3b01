// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "fabric.h"

namespace evd {
int fabric_open(struct fi_fabric_attr*, struct fid_fabric**, void*) { return -FI_ENOSYS; }
}  // namespace evd
