// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Completion queues and counters. Owned by the data-path implementation.
#pragma once

#include "evd.h"

namespace evd {

int cq_open(struct fid_domain* dom, struct fi_cq_attr* attr, struct fid_cq** cq, void* context);
int cntr_open(struct fid_domain* dom, struct fi_cntr_attr* attr, struct fid_cntr** cntr,
              void* context);
int srx_open(struct fid_domain* dom, struct fi_rx_attr* attr, struct fid_ep** rx_ep,
             void* context);

}  // namespace evd
