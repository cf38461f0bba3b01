// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fi_getinfo: describe every usable RDMA device as an FI_EP_MSG fi_info and
// filter the descriptions with the application's hints (fi_getinfo(3)).
//
// Layout: (1) the pure part works on dev_desc values and is unit-tested
// with fabricated devices: the hint checks (info_hints.cpp) and the
// construction of the fi_info list here (build_infos); (2) the rdma-core
// part (info_devices.cpp: describe, resolve) fills dev_desc/addr_query from
// the devices and librdmacm; getinfo() glues them.
#include "info/info.h"

#include "api.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/ib.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <rdma/rdma_cma.h>
#include <strings.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "device/devctx.h"
#include "dgram/ud_addr.h"
#include "dgram/ud_cm.h"
#include "info/hint_rules.h"
#include "info/info_hints.h"
#include "owners.h"

namespace evd {

// ====================================================================== helpers

bool sockaddr_any::set(const struct sockaddr* a, size_t n) noexcept {
    len = 0;
    if (!a || n < sizeof(sa_family_t)) return false;
    size_t need = 0;
    switch (a->sa_family) {
    case AF_INET: need = sizeof(struct sockaddr_in); break;
    case AF_INET6: need = sizeof(struct sockaddr_in6); break;
    case AF_IB: need = sizeof(struct sockaddr_ib); break;
    default: return false;
    }
    if (n < need || need > sizeof(ss)) return false;
    std::memset(&ss, 0, sizeof(ss));
    std::memcpy(&ss, a, need);
    len = static_cast<socklen_t>(need);
    return true;
}

void set_port(sockaddr_any& a, uint16_t port) {
    if (a.family() == AF_INET) reinterpret_cast<sockaddr_in*>(&a.ss)->sin_port = htons(port);
    if (a.family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&a.ss)->sin6_port = htons(port);
}

std::string addr_str(const sockaddr_any& a) {
    char buf[INET6_ADDRSTRLEN + 16] = "?";
    if (a.family() == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr, buf, sizeof(buf));
    else if (a.family() == AF_INET6)
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr, buf,
                  sizeof(buf));
    else if (a.family() == AF_IB)
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_ib*>(&a.ss)->sib_addr, buf,
                  sizeof(buf));
    return buf;
}

namespace {

uint16_t get_port(const sockaddr_any& a) {
    if (a.family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_port);
    if (a.family() == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_port);
    return 0;
}



char* dup_or_throw(const std::string& s) {
    char* p = strdup(s.c_str());
    if (!p) throw std::bad_alloc();
    return p;
}

void* dup_addr(const sockaddr_any& a) {
    void* p = std::malloc(a.len);
    if (!p) throw std::bad_alloc();
    std::memcpy(p, &a.ss, a.len);
    return p;
}

size_t clamp_param(size_t param, size_t device) { return param && param < device ? param : device; }
size_t inject_limit(const dev_desc& d) { return clamp_param(get_params().inject_size, d.max_inline); }

// The ordering evd reports: the atomic bits only on devices with atomics.
uint64_t msg_order(const dev_desc& d) {
    return d.atomic_cap == IBV_ATOMIC_NONE ? kMsgOrder & ~kAtomicOrder : kMsgOrder;
}

// The transmit attributes: the device's limits, narrowed by the hints.
void fill_tx_attr(fi_tx_attr* tx, const dev_desc& d, uint32_t version, const wants& w,
                  const fi_info* h) {
    tx->caps = w.caps & kTxCaps;
    if (h && h->tx_attr && h->tx_attr->caps) tx->caps = h->tx_attr->caps & w.caps;
    tx->mode = 0;
    tx->op_flags = h && h->tx_attr ? h->tx_attr->op_flags : 0;
    tx->msg_order = msg_order(d);
    // RC completes in order; 2.0 deprecated saying so (FI_ORDER_STRICT)
    tx->comp_order = api::has_2_0(version) ? 0 : api::kOrderStrict;
    tx->inject_size = inject_limit(d);
    tx->size = clamp_param(get_params().tx_size, d.max_qp_wr);
    tx->iov_limit = d.max_sge;
    tx->rma_iov_limit = 1;
    if (h && h->tx_attr) {
        if (h->tx_attr->inject_size) tx->inject_size = h->tx_attr->inject_size;
        if (h->tx_attr->size) tx->size = h->tx_attr->size;
        if (h->tx_attr->iov_limit) tx->iov_limit = h->tx_attr->iov_limit;
        if (h->tx_attr->rma_iov_limit) tx->rma_iov_limit = h->tx_attr->rma_iov_limit;
        tx->tclass = h->tx_attr->tclass;
    }
}

// The receive attributes.
void fill_rx_attr(fi_rx_attr* rx, const dev_desc& d, uint32_t version, const wants& w,
                  const fi_info* h) {
    rx->caps = w.caps & kRxCaps;
    if (h && h->rx_attr && h->rx_attr->caps) rx->caps = h->rx_attr->caps & w.caps;
    rx->mode = w.cq_data ? FI_RX_CQ_DATA : 0;
    rx->op_flags = h && h->rx_attr ? h->rx_attr->op_flags : 0;
    rx->msg_order = msg_order(d);
    rx->comp_order = api::has_2_0(version) ? 0 : api::kOrderStrict | api::kOrderData;
    rx->total_buffered_recv = 0;
    rx->size = clamp_param(get_params().rx_size, d.max_qp_wr);
    rx->iov_limit = d.max_sge;
    if (h && h->rx_attr) {
        if (h->rx_attr->size) rx->size = h->rx_attr->size;
        if (h->rx_attr->iov_limit) rx->iov_limit = h->rx_attr->iov_limit;
    }
}

// The endpoint attributes: an RC connection through rdma_cm.
void fill_ep_attr(fi_ep_attr* ep, const dev_desc& d, const fi_info* h) {
    ep->type = FI_EP_MSG;
    ep->protocol = device_protocol(d);
    ep->protocol_version = 1;
    ep->max_msg_size = d.max_msg_sz;
    ep->msg_prefix_size = 0;
    ep->max_order_raw_size = d.max_msg_sz;
    ep->max_order_war_size = 0;
    ep->max_order_waw_size = d.max_msg_sz;
    ep->mem_tag_format = 0;
    ep->tx_ctx_cnt = 1;
    ep->rx_ctx_cnt = h && h->ep_attr && h->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT ? FI_SHARED_CONTEXT : 1;
}

// The domain attributes: the device's counts, the hints' choices.
void fill_domain_attr(fi_domain_attr* dom, const dev_desc& d, uint32_t version, const wants& w,
                      const fi_info* h) {
    dom->name = dup_or_throw(d.name);
    dom->threading = FI_THREAD_SAFE;
    dom->control_progress = FI_PROGRESS_AUTO;
    dom->data_progress = FI_PROGRESS_AUTO;
    // An application that asks for manual progress gets it: it drives the EQ
    // and CQs itself, which evd supports as well (fi_getinfo(3)).
    if (h && h->domain_attr) {
        if (raw_enum(h->domain_attr->control_progress) == FI_PROGRESS_MANUAL)
            dom->control_progress = FI_PROGRESS_MANUAL;
        // 2.x: connection events progress where the application reads its
        // EQ, which a MSG application does anyway: unified is honoured too
        if (api::has_2_0(version) &&
            raw_enum(h->domain_attr->control_progress) == api::kProgressControlUnified)
            dom->control_progress = static_cast<enum fi_progress>(api::kProgressControlUnified);
        if (raw_enum(h->domain_attr->data_progress) == FI_PROGRESS_MANUAL)
            dom->data_progress = FI_PROGRESS_MANUAL;
    }
    dom->resource_mgmt = FI_RM_ENABLED;
    dom->av_type = FI_AV_UNSPEC;
    dom->mr_mode = w.mr_mode;
    dom->mr_key_size = kMrKeySize;
    dom->cq_data_size = w.cq_data ? kCqDataSize : 0;
    dom->cq_cnt = d.max_cq;
    dom->ep_cnt = d.max_qp;
    dom->tx_ctx_cnt = d.max_qp;
    dom->rx_ctx_cnt = d.max_qp;
    dom->max_ep_tx_ctx = 1;
    dom->max_ep_rx_ctx = 1;
    dom->max_ep_stx_ctx = 0;
    dom->max_ep_srx_ctx = d.max_srq;
    dom->cntr_cnt = d.max_cq;  // see the filter above
    dom->mr_iov_limit = 1;
    dom->caps = w.caps & kDomainCaps;
    dom->mode = 0;
    dom->max_err_data = kMaxErrData;
    dom->mr_cnt = d.max_mr;
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 20))
    dom->max_ep_auth_key = 0;  // evd has no authorization keys
    dom->max_group_id = 0;     // nor communication groups
#endif
    if (h && h->domain_attr) {
        const fi_domain_attr* a = h->domain_attr;
        if (a->threading != FI_THREAD_UNSPEC) dom->threading = a->threading;
        if (a->resource_mgmt == FI_RM_DISABLED) dom->resource_mgmt = FI_RM_DISABLED;
        if (a->av_type != FI_AV_UNSPEC) dom->av_type = a->av_type;
        if (a->caps) dom->caps = a->caps & kDomainCaps;
        dom->tclass = a->tclass;
    }
}

// A datagram endpoint's attributes over those make_info filled from the
// device (fi_evd(7), DATAGRAM ENDPOINTS): a UD QP sends one message of at
// most the port's MTU, in order on one path, no RMA, no shared receives.
void fill_dgram(fi_info* i, const dev_desc& d, const wants& w, const fi_info* h,
                const ud_name& name) {
    i->caps = w.caps & kDgramCaps;
    i->addr_format = FI_ADDR_IB_UD;
    std::free(i->src_addr);
    i->src_addr = std::malloc(kUdNameLen);
    if (!i->src_addr) throw std::bad_alloc();
    std::memcpy(i->src_addr, &name, kUdNameLen);
    i->src_addrlen = kUdNameLen;
    fi_tx_attr* tx = i->tx_attr;
    tx->caps = (h && h->tx_attr && h->tx_attr->caps ? h->tx_attr->caps : w.caps) & kDgramTxCaps;
    tx->msg_order = FI_ORDER_SAS;
    tx->inject_size = clamp_param(get_params().inject_size, d.max_inline_ud);
    if (h && h->tx_attr && h->tx_attr->inject_size) tx->inject_size = h->tx_attr->inject_size;
    tx->rma_iov_limit = 0;
    fi_rx_attr* rx = i->rx_attr;
    rx->caps = (h && h->rx_attr && h->rx_attr->caps ? h->rx_attr->caps : w.caps) & kDgramRxCaps;
    rx->msg_order = FI_ORDER_SAS;
    // one scatter entry is evd's: the receive header (ep.h)
    rx->iov_limit = d.max_sge > 1 ? d.max_sge - 1 : 1;
    if (h && h->rx_attr && h->rx_attr->iov_limit) rx->iov_limit = h->rx_attr->iov_limit;
    fi_ep_attr* ep = i->ep_attr;
    ep->type = FI_EP_DGRAM;
    ep->protocol = FI_PROTO_IB_UD;
    ep->max_msg_size = std::min<uint64_t>(d.active_mtu, d.max_msg_sz);
    ep->max_order_raw_size = 0;
    ep->max_order_waw_size = 0;
}

// One fi_info for device d with the given addresses.
info_ptr make_info(const dev_desc& d, uint32_t version, const wants& all, const fi_info* h,
                   const sockaddr_any& src, const sockaddr_any* dest) {
    info_ptr fi(fi_allocinfo());
    if (!fi) throw std::bad_alloc();
    fi_info* i = fi.get();

    // a device without immediate data (iWARP) offers no CQ data, so no
    // FI_RX_CQ_DATA either
    wants dw = all;
    if (!device_cq_data_size(d)) {
        dw.cq_data = false;
        dw.mode &= ~uint64_t{FI_RX_CQ_DATA};
    }
    // a device without atomics offers no FI_ATOMIC (the hints that asked
    // for it skipped the device: device_mismatch)
    if (d.atomic_cap == IBV_ATOMIC_NONE) dw.caps &= ~uint64_t{FI_ATOMIC};
    const wants& w = dw;
    i->caps = w.caps;
    i->mode = w.mode;
    i->addr_format = format_of_family(src.family());
    if (src.len) {
        i->src_addr = dup_addr(src);
        i->src_addrlen = src.len;
    }
    if (dest && dest->len) {
        i->dest_addr = dup_addr(*dest);
        i->dest_addrlen = dest->len;
    }
    if (h && h->handle && h->handle->fclass == FI_CLASS_PEP) i->handle = h->handle;

    fill_tx_attr(i->tx_attr, d, version, w, h);
    fill_rx_attr(i->rx_attr, d, version, w, h);
    fill_ep_attr(i->ep_attr, d, h);
    fill_domain_attr(i->domain_attr, d, version, w, h);

    fi_fabric_attr* fab = i->fabric_attr;
    fab->name = dup_or_throw(fabric_name(d));
    // prov_name is left to the core: it appends each layer's name to it.
    fab->prov_version = kProvVersion;
    fab->api_version = version;
    return fi;
}

}  // namespace

size_t device_cq_data_size(const dev_desc& d) {
    return d.transport == IBV_TRANSPORT_IWARP ? 0 : kCqDataSize;
}

uint32_t device_protocol(const dev_desc& d) {
    return d.transport == IBV_TRANSPORT_IWARP ? FI_PROTO_IWARP : FI_PROTO_RDMA_CM_IB_RC;
}

std::string fabric_name(const dev_desc& d) {
    if (d.transport == IBV_TRANSPORT_IWARP) return "Ethernet-iWARP";
    char buf[32];
    std::snprintf(buf, sizeof(buf), "IB-0x%llx", static_cast<unsigned long long>(d.subnet_prefix));
    return buf;
}


namespace {

// The fi_info list fi_getinfo answers, built device by device; what was
// skipped, and why, is kept for the warning when nothing matched.
struct info_list {
    uint32_t version;
    const wants& w;
    const struct fi_info* hints;
    uint32_t want_fmt;
    info_ptr head;
    fi_info* tail = nullptr;
    std::string why_not;

    void append(info_ptr fi) {
        fi_info* raw = fi.release();
        if (tail) tail->next = raw; else head.reset(raw);
        tail = raw;
    }
    void skip(const dev_desc& d, const std::string& reason) {
        EVD_INFO(FI_LOG_CORE, "fi_getinfo: skipping %s: %s\n", d.name.c_str(), reason.c_str());
        if (!why_not.empty()) why_not += "; ";
        why_not += d.name + ": " + reason;
    }
    // One fi_info per address of the device (as verbs does), the service
    // port applied when one was given. Returns how many.
    size_t add_ip(const dev_desc& d, const addr_query& q, const sockaddr_any* dest) {
        size_t n = 0;
        for (const sockaddr_any& a : d.addrs) {
            if (!family_fits(want_fmt, a.family())) continue;
            if (dest && dest->family() != a.family()) continue;
            sockaddr_any src = a;
            set_port(src, q.src_port_only ? get_port(q.src) : 0);
            append(make_info(d, version, w, hints, src, dest));
            ++n;
        }
        return n;
    }
    // An IB port is addressable without IP (AF_IB) when asked for, or when
    // the device has no IP address at all. Returns how many (0 or 1).
    size_t add_ib(const dev_desc& d, const sockaddr_any* dest) {
        if (d.link_layer != IBV_LINK_LAYER_INFINIBAND || dest) return 0;
        if (want_fmt != FI_SOCKADDR_IB && !(d.addrs.empty() && family_fits(want_fmt, AF_IB)))
            return 0;
        sockaddr_any sib;
        sockaddr_ib s{};
        s.sib_family = AF_IB;
        s.sib_pkey = htons(d.pkey);
        std::memcpy(&s.sib_addr, d.gid, sizeof(d.gid));
        s.sib_scope_id = d.port_num;
        sib.set(reinterpret_cast<const sockaddr*>(&s), sizeof(s));
        append(make_info(d, version, w, hints, sib, nullptr));
        return 1;
    }
    // FI_EP_DGRAM: one fi_info per address of the device, named by the
    // address's GID (RoCE v2: the IP address itself), or by GID 0 on an
    // InfiniBand port without an IP address.
    void add_dgram(const dev_desc& dev, const addr_query& q) {
        if (dev.transport == IBV_TRANSPORT_IWARP)
            return skip(dev, "iWARP has no datagram (UD) queue pairs");
        // the limits a UD QP has on this device, for the checks and the answer
        dev_desc d = dev;
        d.max_msg_sz = std::min<uint64_t>(d.active_mtu, d.max_msg_sz);
        d.max_inline = d.max_inline_ud;
        std::string reason = device_mismatch(d, hints, true);
        if (!reason.empty()) return skip(d, reason);
        if (hints && hints->rx_attr && hints->rx_attr->iov_limit + 1 > d.max_sge)
            return skip(d, "hints->rx_attr->iov_limit " + std::to_string(hints->rx_attr->iov_limit) +
                               ": a datagram receive keeps one of the device's " +
                               std::to_string(d.max_sge) + " scatter entries for its header");
        // a node without a service names no endpoint: only the device and
        // source address that reach it (fi_shared_ctx asks so for its
        // endpoints after the first); with a service, getinfo() resolved it
        std::vector<ud_name> names;
        for (const sockaddr_any& a : d.addrs) {
            ud_name n{};
            if (!sockaddr_to_gid(a.sa(), n.gid)) continue;
            if (q.src.len) n.service = get_port(q.src);
            names.push_back(n);
        }
        if (q.src.len && !q.src_port_only) {  // only the address asked for
            std::erase_if(names, [&](const ud_name& n) {
                ud_name s{};
                return !sockaddr_to_gid(q.src.sa(), s.gid) || std::memcmp(s.gid, n.gid, 16) != 0;
            });
        }
        if (d.link_layer == IBV_LINK_LAYER_INFINIBAND && d.addrs.empty()) {
            ud_name n{};
            std::memcpy(n.gid, d.gid, 16);
            names.push_back(n);
        }
        if (q.has_ud_src) {
            ud_name want;
            std::memcpy(&want, q.ud_src, kUdNameLen);
            std::erase_if(names, [&](const ud_name& n) { return std::memcmp(n.gid, want.gid, 16); });
            for (ud_name& n : names) n.service = want.service;
        }
        if (names.empty())
            return skip(d, q.has_ud_src || q.src.len ? "the source address is not one of its own"
                                                     : "no address a datagram endpoint can use");
        for (ud_name& n : names) {
            n.pkey = d.pkey;
            sockaddr_any none;
            info_ptr fi = make_info(d, version, w, hints, none, nullptr);
            fill_dgram(fi.get(), d, w, hints, n);
            if (q.has_ud_dest) {
                fi->dest_addr = std::malloc(kUdNameLen);
                if (!fi->dest_addr) throw std::bad_alloc();
                std::memcpy(fi->dest_addr, q.ud_dest, kUdNameLen);
                fi->dest_addrlen = kUdNameLen;
            }
            append(std::move(fi));
        }
    }
    void add_device(const dev_desc& d, const addr_query& q) {
        if (!q.any_device && d.name != q.device) return skip(d, "the address belongs to " + q.device);
        if (w.dgram) return add_dgram(d, q);
        std::string reason = device_mismatch(d, hints);
        if (!reason.empty()) return skip(d, reason);
        const sockaddr_any* dest = q.dest.len ? &q.dest : nullptr;
        if (q.src.len && !q.src_port_only) {
            if (!family_fits(want_fmt, q.src.family()))
                return skip(d, "source address family does not fit hints->addr_format");
            return append(make_info(d, version, w, hints, q.src, dest));
        }
        size_t n = add_ip(d, q, dest);  // IP addresses first, then AF_IB
        n += add_ib(d, dest);
        if (n == 0)
            skip(d, d.addrs.empty() ? std::string("no IP address on its network interface")
                                    : std::string("no address of the family hints->addr_format asks for"));
    }
};

}  // namespace

int build_infos(const std::vector<dev_desc>& devs, uint32_t version, const addr_query& q,
                const struct fi_info* hints, struct fi_info** out) {
    return guard([&]() -> int {
        if (!out) return -FI_EINVAL;
        *out = nullptr;
        wants w;
        if (int rc = static_check(version, hints, &w)) return rc;
        info_list list{version, w, hints,
                       hints ? hints->addr_format : static_cast<uint32_t>(FI_FORMAT_UNSPEC)};
        for (const dev_desc& d : devs) list.add_device(d, q);
        if (!list.head) {
            if (!devs.empty())
                EVD_WARN(FI_LOG_CORE, "fi_getinfo: no device matches: %s\n", list.why_not.c_str());
            return -FI_ENODATA;
        }
        *out = list.head.release();
        return 0;
    });
}

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const struct fi_info* hints, struct fi_info** info) {
    return guard([&]() -> int {
        if (!info) return -FI_EINVAL;
        *info = nullptr;
        const bool dgram = hint_rule_type(hints) == kRuleDgram;
        if (dgram && !get_params().dgram) {
            EVD_INFO(FI_LOG_CORE, "fi_getinfo: hints->ep_attr->type FI_EP_DGRAM: datagram "
                     "endpoints are off (FI_EVD_DGRAM=1 turns them on)\n");
            return -FI_ENODATA;
        }
        if (int rc = check_static_hints(version, hints)) return rc;
        std::vector<devctx*> ctxs = devctx_all();
        // Held while described: a removed device is released only after this.
        struct put_all {
            const std::vector<devctx*>& v;
            ~put_all() { devctx_put_all(v); }
        } hold{ctxs};
        if (ctxs.empty()) {
            EVD_INFO(FI_LOG_CORE, "fi_getinfo: no RDMA device\n");
            return -FI_ENODATA;
        }
        std::vector<dev_desc> devs(ctxs.size());
        for (size_t k = 0; k < ctxs.size(); ++k) {
            describe_device(ctxs[k], devs[k]);
            if (dgram) devs[k].max_inline_ud = devctx_max_inline_ud(ctxs[k]);
        }
        collect_addrs(devs);

        addr_query q;
        if (!dgram) {
            if (int rc = resolve_addresses(node, service, flags, hints, q)) return rc;
            return build_infos(devs, version, q, hints, info);
        }
        // FI_EP_DGRAM: names (FI_ADDR_IB_UD) are taken as they are; the
        // rest (node and service as IP and port) resolves as for MSG
        fi_info h = *hints;
        struct sockaddr_storage src_ip {};  // the IP of a source name, to route from
        if (h.addr_format == FI_ADDR_IB_UD) {
            if (h.src_addr) std::memcpy(q.ud_src, h.src_addr, kUdNameLen), q.has_ud_src = true;
            if (h.dest_addr) std::memcpy(q.ud_dest, h.dest_addr, kUdNameLen), q.has_ud_dest = true;
            h.src_addr = h.dest_addr = nullptr;
            h.src_addrlen = h.dest_addrlen = 0;
            h.addr_format = FI_FORMAT_UNSPEC;
            if (q.has_ud_src) {
                socklen_t n = 0;
                gid_to_sockaddr(q.ud_src, 0, &src_ip, &n);
                h.src_addr = &src_ip;
                h.src_addrlen = n;
            }
        }
        if (node && !std::strncmp(node, kUdAddrPrefix, std::strlen(kUdAddrPrefix))) {
            ud_name n;
            std::string why;
            if (!ud_parse(node, &n, &why)) {
                EVD_WARN(FI_LOG_CORE, "fi_getinfo: node '%s': %s\n", node, why.c_str());
                return -FI_EINVAL;
            }
            const bool src = flags & FI_SOURCE;
            std::memcpy(src ? q.ud_src : q.ud_dest, &n, kUdNameLen);
            (src ? q.has_ud_src : q.has_ud_dest) = true;
            node = nullptr;
            service = nullptr;
        }
        if (int rc = resolve_addresses(node, service, flags, &h, q)) return rc;
        if (q.dest.len && get_port(q.dest)) {
            // the peer's name, asked of the endpoint listening there (ud_cm.h)
            ud_name peer;
            if (int rc = ud_resolve(q.src.len && !q.src_port_only ? q.src.sa() : nullptr,
                                    q.dest.sa(), get_params().cm_timeout_ms, &peer)) {
                EVD_INFO(FI_LOG_CORE, "fi_getinfo: no datagram endpoint at %s port %u: %s\n",
                         addr_str(q.dest).c_str(), get_port(q.dest), fi_strerror(-rc));
                return rc == -FI_EHOSTUNREACH ? -FI_ENODATA : rc;
            }
            std::memcpy(q.ud_dest, &peer, kUdNameLen);
            q.has_ud_dest = true;
            q.dest = sockaddr_any{};
        }
        return build_infos(devs, version, q, hints, info);
    });
}

void info_cleanup() noexcept { devctx_cleanup(); }

}  // namespace evd
