// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "cq.h"

namespace evd {
// placeholders until the data path lands
int srx_open(struct fid_domain*, struct fi_rx_attr*, struct fid_ep**, void*) { return -FI_ENOSYS; }
struct ibv_srq* srx_ibv(struct fid*) { return nullptr; }
void srx_bind_ref(struct fid*) {}
void srx_bind_unref(struct fid*) {}
}  // namespace evd
