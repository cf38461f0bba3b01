// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Wait sets (fi_wait_open), poll sets (fi_poll_open) and fi_trywait.
// Owned by the EQ implementation (wait.cpp).
#pragma once

#include "evd.h"

namespace evd {

int wait_open(struct fid_fabric* fab, struct fi_wait_attr* attr, struct fid_wait** waitset);
int poll_open(struct fid_domain* dom, struct fi_poll_attr* attr, struct fid_poll** pollset);
int trywait(struct fid_fabric* fab, struct fid** fids, int count);

}  // namespace evd
