// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "async.h"

namespace evd {
void async_dispatch(devctx*, const struct ibv_async_event&) noexcept {}  // placeholder
}  // namespace evd
