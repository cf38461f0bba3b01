// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "wait.h"

namespace evd {
int wait_open(struct fid_fabric*, struct fi_wait_attr*, struct fid_wait**) { return -FI_ENOSYS; }
int poll_open(struct fid_domain*, struct fi_poll_attr*, struct fid_poll**) { return -FI_ENOSYS; }
int trywait(struct fid_fabric*, struct fid**, int) { return -FI_ENOSYS; }
}  // namespace evd
