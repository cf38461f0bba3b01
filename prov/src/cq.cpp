// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "cq.h"

namespace evd {
// placeholders until the data path lands (real implementation follows)
int cq_open(struct fid_domain*, struct fi_cq_attr*, struct fid_cq**, void*) { return -FI_ENOSYS; }
cq* cq_from_fid(struct fid*) { return nullptr; }
struct ibv_cq* cq_ibv(cq*) { return nullptr; }
struct fid_domain* cq_domain(cq*) { return nullptr; }
void cq_bind_ref(cq*) {}
void cq_bind_unref(cq*) {}
int cq_attach_qp(cq*, uint32_t, ep*) { return -FI_ENOSYS; }
void cq_detach_qp(cq*, uint32_t) {}
int cq_trywait(cq*) { return -FI_ENOSYS; }
}  // namespace evd
