// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Passive and active MSG endpoints. Owned by the connection-management
// implementation (ep_msg.cpp, pep.cpp, cm.cpp); the data-path ops tables of an
// active endpoint live in ep_data.cpp (owned by the data-path implementation).
#pragma once

#include "evd.h"

namespace evd {

// fabric op fi_passive_ep
int pep_open(struct fid_fabric* fab, struct fi_info* info, struct fid_pep** pep, void* context);
// domain op fi_endpoint
int ep_open(struct fid_domain* dom, struct fi_info* info, struct fid_ep** ep, void* context);

}  // namespace evd
