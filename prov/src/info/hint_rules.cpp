// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The hint rules of fi_getinfo (see hint_rules.h) and their one walker.
#include "info/hint_rules.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "api.h"
#include "info/info.h"

namespace evd {

namespace {

// The struct a hint_attr names, so a row can say F(tx, rma_iov_limit).
using info_t = fi_info;
using domain_t = fi_domain_attr;
using ep_t = fi_ep_attr;
using tx_t = fi_tx_attr;
using rx_t = fi_rx_attr;
#define F(s, m) hint_field{hint_attr::s, offsetof(s##_t, m), sizeof(s##_t::m), #m}

using S = hint_step;
using C = hint_cmp;

constexpr uint64_t kEpTypes[] = {FI_EP_UNSPEC, FI_EP_MSG, FI_EP_DGRAM};
constexpr uint64_t kAddrFormats[] = {FI_FORMAT_UNSPEC, FI_SOCKADDR, FI_SOCKADDR_IN,
                                     FI_SOCKADDR_IN6, FI_SOCKADDR_IB};
constexpr uint64_t kProtocols[] = {FI_PROTO_UNSPEC, FI_PROTO_RDMA_CM_IB_RC, FI_PROTO_IWARP};
constexpr uint64_t kRxCtxCnts[] = {0, 1, FI_SHARED_CONTEXT};
// FI_EP_DGRAM
constexpr uint64_t kDgramAddrFormats[] = {FI_FORMAT_UNSPEC, FI_ADDR_IB_UD};
constexpr uint64_t kDgramProtocols[] = {FI_PROTO_UNSPEC, FI_PROTO_IB_UD};
constexpr uint8_t M = kRuleMsg, D = kRuleDgram;
constexpr uint32_t kApi20 = FI_VERSION(2, 0);

// In the order fi_getinfo(3) lists the attributes; within a step, the order
// decides which refusal a hint breaking several rules gets.
constexpr hint_rule kRules[] = {
    {.step = S::endpoint, .field = F(ep, type), .cmp = C::one_of, .allowed = kEpTypes,
     .tostr = FI_TYPE_EP_TYPE,
     .reason = "evd offers FI_EP_MSG, and FI_EP_DGRAM (asked by name, FI_EVD_DGRAM=1)"},
    {.step = S::address, .field = F(info, addr_format), .cmp = C::one_of, .allowed = kAddrFormats,
     .tostr = FI_TYPE_ADDR_FORMAT, .types = M,
     .reason = "evd supports FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_SOCKADDR_IB"},
    {.step = S::address, .field = F(info, addr_format), .cmp = C::one_of,
     .allowed = kDgramAddrFormats, .tostr = FI_TYPE_ADDR_FORMAT, .types = D,
     .reason = "datagram endpoints are named FI_ADDR_IB_UD, as verbs names them"},
    // capabilities
    {.step = S::caps, .field = F(info, caps), .cmp = C::subset, .limit = kCaps,
     .tostr = FI_TYPE_CAPS, .types = M,
     .reason = "evd offers FI_MSG, FI_RMA, FI_ATOMIC, FI_SEND, FI_RECV, FI_READ, FI_WRITE, "
               "FI_REMOTE_READ, FI_REMOTE_WRITE, FI_LOCAL_COMM, FI_REMOTE_COMM"},
    {.step = S::caps, .field = F(info, caps), .cmp = C::subset, .limit = kDgramCaps,
     .tostr = FI_TYPE_CAPS, .types = D,
     .reason = "a datagram endpoint offers FI_MSG, FI_SEND, FI_RECV, FI_SOURCE, FI_LOCAL_COMM, "
               "FI_REMOTE_COMM"},
    {.step = S::caps, .field = F(tx, caps), .cmp = C::subset, .limit = kCaps,
     .tostr = FI_TYPE_CAPS, .types = M, .reason = "evd's capabilities, as for hints->caps"},
    {.step = S::caps, .field = F(tx, caps), .cmp = C::subset, .limit = kDgramCaps,
     .tostr = FI_TYPE_CAPS, .types = D, .reason = "as for hints->caps"},
    {.step = S::caps, .field = F(rx, caps), .cmp = C::subset, .limit = kCaps,
     .tostr = FI_TYPE_CAPS, .types = M, .reason = "evd's capabilities, as for hints->caps"},
    {.step = S::caps, .field = F(rx, caps), .cmp = C::subset, .limit = kDgramCaps,
     .tostr = FI_TYPE_CAPS, .types = D, .reason = "as for hints->caps"},
    {.step = S::cq_data, .field = F(domain, cq_data_size), .cmp = C::at_most, .limit = kCqDataSize,
     .reason = "the immediate data of a work request"},
    // domain attributes: enum values that are not of their enum are malformed
    {.step = S::attributes, .field = F(domain, threading), .cmp = C::at_most,
     .limit = FI_THREAD_ENDPOINT, .code = -FI_EINVAL,
     .reason = "FI_THREAD_ENDPOINT is the last fi_threading value"},
    {.step = S::attributes, .field = F(domain, control_progress), .cmp = C::at_most,
     .limit = FI_PROGRESS_MANUAL, .code = -FI_EINVAL, .api_before = kApi20,
     .reason = "FI_PROGRESS_MANUAL is the last fi_progress value before API 2.0"},
    {.step = S::attributes, .field = F(domain, control_progress), .cmp = C::at_most,
     .limit = api::kProgressControlUnified, .code = -FI_EINVAL, .api_from = kApi20,
     .reason = "FI_PROGRESS_CONTROL_UNIFIED is the last control_progress value"},
    {.step = S::attributes, .field = F(domain, data_progress), .cmp = C::at_most,
     .limit = FI_PROGRESS_MANUAL, .code = -FI_EINVAL,
     .reason = "FI_PROGRESS_MANUAL is the last data_progress value"},
    {.step = S::attributes, .field = F(domain, resource_mgmt), .cmp = C::at_most,
     .limit = FI_RM_ENABLED, .code = -FI_EINVAL,
     .reason = "FI_RM_ENABLED is the last fi_resource_mgmt value"},
    {.step = S::attributes, .field = F(domain, av_type), .cmp = C::at_most, .limit = FI_AV_TABLE,
     .code = -FI_EINVAL, .reason = "FI_AV_TABLE is the last fi_av_type value"},
    {.step = S::attributes, .field = F(domain, caps), .cmp = C::subset, .limit = kDomainCaps,
     .tostr = FI_TYPE_CAPS, .reason = "domain capabilities are FI_LOCAL_COMM, FI_REMOTE_COMM"},
    {.step = S::attributes, .field = F(domain, mr_key_size), .cmp = C::at_most,
     .limit = kMrKeySize, .reason = "the verbs rkey"},
    {.step = S::attributes, .field = F(domain, max_ep_tx_ctx), .cmp = C::at_most, .limit = 1,
     .reason = "no scalable endpoints"},
    {.step = S::attributes, .field = F(domain, max_ep_rx_ctx), .cmp = C::at_most, .limit = 1,
     .reason = "no scalable endpoints"},
    {.step = S::attributes, .field = F(domain, max_ep_stx_ctx), .cmp = C::unset,
     .reason = "no shared transmit contexts"},
    {.step = S::attributes, .field = F(domain, mr_iov_limit), .cmp = C::at_most, .limit = 1,
     .reason = "ibv_reg_mr registers one range"},
    {.step = S::attributes, .field = F(domain, auth_key_size), .cmp = C::unset,
     .reason = "evd has no authorization keys"},
    {.step = S::attributes, .field = F(domain, auth_key), .cmp = C::unset,
     .reason = "evd has no authorization keys"},
    {.step = S::attributes, .field = F(domain, max_err_data), .cmp = C::at_most,
     .limit = kMaxErrData, .reason = "the largest rdma_cm private data an EQ error carries"},
    // endpoint attributes
    {.step = S::attributes, .field = F(ep, protocol), .cmp = C::one_of, .allowed = kProtocols,
     .tostr = FI_TYPE_PROTOCOL, .types = M,
     .reason = "evd speaks FI_PROTO_RDMA_CM_IB_RC (InfiniBand, RoCE) and FI_PROTO_IWARP (iWARP); "
               "each device only its own"},
    {.step = S::attributes, .field = F(ep, protocol), .cmp = C::one_of,
     .allowed = kDgramProtocols, .tostr = FI_TYPE_PROTOCOL, .types = D,
     .reason = "unreliable datagrams (UD) of InfiniBand and RoCE"},
    {.step = S::attributes, .field = F(ep, protocol_version), .cmp = C::at_most, .limit = 1,
     .reason = "the protocol version evd speaks"},
    {.step = S::attributes, .field = F(ep, tx_ctx_cnt), .cmp = C::at_most, .limit = 1,
     .reason = "one transmit context, none shared"},
    {.step = S::attributes, .field = F(ep, rx_ctx_cnt), .cmp = C::one_of, .allowed = kRxCtxCnts,
     .reason = "one receive context, or FI_SHARED_CONTEXT"},
    {.step = S::attributes, .field = F(ep, auth_key_size), .cmp = C::unset,
     .reason = "evd has no authorization keys"},
    {.step = S::attributes, .field = F(ep, auth_key), .cmp = C::unset,
     .reason = "evd has no authorization keys"},
    {.step = S::attributes, .field = F(ep, msg_prefix_size), .cmp = C::unset,
     .reason = "evd uses no message prefix"},
    {.step = S::attributes, .field = F(ep, max_order_war_size), .cmp = C::unset,
     .reason = "an RC QP does not order a write after a read"},
    // transmit attributes
    {.step = S::attributes, .field = F(tx, mode), .cmp = C::unset, .code = 0,
     .reason = "evd needs no transmit mode bit and ignores any"},
    {.step = S::attributes, .field = F(tx, op_flags), .cmp = C::subset, .limit = kTxOpFlags,
     .tostr = FI_TYPE_OP_FLAGS,
     .reason = "evd supports FI_INJECT, FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE, FI_COMPLETION"},
    {.step = S::attributes, .field = F(tx, msg_order), .cmp = C::subset, .limit = kMsgOrder,
     .tostr = FI_TYPE_MSG_ORDER, .types = M,
     .reason = "evd orders RAR, RAW, RAS, WAW, WAS, SAW, SAS, their RMA variants and atomic "
               "RAR, RAW, WAW"},
    {.step = S::attributes, .field = F(tx, msg_order), .cmp = C::subset, .limit = FI_ORDER_SAS,
     .tostr = FI_TYPE_MSG_ORDER, .types = D,
     .reason = "datagrams on one path arrive in order, when they arrive"},
    {.step = S::attributes, .field = F(tx, comp_order), .cmp = C::subset,
     .limit = api::kOrderStrict, .reason = "only FI_ORDER_STRICT"},
    {.step = S::attributes, .field = F(tx, rma_iov_limit), .cmp = C::at_most, .limit = 1,
     .types = M, .reason = "an RDMA work request names one remote range"},
    {.step = S::attributes, .field = F(tx, rma_iov_limit), .cmp = C::unset, .types = D,
     .reason = "UD has no RMA"},
    // receive attributes
    {.step = S::attributes, .field = F(rx, op_flags), .cmp = C::subset, .limit = kRxOpFlags,
     .tostr = FI_TYPE_OP_FLAGS, .reason = "evd supports FI_COMPLETION"},
    {.step = S::attributes, .field = F(rx, msg_order), .cmp = C::subset, .limit = kMsgOrder,
     .tostr = FI_TYPE_MSG_ORDER, .types = M,
     .reason = "evd orders RAR, RAW, RAS, WAW, WAS, SAW, SAS, their RMA variants and atomic "
               "RAR, RAW, WAW"},
    {.step = S::attributes, .field = F(rx, msg_order), .cmp = C::subset, .limit = FI_ORDER_SAS,
     .tostr = FI_TYPE_MSG_ORDER, .types = D,
     .reason = "datagrams on one path arrive in order, when they arrive"},
    {.step = S::attributes, .field = F(rx, comp_order), .cmp = C::subset,
     .limit = api::kOrderStrict | api::kOrderData, .reason = "only FI_ORDER_STRICT, FI_ORDER_DATA"},
};
#undef F

// The walker reads 4- and 8-byte fields, and names extra bits with fi_tostr
// types that take a uint64_t.
static_assert(std::ranges::all_of(kRules, [](const hint_rule& r) {
    return (r.field.size == 4 || r.field.size == 8) &&
           (r.cmp != hint_cmp::subset || r.tostr < 0 || r.field.size == 8) &&
           (r.cmp != hint_cmp::one_of || !r.allowed.empty());
}));

const void* attr_struct(hint_attr a, const fi_info* h) {
    switch (a) {
    case hint_attr::info: return h;
    case hint_attr::domain: return h->domain_attr;
    case hint_attr::ep: return h->ep_attr;
    case hint_attr::tx: return h->tx_attr;
    case hint_attr::rx: return h->rx_attr;
    }
    return nullptr;
}

const char* attr_prefix(hint_attr a) {
    switch (a) {
    case hint_attr::info: return "";
    case hint_attr::domain: return "domain_attr->";
    case hint_attr::ep: return "ep_attr->";
    case hint_attr::tx: return "tx_attr->";
    case hint_attr::rx: return "rx_attr->";
    }
    return "?";
}

uint64_t read_field(const void* p, uint8_t size) {
    if (size == sizeof(uint32_t)) {
        uint32_t v;  // an enum, read without forming a value outside it
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The offending value as the log shows it: a number, named when the row
// has a fi_tostr type.
void show_value(const hint_rule& r, const void* field, uint64_t v, char* out, size_t n) {
    char name[256] = "";
    if (r.cmp == hint_cmp::subset) {
        const uint64_t extra = v & ~r.limit;
        if (r.tostr >= 0) fi_tostr_r(name, sizeof name, &extra, static_cast<fi_type>(r.tostr));
        std::snprintf(out, n, "0x%llx%s%s%s", static_cast<unsigned long long>(extra),
                      *name ? " (" : "", name, *name ? ")" : "");
        return;
    }
    if (r.tostr >= 0) fi_tostr_r(name, sizeof name, field, static_cast<fi_type>(r.tostr));
    const char* fmt = r.cmp == hint_cmp::unset ? "0x%llx%s%s%s" : "%llu%s%s%s";
    std::snprintf(out, n, fmt, static_cast<unsigned long long>(v), *name ? " (" : "", name,
                  *name ? ")" : "");
}

}  // namespace

std::span<const hint_rule> hint_rules() { return kRules; }

std::string hint_name(const hint_field& f) {
    return std::string("hints->") + attr_prefix(f.in) + f.member;
}

const void* hint_field_ptr(const hint_field& f, const fi_info* h) {
    const void* s = h ? attr_struct(f.in, h) : nullptr;
    return s ? static_cast<const char*>(s) + f.offset : nullptr;
}

void* hint_field_ptr(const hint_field& f, fi_info* h) {
    return const_cast<void*>(hint_field_ptr(f, static_cast<const fi_info*>(h)));
}

bool hint_rule_applies(const hint_rule& r, uint32_t version) {
    // version 0 is the newest API (as api::has_2_0 reads it)
    const uint32_t v = version ? version : UINT32_MAX;
    return (!r.api_from || v >= r.api_from) && (!r.api_before || v < r.api_before);
}

void hint_refusal_text(const hint_rule& r, const fi_info* h, char* out, size_t n) {
    const void* field = hint_field_ptr(r.field, h);
    if (!field) {
        std::snprintf(out, n, "hints->%s%s is absent", attr_prefix(r.field.in), r.field.member);
        return;
    }
    char shown[320];
    show_value(r, field, read_field(field, r.field.size), shown, sizeof shown);
    const char* in = attr_prefix(r.field.in);
    const char* m = r.field.member;
    switch (r.cmp) {
    case hint_cmp::subset:
        std::snprintf(out, n, "hints->%s%s asks for %s (%s)", in, m, shown, r.reason);
        break;
    case hint_cmp::at_most:
        std::snprintf(out, n, "hints->%s%s %s > %llu (%s)", in, m, shown,
                      static_cast<unsigned long long>(r.limit), r.reason);
        break;
    case hint_cmp::one_of:
        std::snprintf(out, n, "hints->%s%s %s is not accepted (%s)", in, m, shown, r.reason);
        break;
    case hint_cmp::unset:
        std::snprintf(out, n, "hints->%s%s %s, not 0 (%s)", in, m, shown, r.reason);
        break;
    }
}

bool hint_rule_holds(const hint_rule& r, uint64_t value) {
    switch (r.cmp) {
    case hint_cmp::subset: return !(value & ~r.limit);
    case hint_cmp::at_most: return value <= r.limit;
    case hint_cmp::one_of: return std::ranges::find(r.allowed, value) != r.allowed.end();
    case hint_cmp::unset: return value == 0;
    }
    return false;
}

uint8_t hint_rule_type(const fi_info* h) {
    if (!h || !h->ep_attr) return kRuleMsg;
    // read as the number it is: hints may hold any value there
    const uint64_t type = read_field(&h->ep_attr->type, sizeof h->ep_attr->type);
    return type == FI_EP_DGRAM ? kRuleDgram : kRuleMsg;
}

int check_hint_rules(uint32_t version, const fi_info* h, hint_step step) {
    const uint8_t type = hint_rule_type(h);
    for (const hint_rule& r : kRules) {
        if (r.step != step || !hint_rule_applies(r, version) || !(r.types & type)) continue;
        const void* field = hint_field_ptr(r.field, h);
        if (!field) continue;
        const uint64_t v = read_field(field, r.field.size);
        if (hint_rule_holds(r, v)) continue;
        char line[640];
        hint_refusal_text(r, h, line, sizeof line);
        if (r.code == -FI_EINVAL)
            EVD_WARN(FI_LOG_CORE, "fi_getinfo: %s\n", line);
        else if (r.code)
            EVD_INFO(FI_LOG_CORE, "fi_getinfo: %s\n", line);
        else
            EVD_DBG(FI_LOG_CORE, "fi_getinfo: %s\n", line);
        if (r.code) return r.code;
    }
    return 0;
}

}  // namespace evd
