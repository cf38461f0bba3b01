// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Source GID of a UD receive's 40-byte header (grh.h).
#include "dgram/grh.h"

#include <cstring>

namespace evd {

bool grh_source_gid(const uint8_t hdr[kGrhLen], uint8_t gid[16]) noexcept {
    const uint8_t v4 = hdr[20];
    if ((hdr[0] >> 4) != 6 && v4 == 0x45) {  // IPv4 header at byte 20
        std::memset(gid, 0, 16);
        gid[10] = gid[11] = 0xff;
        std::memcpy(gid + 12, hdr + 32, 4);
        return true;
    }
    if ((hdr[0] >> 4) == 6) {  // GRH or IPv6 header
        std::memcpy(gid, hdr + 8, 16);
        return true;
    }
    return false;
}

}  // namespace evd
