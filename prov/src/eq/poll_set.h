// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Poll sets (fi_poll_open, poll_set.cpp): EQs, CQs and counters of one domain
// polled together.
#pragma once

#include <rdma/fi_domain.h>

#include "evd.h"

namespace evd {

// domain op (fi_poll_open)
int poll_open(struct fid_domain* dom, struct fi_poll_attr* attr, struct fid_poll** pollset);

}  // namespace evd
