// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fi_getinfo's checks of the application's hints: those that need no device
// (static_check; check_static_hints for the unit tests) and a device's limits
// against the sizes they ask for (device_mismatch, its table kDeviceLimits).
// Hints evd cannot satisfy are -FI_ENODATA, logged at info level; malformed
// hints are the caller's error, -FI_EINVAL and a warning.
#include "info/info_hints.h"

#include <infiniband/verbs.h>
#include <strings.h>

#include <cstdio>
#include <string>

#include "api.h"
#include "dgram/ud_addr.h"
#include "info/hint_rules.h"

namespace evd {

namespace {

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
}  // namespace

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

namespace {

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

}  // namespace

std::string device_mismatch(const dev_desc& d, const fi_info* h, bool dgram) {
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

int check_static_hints(uint32_t version, const struct fi_info* hints) {
    return guard([&] {
        wants w;
        return static_check(version, hints, &w);
    });
}

}  // namespace evd
