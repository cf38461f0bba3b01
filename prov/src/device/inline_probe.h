// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The largest inline payload a device's RC QPs accept (inline_probe.cpp).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace evd {

// ibv_query_device does not report the inline limit, so it is found by
// creating QPs: the largest max_inline_data an RC QP is created with (a
// binary search, about 17 QPs; devctx calls it once per device and process).
// 0 when the device inlines nothing or the probe cannot run.
uint32_t probe_max_inline(struct ibv_context* verbs, enum ibv_qp_type type = IBV_QPT_RC);

}  // namespace evd
