// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fi_getinfo: describe every usable RDMA device as an FI_EP_MSG fi_info and
// filter the descriptions with the application's hints (fi_getinfo(3)).
//
// Layout: (1) the pure part (check_static_hints, build_infos) works on
// dev_desc values and is unit-tested with fabricated devices; (2) the
// rdma-core part (describe, resolve) fills dev_desc/addr_query from the
// devices and librdmacm; getinfo() glues them.
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

uint32_t format_of_family(int family) {
    switch (family) {
    case AF_INET: return FI_SOCKADDR_IN;
    case AF_INET6: return FI_SOCKADDR_IN6;
    case AF_IB: return FI_SOCKADDR_IB;
    default: return FI_FORMAT_UNSPEC;
    }
}

// Does an address of `family` satisfy hints->addr_format?
bool family_fits(uint32_t want, int family) {
    switch (want) {
    case FI_FORMAT_UNSPEC: return true;
    case FI_SOCKADDR: return family == AF_INET || family == AF_INET6 || family == AF_IB;
    default: return format_of_family(family) == want;
    }
}

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

// "evd", "evd;ofi_rxm", "ofi_rxm;evd": is evd named?
bool names_evd(const char* list) {
    std::string s(list);
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t end = s.find(';', pos);
        if (end == std::string::npos) end = s.size();
        if (strcasecmp(s.substr(pos, end - pos).c_str(), kProvName) == 0) return true;
        pos = end + 1;
    }
    return false;
}

// The bits of an enum field as given, without loading an invalid enum value.
template <class E>
unsigned raw_enum(const E& e) {
    static_assert(sizeof(E) == sizeof(unsigned));
    unsigned v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

// What the hints ask for beyond plain filtering (computed once per call).
struct wants {
    uint64_t caps = kCaps;
    uint64_t mode = FI_RX_CQ_DATA;
    int mr_mode = kMrMode;
    bool cq_data = true;
    bool dgram = false;  // hints->ep_attr->type is FI_EP_DGRAM: UD endpoints only
};

// Hints evd cannot satisfy are a normal answer (-FI_ENODATA: applications
// such as Open MPI 5 ask for FI_HMEM first and retry without it), logged at
// info level; malformed hints are the caller's error and a warning.
#define REJECT(code, ...)                                           \
    do {                                                            \
        if ((code) == -FI_ENODATA)                                  \
            EVD_INFO(FI_LOG_CORE, "fi_getinfo: " __VA_ARGS__);      \
        else                                                        \
            EVD_WARN(FI_LOG_CORE, "fi_getinfo: " __VA_ARGS__);      \
        return (code);                                              \
    } while (0)

// The provider name: a ';' list that does not name evd is not for us
// (-FI_ENODATA, logged at info: the core offers every provider the user's
// hints).
int check_provider(const fi_info* h) {
    if (h->fabric_attr && h->fabric_attr->prov_name && !names_evd(h->fabric_attr->prov_name))
        REJECT(-FI_ENODATA, "hints ask for provider '%s', not evd\n", h->fabric_attr->prov_name);
    return 0;
}

// An address pointer needs its length (before hints->addr_format is read).
int check_address_lengths(const fi_info* h) {
    if (h->src_addr && !h->src_addrlen)
        REJECT(-FI_EINVAL, "hints->src_addr is set but hints->src_addrlen is 0\n");
    if (h->dest_addr && !h->dest_addrlen)
        REJECT(-FI_EINVAL, "hints->dest_addr is set but hints->dest_addrlen is 0\n");
    return 0;
}

// The endpoint type: FI_EP_DGRAM only when asked by name (an FI_EP_UNSPEC
// caller gets MSG endpoints, as before datagrams existed); the hint rules
// of that type apply (hint_rules.h).
void want_ep_type(const fi_info* h, wants* w) {
    w->dgram = hint_rule_type(h) == kRuleDgram;
    if (w->dgram) w->caps = kDgramCaps & ~uint64_t{FI_SOURCE};
}

// The addresses themselves: complete sockaddrs of the family addr_format
// names, or FI_ADDR_IB_UD names of 32 bytes (-FI_EINVAL otherwise: the
// caller's error).
int check_addresses(const fi_info* h) {
    for (int k = 0; k < 2; ++k) {
        const void* a = k ? h->dest_addr : h->src_addr;
        size_t n = k ? h->dest_addrlen : h->src_addrlen;
        if (!a) continue;
        if (h->addr_format == FI_ADDR_IB_UD) {
            if (n != kUdNameLen)
                REJECT(-FI_EINVAL, "hints->%s is %zu bytes, an FI_ADDR_IB_UD name is %zu\n",
                       k ? "dest_addr" : "src_addr", n, kUdNameLen);
            continue;
        }
        sockaddr_any any;
        if (!any.set(static_cast<const sockaddr*>(a), n))
            REJECT(-FI_EINVAL, "hints->%s is not a complete sockaddr_in/in6/ib (family %d, %zu bytes)\n",
                   k ? "dest_addr" : "src_addr", n >= sizeof(sa_family_t)
                       ? static_cast<const sockaddr*>(a)->sa_family : -1, n);
        if (!family_fits(h->addr_format, any.family()))
            REJECT(-FI_EINVAL, "hints->%s has family %d, which contradicts hints->addr_format %s\n",
                   k ? "dest_addr" : "src_addr", any.family(),
                   fi_tostr(&h->addr_format, FI_TYPE_ADDR_FORMAT));
    }
    return 0;
}

// The capabilities answered: the hints' own, FI_LOCAL_COMM|FI_REMOTE_COMM
// implied when neither is given (fi_getinfo(3)).
void want_caps(const fi_info* h, wants* w) {
    if (h->caps) w->caps = h->caps;
    if (h->caps && !(h->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM))) w->caps |= kDomainCaps;
}

// Immediate data: a write with immediate data consumes a posted receive, so
// cq_data_size > 0 requires the application to accept FI_RX_CQ_DATA.
int check_cq_data(const fi_info* h, wants* w) {
    bool rx_cq_data = (h->mode & FI_RX_CQ_DATA) || (h->rx_attr && (h->rx_attr->mode & FI_RX_CQ_DATA));
    w->cq_data = rx_cq_data;
    if (h->domain_attr && h->domain_attr->cq_data_size && !rx_cq_data)
        REJECT(-FI_ENODATA, "hints->domain_attr->cq_data_size %zu requires mode FI_RX_CQ_DATA in hints\n",
               h->domain_attr->cq_data_size);
    return 0;
}

// Memory registration mode (fi_domain(3) "Memory Registration Mode"):
// before API 1.5 only FI_MR_BASIC (or unspecified) with mode FI_LOCAL_MR.
int mr_mode_before_1_5(const fi_info* h, wants* w) {
    const int user = h->domain_attr->mr_mode;
    if (user != api::kMrUnspec && user != api::kMrBasic)
        REJECT(-FI_ENODATA, "hints->domain_attr->mr_mode 0x%x: API < 1.5 supports only "
               "FI_MR_BASIC\n", user);
    if (!(h->mode & api::kModeLocalMr))
        REJECT(-FI_ENODATA, "hints->mode lacks FI_LOCAL_MR (evd needs local buffers registered)\n");
    w->mr_mode = api::kMrBasic;
    w->mode |= api::kModeLocalMr;
    return 0;
}

// FI_MR_BASIC from API 1.5 on: alone, with local registration accepted.
int mr_mode_basic(const fi_info* h, bool local_ok, wants* w) {
    if (h->domain_attr->mr_mode & ~api::kMrBasic)
        REJECT(-FI_EINVAL, "hints->domain_attr->mr_mode: FI_MR_BASIC combined with other bits\n");
    if (!local_ok)
        REJECT(-FI_ENODATA, "hints: FI_MR_BASIC without mode FI_LOCAL_MR\n");
    w->mr_mode = api::kMrBasic;
    w->mode |= api::kModeLocalMr;
    return 0;
}

// API >= 1.5: mr_mode lists the registration duties the application
// accepts; the answer may only require duties from that list (the app could
// not honour any other). FI_LOCAL_MR in mode is the pre-1.5 spelling of
// FI_MR_LOCAL: when it is how the app offers local registration, the answer
// says so the same way (mode bit, not mr_mode bit). mr_mode 0 is no longer
// "any" here: it offers no bit at all (fi_domain(3): FI_MR_SCALABLE is the
// default).
int mr_mode_bits(const fi_info* h, bool local_ok, wants* w) {
    const int user = h->domain_attr->mr_mode;
    int need = kMrMode;
    // Without RMA or atomics nobody addresses our memory remotely.
    if ((h->caps && !(h->caps & (FI_RMA | FI_ATOMIC))) || w->dgram)
        need &= ~(FI_MR_VIRT_ADDR | FI_MR_PROV_KEY);
    if (!local_ok)
        REJECT(-FI_ENODATA, "hints: neither domain_attr->mr_mode FI_MR_LOCAL nor mode "
               "FI_LOCAL_MR is set; evd needs local buffers registered\n");
    const bool mode_local = !(user & FI_MR_LOCAL);  // local_ok: FI_LOCAL_MR is set
    const int offered = user | FI_MR_LOCAL;
    if ((offered & need) != need) {
        int missing = need & ~offered;
        REJECT(-FI_ENODATA, "hints->domain_attr->mr_mode 0x%x%s lacks bits evd requires: %s\n",
               user, user == api::kMrUnspec ? " (FI_MR_UNSPEC: from API 1.5 no bit offered)" : "",
               fi_tostr(&missing, FI_TYPE_MR_MODE));
    }
    if (mode_local) {
        w->mr_mode = need & ~FI_MR_LOCAL;
        w->mode |= api::kModeLocalMr;  // the app's way of accepting FI_MR_LOCAL
    } else {
        w->mr_mode = need;
    }
    return 0;
}

// The registration mode the answer requires, negotiated per API version.
int check_mr_mode(uint32_t version, const fi_info* h, wants* w) {
    if (!h->domain_attr) return 0;
    const int user = h->domain_attr->mr_mode;
    const bool local_ok = (h->mode & api::kModeLocalMr) || (user & FI_MR_LOCAL);
    if (FI_VERSION_LT(version, FI_VERSION(1, 5))) return mr_mode_before_1_5(h, w);
    if (user & api::kMrBasic) return mr_mode_basic(h, local_ok, w);
    if (user & api::kMrScalable)
        REJECT(-FI_ENODATA, "hints->domain_attr->mr_mode FI_MR_SCALABLE: evd needs "
               "FI_MR_LOCAL|FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY\n");
    return mr_mode_bits(h, local_ok, w);
}

// Computes what the returned fi_info must carry, or rejects the hints: the
// rules of hint_rules.cpp and the logic between them, in the order
// fi_getinfo(3) lists the attributes.
int static_check(uint32_t version, const fi_info* h, wants* w) {
    *w = wants{};
    if (!h) return 0;
    w->mode = 0;
    if (int r = check_provider(h)) return r;
    if (int r = check_hint_rules(version, h, hint_step::endpoint)) return r;
    want_ep_type(h, w);
    if (int r = check_address_lengths(h)) return r;
    if (int r = check_hint_rules(version, h, hint_step::address)) return r;
    if (int r = check_addresses(h)) return r;
    if (int r = check_hint_rules(version, h, hint_step::caps)) return r;
    want_caps(h, w);
    if (int r = check_hint_rules(version, h, hint_step::cq_data)) return r;
    if (int r = check_cq_data(h, w)) return r;
    if (int r = check_mr_mode(version, h, w)) return r;
    if (w->cq_data) w->mode |= FI_RX_CQ_DATA;
    if (int r = check_hint_rules(version, h, hint_step::attributes)) return r;
    // a datagram endpoint keeps each receive's header for FI_SOURCE in its
    // own order, which a shared receive context does not follow
    if (w->dgram && (w->caps & FI_SOURCE) && h->ep_attr &&
        h->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT)
        REJECT(-FI_ENODATA, "hints ask for FI_SOURCE and a shared receive context on FI_EP_DGRAM: "
               "one or the other\n");
    return 0;
}

// Returns "" when the device satisfies the hints' limits, else the reason.
// What a device can do, against the sizes the hints ask for: one row per
// hint, the device's limit beside it. A row whose hint struct is absent
// asks for nothing (0).
struct device_limit {
    const char* hint;
    uint64_t (*want)(const fi_info& h);
    uint64_t (*have)(const dev_desc& d);
};

// clang-format off
const device_limit kDeviceLimits[] = {
    {"hints->domain_attr->cq_cnt",         [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->cq_cnt : 0; },         [](const dev_desc& d) -> uint64_t { return d.max_cq; }},
    {"hints->domain_attr->ep_cnt",         [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->ep_cnt : 0; },         [](const dev_desc& d) -> uint64_t { return d.max_qp; }},
    {"hints->domain_attr->tx_ctx_cnt",     [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->tx_ctx_cnt : 0; },     [](const dev_desc& d) -> uint64_t { return d.max_qp; }},
    {"hints->domain_attr->rx_ctx_cnt",     [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->rx_ctx_cnt : 0; },     [](const dev_desc& d) -> uint64_t { return d.max_qp; }},
    {"hints->domain_attr->max_ep_srx_ctx", [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->max_ep_srx_ctx : 0; }, [](const dev_desc& d) -> uint64_t { return d.max_srq; }},
    {"hints->domain_attr->cq_data_size",   [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->cq_data_size : 0; },   [](const dev_desc& d) -> uint64_t { return device_cq_data_size(d); }},
    {"hints->domain_attr->mr_cnt",         [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->mr_cnt : 0; },         [](const dev_desc& d) -> uint64_t { return d.max_mr; }},
    // counters are software objects; an endpoint counting without a CQ uses
    // a verbs CQ of its own: bounded by the device's CQs (fi_evd(7))
    {"hints->domain_attr->cntr_cnt",       [](const fi_info& h) -> uint64_t { return h.domain_attr ? h.domain_attr->cntr_cnt : 0; },       [](const dev_desc& d) -> uint64_t { return d.max_cq; }},
    {"hints->ep_attr->max_msg_size",       [](const fi_info& h) -> uint64_t { return h.ep_attr ? h.ep_attr->max_msg_size : 0; },          [](const dev_desc& d) -> uint64_t { return d.max_msg_sz; }},
    {"hints->ep_attr->max_order_raw_size", [](const fi_info& h) -> uint64_t { return h.ep_attr ? h.ep_attr->max_order_raw_size : 0; },    [](const dev_desc& d) -> uint64_t { return d.max_msg_sz; }},
    {"hints->ep_attr->max_order_waw_size", [](const fi_info& h) -> uint64_t { return h.ep_attr ? h.ep_attr->max_order_waw_size : 0; },    [](const dev_desc& d) -> uint64_t { return d.max_msg_sz; }},
    {"hints->tx_attr->size",               [](const fi_info& h) -> uint64_t { return h.tx_attr ? h.tx_attr->size : 0; },                  [](const dev_desc& d) -> uint64_t { return d.max_qp_wr; }},
    {"hints->tx_attr->iov_limit",          [](const fi_info& h) -> uint64_t { return h.tx_attr ? h.tx_attr->iov_limit : 0; },             [](const dev_desc& d) -> uint64_t { return d.max_sge; }},
    {"hints->tx_attr->inject_size",        [](const fi_info& h) -> uint64_t { return h.tx_attr ? h.tx_attr->inject_size : 0; },           [](const dev_desc& d) -> uint64_t { return d.max_inline; }},
    {"hints->rx_attr->size",               [](const fi_info& h) -> uint64_t { return h.rx_attr ? h.rx_attr->size : 0; },                  [](const dev_desc& d) -> uint64_t { return d.max_qp_wr; }},
    {"hints->rx_attr->iov_limit",          [](const fi_info& h) -> uint64_t { return h.rx_attr ? h.rx_attr->iov_limit : 0; },             [](const dev_desc& d) -> uint64_t { return d.max_sge; }},
};
// clang-format on

std::string device_mismatch(const dev_desc& d, const fi_info* h, bool dgram = false) {
    if (d.port_state != IBV_PORT_ACTIVE) return "no active port";
    if (!h) return "";
    const uint32_t proto = dgram ? static_cast<uint32_t>(FI_PROTO_IB_UD) : device_protocol(d);
    if (h->ep_attr && h->ep_attr->protocol != FI_PROTO_UNSPEC && h->ep_attr->protocol != proto) {
        const uint32_t have = proto;
        char want_s[64] = "", have_s[64] = "";
        fi_tostr_r(want_s, sizeof want_s, &h->ep_attr->protocol, FI_TYPE_PROTOCOL);
        fi_tostr_r(have_s, sizeof have_s, &have, FI_TYPE_PROTOCOL);
        return std::string("hints->ep_attr->protocol is ") + want_s + ", the device speaks " + have_s;
    }
    if (d.transport == IBV_TRANSPORT_IWARP && h->tx_attr &&
        (h->tx_attr->op_flags & FI_TRANSMIT_COMPLETE))
        return "hints->tx_attr->op_flags has FI_TRANSMIT_COMPLETE: an iWARP send completes "
               "before the peer is known to have it";
    if (d.atomic_cap == IBV_ATOMIC_NONE &&
        ((h->caps | (h->tx_attr ? h->tx_attr->caps : 0) | (h->rx_attr ? h->rx_attr->caps : 0)) &
         FI_ATOMIC))
        return "hints ask for FI_ATOMIC: the device has no atomic operations (atomic_cap NONE)";
    if (h->domain_attr && h->domain_attr->name &&
        strcasecmp(h->domain_attr->name, d.name.c_str()) != 0)
        return "hints->domain_attr->name is '" + std::string(h->domain_attr->name) + "'";
    if (h->fabric_attr && h->fabric_attr->name && fabric_name(d) != h->fabric_attr->name)
        return "hints->fabric_attr->name is '" + std::string(h->fabric_attr->name) +
               "', device is on '" + fabric_name(d) + "'";
    for (const device_limit& l : kDeviceLimits) {
        const uint64_t want = l.want(*h), have = l.have(d);
        if (want <= have) continue;
        char buf[256];
        std::snprintf(buf, sizeof(buf), "%s %llu exceeds the device's %llu", l.hint,
                      static_cast<unsigned long long>(want), static_cast<unsigned long long>(have));
        return buf;
    }
    if (h->ep_attr && h->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT && !d.max_srq)
        return "hints->ep_attr->rx_ctx_cnt is FI_SHARED_CONTEXT but the device has no SRQ";
    return "";
}

// The inject size evd offers on this device: FI_EVD_INJECT_SIZE when set,
// never above what the device can inline.
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

int check_static_hints(uint32_t version, const struct fi_info* hints) {
    return guard([&] {
        wants w;
        return static_check(version, hints, &w);
    });
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
