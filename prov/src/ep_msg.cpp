// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "ep.h"

namespace evd {
int ep_open(struct fid_domain*, struct fi_info*, struct fid_ep**, void*) { return -FI_ENOSYS; }
}  // namespace evd
