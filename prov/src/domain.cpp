// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "domain.h"

namespace evd {
int domain_open(struct fid_fabric*, struct fi_info*, struct fid_domain**, void*) { return -FI_ENOSYS; }
}  // namespace evd
