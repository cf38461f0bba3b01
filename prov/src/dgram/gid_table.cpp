// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Looking up a port's GID table for datagram endpoints (gid_table.h).
#include "dgram/gid_table.h"

#include <cstring>

#include "dgram/ud_addr.h"
#include "evd.h"

namespace evd {

namespace {

bool is_link_local(const uint8_t g[16]) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }
bool is_zero(const uint8_t g[16]) {
    for (int i = 0; i < 16; ++i)
        if (g[i]) return false;
    return true;
}

// Calls f(index, gid) for every valid entry of the port usable for UD on
// its link: RoCE v2 entries on Ethernet, every entry on InfiniBand. Stops
// when f returns true.
template <class F>
void each_gid(struct ibv_context* verbs, uint8_t port, F&& f) {
    struct ibv_port_attr pa {};
    if (ibv_query_port(verbs, port, &pa)) return;
    const bool eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    for (int i = 0; i < pa.gid_tbl_len; ++i) {
        struct ibv_gid_entry ge {};
        if (ibv_query_gid_ex(verbs, port, static_cast<uint32_t>(i), &ge, 0)) continue;
        if (is_zero(ge.gid.raw)) continue;
        if (eth && ge.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
        if (f(i, ge.gid.raw)) return;
    }
}

}  // namespace

gid_entry gid_find(struct ibv_context* verbs, uint8_t port, const uint8_t gid[16]) {
    gid_entry out;
    each_gid(verbs, port, [&](int i, const uint8_t* g) {
        if (std::memcmp(g, gid, 16)) return false;
        out.index = i;
        std::memcpy(out.gid, g, 16);
        return true;
    });
    return out;
}

gid_entry gid_source_for(struct ibv_context* verbs, uint8_t port, const uint8_t dgid[16]) {
    struct ibv_port_attr pa {};
    gid_entry out;
    if (ibv_query_port(verbs, port, &pa)) return out;
    if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
        union ibv_gid g {};
        if (ibv_query_gid(verbs, port, 0, &g) == 0) {
            out.index = 0;
            std::memcpy(out.gid, g.raw, 16);
        }
        return out;
    }
    struct in_addr v4 {};
    const bool want_v4 = gid_is_v4_mapped(dgid, &v4);
    const bool want_ll = !want_v4 && is_link_local(dgid);
    gid_entry fallback;
    each_gid(verbs, port, [&](int i, const uint8_t* g) {
        struct in_addr a {};
        const bool v4g = gid_is_v4_mapped(g, &a);
        if (v4g != want_v4) return false;
        if (!want_v4 && is_link_local(g) != want_ll) {
            if (fallback.index < 0) {
                fallback.index = i;
                std::memcpy(fallback.gid, g, 16);
            }
            return false;
        }
        out.index = i;
        std::memcpy(out.gid, g, 16);
        return true;
    });
    return out.index >= 0 ? out : fallback;
}

}  // namespace evd
