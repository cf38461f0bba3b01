// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// A port's GID table as a datagram endpoint needs it: which entry stands
// for a given local address (the endpoint's name), and which local entry
// an address handle to a given peer GID is sent from (its source GID). On
// RoCE the entry must be a RoCE v2 GID of the same family as the peer's
// (an IPv4-mapped GID talks to IPv4-mapped GIDs); on InfiniBand entry 0.
// Queried when a name or an address handle is made, never per message.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace evd {

// One usable entry of the table: its index and its GID.
struct gid_entry {
    int index = -1;
    uint8_t gid[16] = {};
};

// The entry of port `port` holding exactly `gid` (a RoCE v2 entry when the
// link is Ethernet); index -1 when there is none.
gid_entry gid_find(struct ibv_context* verbs, uint8_t port, const uint8_t gid[16]);

// The local entry to send to `dgid` from: on Ethernet the first RoCE v2 GID
// of the same kind (IPv4-mapped or not; for a link-local peer a link-local
// one first); on InfiniBand entry 0. Index -1 when the port has none.
gid_entry gid_source_for(struct ibv_context* verbs, uint8_t port, const uint8_t dgid[16]);

}  // namespace evd
