// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// What fi_getinfo's hint checks (info_hints.cpp) hand to the construction of
// the fi_info list (info.cpp), and nothing else uses.
#pragma once

#include <rdma/fabric.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "info/info.h"

namespace evd {

// What the hints ask for beyond plain filtering (computed once per call).
struct wants {
    uint64_t caps = kCaps;
    uint64_t mode = FI_RX_CQ_DATA;
    int mr_mode = kMrMode;
    bool cq_data = true;
    bool dgram = false;  // hints->ep_attr->type is FI_EP_DGRAM: UD endpoints only
};

inline uint32_t format_of_family(int family) {
    switch (family) {
    case AF_INET: return FI_SOCKADDR_IN;
    case AF_INET6: return FI_SOCKADDR_IN6;
    case AF_IB: return FI_SOCKADDR_IB;
    default: return FI_FORMAT_UNSPEC;
    }
}

// Does an address of `family` satisfy hints->addr_format?
inline bool family_fits(uint32_t want, int family) {
    switch (want) {
    case FI_FORMAT_UNSPEC: return true;
    case FI_SOCKADDR: return family == AF_INET || family == AF_INET6 || family == AF_IB;
    default: return format_of_family(family) == want;
    }
}

// The bits of an enum field as given, without loading an invalid enum value.
template <class E>
unsigned raw_enum(const E& e) {
    static_assert(sizeof(E) == sizeof(unsigned));
    unsigned v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

// The checks of the hints that need no device (the hint rules, provider name,
// address lengths and formats, capabilities, CQ data, MR mode), filling w.
// 0, or the documented error.
int static_check(uint32_t version, const fi_info* h, wants* w);
// "" when device d satisfies the hints' limits (the sizes they ask for, the
// protocol, an active port), else the reason it does not.
std::string device_mismatch(const dev_desc& d, const fi_info* h, bool dgram = false);

}  // namespace evd
