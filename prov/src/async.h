// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hardware async events (ibv_get_async_event) -> EQ records.
// Owned by the async-event implementation (async.cpp): the translation table
// (data, one place), routing to the owning object's EQ, fi_eq_strerror text.
#pragma once

#include <infiniband/verbs.h>

#include "devctx.h"
#include "evd.h"

namespace evd {

// Called by devctx_poll_async() for every event read from a device's async
// fd, BEFORE ibv_ack_async_event (the caller acks). Translates, routes and
// posts the record; never throws.
void async_dispatch(devctx* d, const struct ibv_async_event& ev) noexcept;

}  // namespace evd
