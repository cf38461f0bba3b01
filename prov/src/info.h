// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fi_getinfo: device enumeration and hint filtering. Owned by the foundation (info.cpp).
#pragma once

#include "evd.h"

namespace evd {

// provider->getinfo
int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const struct fi_info* hints, struct fi_info** info);
void info_cleanup() noexcept;

}  // namespace evd
