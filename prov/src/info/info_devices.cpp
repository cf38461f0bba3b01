// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The rdma-core side of fi_getinfo (info.h): describing each device,
// listing the addresses of its netdevs, and resolving node/service/hints
// through librdmacm to the device that owns the address.
#include "info/info.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/ib.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <memory>
#include <string>

#include "device/devctx.h"
#include "owners.h"

namespace evd {

namespace {

// A synchronous rdma_cm id (no event channel): bind/resolve block and report
// through their return value.
cm_id_ptr sync_id(int ps) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(nullptr, &id, nullptr, static_cast<rdma_port_space>(ps))) return nullptr;
    return cm_id_ptr(id);
}

// The device an address is bound to ("" when none: wildcard or not RDMA).
std::string owner_of(const sockaddr_any& a) {
    cm_id_ptr id = sync_id(a.family() == AF_IB ? RDMA_PS_IB : RDMA_PS_TCP);
    if (!id) return "";
    sockaddr_any tmp = a;
    if (rdma_bind_addr(id.get(), const_cast<sockaddr*>(tmp.sa()))) return "";
    return id->verbs ? ibv_get_device_name(id->verbs->device) : "";
}

bool is_wildcard(const sockaddr_any& a) {
    if (a.family() == AF_INET)
        return reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (a.family() == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr);
    return false;
}

// Fills the device field of q from a source address (bind).
int own_source(addr_query& q, const char* what) {
    if (is_wildcard(q.src)) return 0;  // any device, listening on every address
    std::string dev = owner_of(q.src);
    if (dev.empty()) {
        EVD_WARN(FI_LOG_CORE, "fi_getinfo: %s %s is not an address of any RDMA device\n", what,
                 addr_str(q.src).c_str());
        return -FI_ENODATA;
    }
    q.any_device = false;
    q.device = dev;
    return 0;
}

// Resolves a route to q.dest (from q.src when set): the local device and
// source address that rdma_cm would use to connect.
int route_to_dest(addr_query& q) {
    cm_id_ptr id = sync_id(q.dest.family() == AF_IB ? RDMA_PS_IB : RDMA_PS_TCP);
    if (!id) {
        // No rdma_cm (every device gone since the enumeration): nothing
        // reaches the address, which fi_getinfo answers with FI_ENODATA.
        int err = errno;
        EVD_WARN(FI_LOG_CORE, "fi_getinfo: cannot resolve a route to %s (rdma_create_id: %s)\n",
                 addr_str(q.dest).c_str(), std::strerror(err));
        return err == ENOMEM ? -FI_ENOMEM : -FI_ENODATA;
    }
    sockaddr_any dst = q.dest, src = q.src;
    if (rdma_resolve_addr(id.get(), src.len ? const_cast<sockaddr*>(src.sa()) : nullptr,
                          const_cast<sockaddr*>(dst.sa()), get_params().cm_timeout_ms) ||
        !id->verbs) {
        EVD_WARN(FI_LOG_CORE, "fi_getinfo: no RDMA device reaches %s (rdma_resolve_addr: %s)\n",
                 addr_str(q.dest).c_str(), std::strerror(errno));
        return -FI_ENODATA;
    }
    q.any_device = false;
    q.device = ibv_get_device_name(id->verbs->device);
    if (!q.src.len) {
        sockaddr* local = rdma_get_local_addr(id.get());
        socklen_t n = local->sa_family == AF_INET    ? sizeof(sockaddr_in)
                      : local->sa_family == AF_INET6 ? sizeof(sockaddr_in6)
                                                     : sizeof(sockaddr_ib);
        if (q.src.set(local, n)) set_port(q.src, 0);  // ephemeral port is not reusable
    }
    return 0;
}

int family_for(const fi_info* h) {
    switch (h ? h->addr_format : static_cast<uint32_t>(FI_FORMAT_UNSPEC)) {
    case FI_SOCKADDR_IN: return AF_INET;
    case FI_SOCKADDR_IN6: return AF_INET6;
    case FI_SOCKADDR_IB: return AF_IB;
    default: return AF_UNSPEC;
    }
}

}  // namespace

// node/service/flags/hints -> addr_query (fi_getinfo(3) "node, service").
int resolve_addresses(const char* node, const char* service, uint64_t flags, const fi_info* h,
                      addr_query& q) {
    const bool source = (flags & FI_SOURCE) || !node;
    if (node || service) {
        rdma_addrinfo hints{};
        hints.ai_flags = (source ? RAI_PASSIVE : 0) | ((flags & FI_NUMERICHOST) ? RAI_NUMERICHOST : 0);
        hints.ai_family = family_for(h);
        if (hints.ai_family != AF_UNSPEC) hints.ai_flags |= RAI_FAMILY;
        hints.ai_port_space = hints.ai_family == AF_IB ? RDMA_PS_IB : RDMA_PS_TCP;
        hints.ai_qp_type = IBV_QPT_RC;
        rdma_addrinfo* res = nullptr;
        if (rdma_getaddrinfo(node, service, &hints, &res) || !res) {
            EVD_WARN(FI_LOG_CORE, "fi_getinfo: cannot resolve node '%s' service '%s'\n",
                     node ? node : "(null)", service ? service : "(null)");
            return -FI_ENODATA;
        }
        addrinfo_ptr rai(res);
        if (source) {
            if (!q.src.set(rai->ai_src_addr, rai->ai_src_len)) {
                EVD_WARN(FI_LOG_CORE, "fi_getinfo: '%s' resolved to no usable source address\n",
                         node ? node : "(null)");
                return -FI_ENODATA;
            }
            if (!node) {
                q.src_port_only = true;  // the service, on every address of every device
            } else if (int rc = own_source(q, "node")) {
                return rc;
            }
            if (h && h->dest_addr) q.dest.set(static_cast<const sockaddr*>(h->dest_addr), h->dest_addrlen);
            return 0;
        }
        if (!q.dest.set(rai->ai_dst_addr, rai->ai_dst_len)) {
            EVD_WARN(FI_LOG_CORE, "fi_getinfo: node '%s' resolved to no usable address\n", node);
            return -FI_ENODATA;
        }
        if (h && h->src_addr) q.src.set(static_cast<const sockaddr*>(h->src_addr), h->src_addrlen);
        return route_to_dest(q);
    }
    // No node, no service: the hints' addresses, if any.
    if (h && h->src_addr) {
        q.src.set(static_cast<const sockaddr*>(h->src_addr), h->src_addrlen);
        if (int rc = own_source(q, "hints->src_addr")) return rc;
    }
    if (h && h->dest_addr) {
        q.dest.set(static_cast<const sockaddr*>(h->dest_addr), h->dest_addrlen);
        std::string dev = q.device;
        if (int rc = route_to_dest(q)) return rc;
        if (!dev.empty() && dev != q.device) {
            EVD_WARN(FI_LOG_CORE, "fi_getinfo: hints->dest_addr is reached through %s, not through "
                     "%s which owns hints->src_addr\n", q.device.c_str(), dev.c_str());
            return -FI_ENODATA;
        }
    }
    return 0;
}

// The IP addresses of each device's netdevs: every up, non-loopback interface
// address that an rdma_cm id binds to on that device.
void collect_addrs(std::vector<dev_desc>& devs) {
    ifaddrs* raw = nullptr;
    if (getifaddrs(&raw)) return;
    ifaddrs_ptr ifa(raw);
    for (ifaddrs* i = raw; i; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
        int fam = i->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        sockaddr_any a;
        if (!a.set(i->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6))) continue;
        std::string dev = owner_of(a);
        if (dev.empty()) continue;
        for (dev_desc& d : devs)
            if (d.name == dev) d.addrs.push_back(a);
    }
}

void describe_device(devctx* c, dev_desc& d) {
    const ibv_device_attr& a = c->attr.orig_attr;
    d.name = c->name;
    d.transport = c->verbs->device->transport_type;
    d.max_qp = a.max_qp;
    d.max_qp_wr = a.max_qp_wr;
    d.max_sge = a.max_sge;
    d.max_cq = a.max_cq;
    d.max_cqe = a.max_cqe;
    d.max_mr = a.max_mr;
    d.max_srq = a.max_srq;
    d.max_srq_wr = a.max_srq_wr;
    d.max_srq_sge = a.max_srq_sge;
    d.max_mr_size = a.max_mr_size;
    d.atomic_cap = a.atomic_cap;
    d.max_ah = static_cast<uint32_t>(a.max_ah);
    d.max_inline = devctx_max_inline(c);

    std::vector<ibv_port_attr> ports = devctx_refresh_ports(c);
    d.port_state = IBV_PORT_DOWN;
    for (size_t p = 0; p < ports.size(); ++p) {
        if (ports[p].state != IBV_PORT_ACTIVE) continue;
        d.port_num = static_cast<uint8_t>(p + 1);
        d.port_state = IBV_PORT_ACTIVE;
        d.link_layer = ports[p].link_layer;
        d.max_msg_sz = ports[p].max_msg_sz;
        d.active_mtu = 128u << ports[p].active_mtu;  // IBV_MTU_256 is 1
        break;
    }
    if (d.port_state != IBV_PORT_ACTIVE) return;
    ibv_gid gid;
    if (ibv_query_gid(c->verbs, d.port_num, 0, &gid) == 0) {
        std::memcpy(d.gid, gid.raw, sizeof(d.gid));
        d.subnet_prefix = be64toh(gid.global.subnet_prefix);
    }
    uint16_t pkey;
    if (ibv_query_pkey(c->verbs, d.port_num, 0, &pkey) == 0) d.pkey = ntohs(pkey);
}

}  // namespace evd
