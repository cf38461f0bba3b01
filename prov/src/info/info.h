// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fi_getinfo: hint filtering and fi_info construction (info.cpp), device
// description and address resolution (info_devices.cpp).
//
// getinfo() is split in two so the hint logic can be tested without hardware:
//   1. enumerate + resolve (needs rdma-core, info_devices.cpp): every device librdmacm sees is
//      described as a dev_desc (limits straight from ibv_query_device_ex /
//      ibv_query_port, the addresses of its netdevs); node/service/src/dest
//      are resolved through librdmacm into an addr_query naming the device
//      that owns the address;
//   2. build_infos() (info.cpp): a pure function of (devices, query, hints, version)
//      that returns the fi_info list or the reason (errno) nothing matched.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "evd.h"

namespace evd {

// provider->getinfo
int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const struct fi_info* hints, struct fi_info** info);
void info_cleanup() noexcept;

// A socket address of any family evd can use (AF_INET, AF_INET6, AF_IB).
struct sockaddr_any {
    struct sockaddr_storage ss {};
    socklen_t len = 0;
    int family() const noexcept { return len ? ss.ss_family : AF_UNSPEC; }
    const struct sockaddr* sa() const noexcept {
        return reinterpret_cast<const struct sockaddr*>(&ss);
    }
    bool set(const struct sockaddr* a, size_t n) noexcept;  // false when a is unusable
};

// One usable (device, port) as getinfo describes it. Every limit is what the
// device reported; nothing here is a provider constant.
struct dev_desc {
    std::string name;            // ibv_get_device_name(), the fi domain name
    int transport = 0;           // enum ibv_transport_type
    uint8_t port_num = 1;        // first active port
    uint8_t link_layer = 0;      // IBV_LINK_LAYER_* of that port
    int port_state = 0;          // enum ibv_port_state
    uint64_t subnet_prefix = 0;  // GID index 0 of the port, host order
    uint8_t gid[16] = {};        // raw GID index 0 (AF_IB source address)
    uint16_t pkey = 0xffff;      // P_Key index 0, host order

    // ibv_query_device_ex
    uint32_t max_qp = 0, max_qp_wr = 0, max_sge = 0, max_cq = 0, max_cqe = 0, max_mr = 0;
    uint32_t max_srq = 0, max_srq_wr = 0, max_srq_sge = 0;
    uint64_t max_mr_size = 0;
    // atomics (atomic_table.h): enum ibv_atomic_cap
    int atomic_cap = 0;
    // ibv_query_port
    uint64_t max_msg_sz = 0;
    // probed once per device by creating an RC QP (see devctx.cpp)
    uint32_t max_inline = 0;
    // FI_EP_DGRAM: the same for a UD QP (probed only for DGRAM hints), the
    // address handles the device can make, the port's active MTU in bytes
    uint32_t max_inline_ud = 0;
    uint32_t max_ah = 0;
    uint32_t active_mtu = 0;

    // Addresses of the device's network interfaces (port 0 of each).
    std::vector<sockaddr_any> addrs;
};

// node/service/hints->src_addr/dest_addr after resolution.
struct addr_query {
    bool any_device = true;       // false: only `device` qualifies
    std::string device;           // the device that owns/reaches the address
    sockaddr_any src;             // returned as fi_info::src_addr when set
    sockaddr_any dest;            // returned as fi_info::dest_addr when set
    bool src_port_only = false;   // src is only a port (service without node)
    // FI_EP_DGRAM: hints->src_addr as an FI_ADDR_IB_UD name (its GID picks
    // the device and address; its service is kept)
    bool has_ud_src = false;
    uint8_t ud_src[32] = {};
    // ... and the peer's name (hints->dest_addr, or node as the text form
    // "fi_addr_ib_ud://...": fi_info::dest_addr as given)
    bool has_ud_dest = false;
    uint8_t ud_dest[32] = {};
};

// Everything evd can do, used to build and to check fi_info (documented in
// fi_evd(7) GETINFO).
inline constexpr uint64_t kTxCaps = FI_MSG | FI_RMA | FI_ATOMIC | FI_SEND | FI_WRITE | FI_READ;
inline constexpr uint64_t kRxCaps =
    FI_MSG | FI_RMA | FI_ATOMIC | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE;
inline constexpr uint64_t kDomainCaps = FI_LOCAL_COMM | FI_REMOTE_COMM;
inline constexpr uint64_t kCaps = kTxCaps | kRxCaps | kDomainCaps;
// FI_EP_DGRAM endpoints (UD): messages only, and the sender of each receive
// when asked (FI_SOURCE).
inline constexpr uint64_t kDgramTxCaps = FI_MSG | FI_SEND;
inline constexpr uint64_t kDgramRxCaps = FI_MSG | FI_RECV | FI_SOURCE;
inline constexpr uint64_t kDgramCaps = kDgramTxCaps | kDgramRxCaps | kDomainCaps;
inline constexpr int kMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
inline constexpr uint64_t kMsgOrder = FI_ORDER_RAR | FI_ORDER_RMA_RAR | FI_ORDER_RAW |
                                      FI_ORDER_RMA_RAW | FI_ORDER_RAS | FI_ORDER_WAW |
                                      FI_ORDER_RMA_WAW | FI_ORDER_WAS | FI_ORDER_SAW |
                                      FI_ORDER_SAS | FI_ORDER_ATOMIC_RAR |
                                      FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW;
// The ordering bits about atomics, answered only by devices with atomics.
inline constexpr uint64_t kAtomicOrder =
    FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW;
inline constexpr uint64_t kTxOpFlags =
    FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_COMPLETION;
inline constexpr uint64_t kRxOpFlags = FI_COMPLETION;
inline constexpr size_t kCqDataSize = 4;   // ibv_send_wr::imm_data
inline constexpr size_t kMrKeySize = 4;    // ibv_mr::rkey
inline constexpr size_t kMaxErrData = 255; // largest rdma_cm private data carried by an EQ error

// The fabric name verbs uses for this device ("IB-0x<subnet prefix>" on IB
// transports, RoCE included; "Ethernet-iWARP" on iWARP).
std::string fabric_name(const dev_desc& d);
// The ep_attr->protocol of the device's endpoints: FI_PROTO_IWARP on iWARP,
// FI_PROTO_RDMA_CM_IB_RC on InfiniBand and RoCE.
uint32_t device_protocol(const dev_desc& d);
// The immediate data the device carries: kCqDataSize, 0 on iWARP (verbs
// answers the same).
size_t device_cq_data_size(const dev_desc& d);
// Port of an address (host order), and setting it.
void set_port(sockaddr_any& a, uint16_t port);
// An address as text, for logs.
std::string addr_str(const sockaddr_any& a);

// ---- the rdma-core side (info_devices.cpp)
struct devctx;
// Describes device c for the filter: its limits (ibv_query_device_ex and
// ibv_query_port) and identity.
void describe_device(devctx* c, dev_desc& d);
// The IP addresses of each device's netdevs: every up, non-loopback
// interface address an rdma_cm id binds to on that device.
void collect_addrs(std::vector<dev_desc>& devs);
// node/service/flags/hints -> addr_query (fi_getinfo(3) "node, service"),
// resolved through librdmacm; a negative FI_E* code when it cannot be.
int resolve_addresses(const char* node, const char* service, uint64_t flags,
                      const struct fi_info* h, addr_query& q);

// Pure hint filtering. Returns 0 and a non-empty list, -FI_ENODATA (nothing
// matches: every rejected hint is logged), -FI_EINVAL (malformed hints) or
// -FI_ENOMEM.
int build_infos(const std::vector<dev_desc>& devs, uint32_t version, const addr_query& q,
                const struct fi_info* hints, struct fi_info** out);

// Hints that do not depend on any device (ep type, caps, modes, formats...).
// Shared by build_infos() and getinfo() so a bad hint fails before rdma-core
// is touched.
int check_static_hints(uint32_t version, const struct fi_info* hints);

}  // namespace evd
