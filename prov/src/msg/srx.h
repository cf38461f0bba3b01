// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Shared receive contexts (fi_srx_context(3), srx.cpp): one ibv_srq that the
// endpoints bound to it take their receives from.
//
// How endpoints use them (ep_msg.cpp): fi_ep_bind(ep, srx_fid, 0) resolves
// the SRQ with srx_ibv() and passes it in ibv_qp_init_attr::srq when the QP
// is created; the endpoint holds srx_bind_ref() while bound.
#pragma once

#include <infiniband/verbs.h>

#include "evd.h"

namespace evd {

// domain op fi_srx_context
int srx_open(struct fid_domain* dom, struct fi_rx_attr* attr, struct fid_ep** rx_ep,
             void* context);
// nullptr when f is not an evd shared receive context.
struct ibv_srq* srx_ibv(struct fid* f);
// The context was opened on a domain for FI_EP_DGRAM: its receives carry
// the UD header, so only datagram endpoints may bind it (and only they).
bool srx_for_dgram(struct fid* f);
void srx_bind_ref(struct fid* f);
void srx_bind_unref(struct fid* f);

}  // namespace evd
