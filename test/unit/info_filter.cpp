// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hint filtering (evd::build_infos) against fabricated devices: no hardware.
// Every hint fi_getinfo(3) lets an application give is exercised here, both
// the accepting and the rejecting side.
#include <algorithm>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/ib.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "api.h"
#include "info/info.h"

namespace {

namespace api = evd::api;
using evd::addr_query;
using evd::dev_desc;
using evd::sockaddr_any;

constexpr uint32_t kVer = FI_VERSION(1, 17);

sockaddr_any v4(const char* ip, uint16_t port = 0) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    inet_pton(AF_INET, ip, &s.sin_addr);
    sockaddr_any a;
    a.set(reinterpret_cast<sockaddr*>(&s), sizeof(s));
    return a;
}

sockaddr_any v6(const char* ip, uint16_t port = 0) {
    sockaddr_in6 s{};
    s.sin6_family = AF_INET6;
    s.sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &s.sin6_addr);
    sockaddr_any a;
    a.set(reinterpret_cast<sockaddr*>(&s), sizeof(s));
    return a;
}

// A RoCE device like rxe: Ethernet link, an IPv4 and an IPv6 address.
dev_desc roce() {
    dev_desc d;
    d.name = "roce0";
    d.transport = IBV_TRANSPORT_IB;
    d.port_num = 1;
    d.link_layer = IBV_LINK_LAYER_ETHERNET;
    d.port_state = IBV_PORT_ACTIVE;
    d.subnet_prefix = 0xfe80000000000000ull;
    d.max_qp = 1000;
    d.max_qp_wr = 16384;
    d.max_sge = 30;
    d.max_cq = 2000;
    d.max_cqe = 65535;
    d.max_mr = 4000;
    d.max_srq = 300;
    d.max_srq_wr = 8000;
    d.max_srq_sge = 29;
    d.max_mr_size = ~0ull;
    d.max_msg_sz = 1u << 30;
    d.max_inline = 220;
    d.atomic_cap = IBV_ATOMIC_HCA;
    d.max_inline_ud = 188;
    d.max_ah = 30000;
    d.active_mtu = 1024;
    d.addrs = {v4("192.0.2.1"), v6("2001:db8::1")};
    return d;
}

// An InfiniBand HCA port without IPoIB address: addressable by AF_IB only.
dev_desc ib() {
    dev_desc d = roce();
    d.name = "ib0dev";
    d.link_layer = IBV_LINK_LAYER_INFINIBAND;
    d.subnet_prefix = 0xfe80000000001234ull;
    for (int i = 0; i < 16; ++i) d.gid[i] = static_cast<uint8_t>(i + 1);
    d.pkey = 0x8001;
    d.max_qp_wr = 4096;
    d.max_sge = 4;
    d.max_inline = 0;
    d.max_inline_ud = 0;
    d.active_mtu = 2048;
    d.max_srq = 0;
    d.addrs.clear();
    return d;
}

dev_desc down() {
    dev_desc d = roce();
    d.name = "down0";
    d.port_state = IBV_PORT_DOWN;
    d.addrs = {v4("198.51.100.7")};
    return d;
}

// An iWARP device (siw-like): its own protocol, no immediate data.
dev_desc iwarp() {
    dev_desc d = roce();
    d.name = "iw0";
    d.transport = IBV_TRANSPORT_IWARP;
    d.atomic_cap = IBV_ATOMIC_NONE;  // siw
    d.addrs = {v4("198.51.100.9")};
    return d;
}

std::vector<dev_desc> all() { return {roce(), ib(), down()}; }

// Stores a value that is not one of the enum's (as a careless application
// could) without forming an invalid enum value in this program.
template <class E>
void set_raw(E& field, unsigned v) {
    static_assert(sizeof(E) == sizeof(unsigned));
    std::memcpy(&field, &v, sizeof v);
}

struct infos {
    fi_info* head = nullptr;
    ~infos() { fi_freeinfo(head); }
    std::vector<fi_info*> list() const {
        std::vector<fi_info*> v;
        for (fi_info* i = head; i; i = i->next) v.push_back(i);
        return v;
    }
    std::vector<std::string> domains() const {
        std::vector<std::string> v;
        for (fi_info* i = head; i; i = i->next) v.push_back(i->domain_attr->name);
        return v;
    }
};

// fi_allocinfo() hints plus the registration modes evd needs (an mr_mode of 0
// means, from API 1.5 on, that the application handles none of them).
struct hints_ptr {
    fi_info* h = fi_allocinfo();
    hints_ptr() {
        if (h) h->domain_attr->mr_mode = evd::kMrMode;
    }
    ~hints_ptr() { fi_freeinfo(h); }
};

int run(const fi_info* hints, infos& out, const addr_query& q = {},
        const std::vector<dev_desc>& devs = all(), uint32_t ver = kVer) {
    return evd::build_infos(devs, ver, q, hints, &out.head);
}

// ------------------------------------------------------------------ defaults

TEST(InfoFilter, NullHintsDescribeEveryActiveDeviceAddress) {
    infos out;
    ASSERT_EQ(run(nullptr, out), 0);
    // roce0: one per address (IPv4, IPv6); ib0dev: one AF_IB; down0: none.
    EXPECT_EQ(out.domains(), (std::vector<std::string>{"roce0", "roce0", "ib0dev"}));
    auto l = out.list();
    EXPECT_EQ(l[0]->addr_format, FI_SOCKADDR_IN);
    EXPECT_EQ(l[1]->addr_format, FI_SOCKADDR_IN6);
    EXPECT_EQ(l[2]->addr_format, FI_SOCKADDR_IB);
    ASSERT_EQ(l[2]->src_addrlen, sizeof(sockaddr_ib));
    auto* sib = static_cast<sockaddr_ib*>(l[2]->src_addr);
    EXPECT_EQ(sib->sib_family, AF_IB);
    EXPECT_EQ(ntohs(sib->sib_pkey), 0x8001);
    EXPECT_EQ(0, std::memcmp(&sib->sib_addr, ib().gid, 16));
    EXPECT_EQ(sib->sib_scope_id, 1u);
}

TEST(InfoFilter, LimitsComeFromTheDevice) {
    infos out;
    ASSERT_EQ(run(nullptr, out), 0);
    for (fi_info* i : out.list()) {
        dev_desc d = std::string(i->domain_attr->name) == "roce0" ? roce() : ib();
        SCOPED_TRACE(d.name);
        EXPECT_EQ(i->ep_attr->type, FI_EP_MSG);
        EXPECT_EQ(i->ep_attr->protocol, (uint32_t)FI_PROTO_RDMA_CM_IB_RC);
        EXPECT_EQ(i->ep_attr->max_msg_size, d.max_msg_sz);
        EXPECT_EQ(i->ep_attr->max_order_raw_size, d.max_msg_sz);
        EXPECT_EQ(i->ep_attr->max_order_waw_size, d.max_msg_sz);
        EXPECT_EQ(i->ep_attr->max_order_war_size, 0u);
        EXPECT_EQ(i->ep_attr->tx_ctx_cnt, 1u);
        EXPECT_EQ(i->ep_attr->rx_ctx_cnt, 1u);
        EXPECT_EQ(i->tx_attr->size, std::min<size_t>(evd::get_params().tx_size, d.max_qp_wr));
        EXPECT_EQ(i->rx_attr->size, std::min<size_t>(evd::get_params().rx_size, d.max_qp_wr));
        EXPECT_EQ(i->tx_attr->iov_limit, d.max_sge);
        EXPECT_EQ(i->rx_attr->iov_limit, d.max_sge);
        EXPECT_EQ(i->tx_attr->inject_size, d.max_inline);
        EXPECT_EQ(i->tx_attr->rma_iov_limit, 1u);
        EXPECT_EQ(i->domain_attr->cq_cnt, d.max_cq);
        EXPECT_EQ(i->domain_attr->cntr_cnt, d.max_cq);
        EXPECT_EQ(i->domain_attr->ep_cnt, d.max_qp);
        EXPECT_EQ(i->domain_attr->tx_ctx_cnt, d.max_qp);
        EXPECT_EQ(i->domain_attr->rx_ctx_cnt, d.max_qp);
        EXPECT_EQ(i->domain_attr->mr_cnt, d.max_mr);
        EXPECT_EQ(i->domain_attr->max_ep_srx_ctx, d.max_srq);
        EXPECT_EQ(i->domain_attr->max_ep_tx_ctx, 1u);
        EXPECT_EQ(i->domain_attr->max_ep_rx_ctx, 1u);
        EXPECT_EQ(i->domain_attr->max_ep_stx_ctx, 0u);
        EXPECT_EQ(i->domain_attr->mr_key_size, 4u);
        EXPECT_EQ(i->domain_attr->cq_data_size, 4u);
        EXPECT_EQ(i->domain_attr->mr_iov_limit, 1u);
        EXPECT_EQ(i->domain_attr->mr_mode, evd::kMrMode);
        EXPECT_EQ(i->domain_attr->threading, FI_THREAD_SAFE);
        EXPECT_EQ(i->mode, (uint64_t)FI_RX_CQ_DATA);
        EXPECT_EQ(i->rx_attr->mode, (uint64_t)FI_RX_CQ_DATA);
        EXPECT_EQ(i->caps, evd::kCaps);
        EXPECT_STREQ(i->domain_attr->name, d.name.c_str());
        EXPECT_EQ(i->fabric_attr->name, evd::fabric_name(d));
        EXPECT_EQ(i->fabric_attr->prov_name, nullptr);  // the core fills it
        EXPECT_EQ(i->fabric_attr->prov_version, evd::kProvVersion);
        EXPECT_EQ(i->fabric_attr->api_version, kVer);
    }
}

TEST(InfoFilter, FabricNamesFollowVerbs) {
    EXPECT_EQ(evd::fabric_name(roce()), "IB-0xfe80000000000000");
    EXPECT_EQ(evd::fabric_name(ib()), "IB-0xfe80000000001234");
    dev_desc iw = roce();
    iw.transport = IBV_TRANSPORT_IWARP;
    EXPECT_EQ(evd::fabric_name(iw), "Ethernet-iWARP");
}

// Each device offers its own protocol, as verbs does: iWARP endpoints are
// FI_PROTO_IWARP, and a hint naming one protocol keeps only its devices.
TEST(InfoFilter, ProtocolFollowsTheTransport) {
    const std::vector<dev_desc> devs = {roce(), iwarp()};
    {
        infos out;
        ASSERT_EQ(run(nullptr, out, {}, devs), 0);
        for (fi_info* i : out.list())
            EXPECT_EQ(i->ep_attr->protocol, std::string(i->domain_attr->name) == "iw0"
                                                ? (uint32_t)FI_PROTO_IWARP
                                                : (uint32_t)FI_PROTO_RDMA_CM_IB_RC);
    }
    struct {
        uint32_t proto;
        std::vector<std::string> domains;
    } cases[] = {{FI_PROTO_IWARP, {"iw0"}},
                 {FI_PROTO_RDMA_CM_IB_RC, {"roce0", "roce0"}},
                 {FI_PROTO_UNSPEC, {"roce0", "roce0", "iw0"}}};
    for (const auto& c : cases) {
        hints_ptr h;
        h.h->ep_attr->protocol = c.proto;
        infos out;
        ASSERT_EQ(run(h.h, out, {}, devs), 0) << c.proto;
        EXPECT_EQ(out.domains(), c.domains) << c.proto;
    }
    hints_ptr h;
    h.h->ep_attr->protocol = FI_PROTO_IWARP;
    infos out;
    EXPECT_EQ(run(h.h, out), -FI_ENODATA);  // no iWARP device among all()
}

// FI_ATOMIC is offered by devices with atomics only; hints that ask for it
// skip the others, and atomics, like RMA, address memory remotely.
TEST(InfoFilter, AtomicsFollowTheDevice) {
    const std::vector<dev_desc> devs = {roce(), iwarp()};
    {
        infos out;
        ASSERT_EQ(run(nullptr, out, {}, devs), 0);
        ASSERT_FALSE(out.list().empty());
        for (fi_info* i : out.list()) {
            const bool is_iw = std::string(i->domain_attr->name) == "iw0";
            SCOPED_TRACE(i->domain_attr->name);
            EXPECT_EQ(i->caps & FI_ATOMIC, is_iw ? 0u : uint64_t{FI_ATOMIC});
            EXPECT_EQ(i->tx_attr->caps & FI_ATOMIC, is_iw ? 0u : uint64_t{FI_ATOMIC});
            EXPECT_EQ(i->rx_attr->caps & FI_ATOMIC, is_iw ? 0u : uint64_t{FI_ATOMIC});
            EXPECT_EQ(i->tx_attr->msg_order & FI_ORDER_ATOMIC_RAW,
                      is_iw ? 0u : uint64_t{FI_ORDER_ATOMIC_RAW});
            EXPECT_EQ(i->rx_attr->msg_order & FI_ORDER_ATOMIC_RAR,
                      is_iw ? 0u : uint64_t{FI_ORDER_ATOMIC_RAR});
        }
    }
    {
        hints_ptr h;
        h.h->caps = FI_ATOMIC;
        infos out;
        ASSERT_EQ(run(h.h, out, {}, devs), 0);
        EXPECT_EQ(out.domains(), (std::vector<std::string>{"roce0", "roce0"}));
        for (fi_info* i : out.list()) {
            EXPECT_EQ(i->caps & FI_ATOMIC, uint64_t{FI_ATOMIC});
            EXPECT_EQ(i->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY),
                      FI_MR_VIRT_ADDR | FI_MR_PROV_KEY);
        }
    }
    {
        hints_ptr h;
        h.h->tx_attr->caps = FI_ATOMIC | FI_READ;
        infos out;
        ASSERT_EQ(run(h.h, out, {}, {iwarp()}), -FI_ENODATA);
    }
    {
        hints_ptr h;
        h.h->caps = FI_MSG;  // no remote access: no remote-key duties
        infos out;
        ASSERT_EQ(run(h.h, out, {}, devs), 0);
        for (fi_info* i : out.list())
            EXPECT_EQ(i->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY), 0);
    }
}

// iWARP carries no immediate data and completes sends locally: its answer
// has neither, and hints that need them skip it.
TEST(InfoFilter, IwarpHasNoCqDataNorTransmitComplete) {
    const std::vector<dev_desc> devs = {roce(), iwarp()};
    {
        hints_ptr h;
        h.h->mode = FI_RX_CQ_DATA;
        infos out;
        ASSERT_EQ(run(h.h, out, {}, devs), 0);
        for (fi_info* i : out.list()) {
            const bool is_iw = std::string(i->domain_attr->name) == "iw0";
            SCOPED_TRACE(i->domain_attr->name);
            EXPECT_EQ(i->domain_attr->cq_data_size, is_iw ? 0u : 4u);
            EXPECT_EQ(i->mode & FI_RX_CQ_DATA, is_iw ? 0u : (uint64_t)FI_RX_CQ_DATA);
            EXPECT_EQ(i->rx_attr->mode & FI_RX_CQ_DATA, is_iw ? 0u : (uint64_t)FI_RX_CQ_DATA);
        }
    }
    {
        hints_ptr h;
        h.h->mode = FI_RX_CQ_DATA;
        h.h->domain_attr->cq_data_size = 4;
        infos out;
        ASSERT_EQ(run(h.h, out, {}, devs), 0);
        EXPECT_EQ(out.domains(), (std::vector<std::string>{"roce0", "roce0"}));
    }
    {
        hints_ptr h;
        h.h->tx_attr->op_flags = FI_TRANSMIT_COMPLETE;
        infos out;
        ASSERT_EQ(run(h.h, out, {}, devs), 0);
        EXPECT_EQ(out.domains(), (std::vector<std::string>{"roce0", "roce0"}));
    }
    {
        hints_ptr h;
        h.h->tx_attr->op_flags = FI_INJECT_COMPLETE;
        infos out;
        ASSERT_EQ(run(h.h, out, {}, devs), 0);
        EXPECT_EQ(out.domains(), (std::vector<std::string>{"roce0", "roce0", "iw0"}));
    }
}

TEST(InfoFilter, NoDevicesIsNoData) {
    infos out;
    EXPECT_EQ(run(nullptr, out, {}, {}), -FI_ENODATA);
    EXPECT_EQ(out.head, nullptr);
    EXPECT_EQ(run(nullptr, out, {}, {down()}), -FI_ENODATA);
}

TEST(InfoFilter, NullOutputIsInvalid) {
    EXPECT_EQ(evd::build_infos(all(), kVer, {}, nullptr, nullptr), -FI_EINVAL);
}

// ------------------------------------------------------------------ table

struct hint_case {
    const char* name;
    std::function<void(fi_info*)> set;
    int rc;                                  // expected return
    std::vector<std::string> domains = {};   // expected domain list when rc == 0
    std::function<void(const infos&)> check = nullptr;
};

void PrintTo(const hint_case& c, std::ostream* os) { *os << c.name; }

class HintTable : public ::testing::TestWithParam<hint_case> {};

TEST_P(HintTable, Filters) {
    const hint_case& c = GetParam();
    hints_ptr h;
    ASSERT_NE(h.h, nullptr);
    c.set(h.h);
    infos out;
    int rc = run(h.h, out);
    EXPECT_EQ(rc, c.rc) << fi_strerror(-rc);
    if (c.rc == 0) {
        EXPECT_EQ(out.domains(), c.domains);
        if (c.check) c.check(out);
    } else {
        EXPECT_EQ(out.head, nullptr);
    }
}

const std::vector<std::string> kAll = {"roce0", "roce0", "ib0dev"};
const std::vector<std::string> kRoce = {"roce0", "roce0"};

auto each = [](std::function<void(fi_info*)> f) {
    return [f](const infos& o) {
        for (fi_info* i : o.list()) f(i);
    };
};

std::vector<hint_case> cases() {
    std::vector<hint_case> v = {
        {"empty hints", [](fi_info*) {}, 0, kAll},
        // --- provider / ep type / protocol
        {"prov_name evd", [](fi_info* h) { h->fabric_attr->prov_name = strdup("evd"); }, 0, kAll},
        {"prov_name layered", [](fi_info* h) { h->fabric_attr->prov_name = strdup("ofi_rxm;EVD"); }, 0, kAll},
        {"prov_name verbs", [](fi_info* h) { h->fabric_attr->prov_name = strdup("verbs"); }, -FI_ENODATA},
        {"ep_type MSG", [](fi_info* h) { h->ep_attr->type = FI_EP_MSG; }, 0, kAll},
        {"ep_type UNSPEC", [](fi_info* h) { h->ep_attr->type = FI_EP_UNSPEC; }, 0, kAll},
        {"ep_type RDM", [](fi_info* h) { h->ep_attr->type = FI_EP_RDM; }, -FI_ENODATA},
        // datagram endpoints: asked by name, one per address GID (GID 0 on an
        // IB port without IP), UD's attributes (fi_evd(7), DATAGRAM ENDPOINTS)
        {"ep_type DGRAM", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; }, 0, kAll, each([](fi_info* i) {
             EXPECT_EQ(i->ep_attr->type, FI_EP_DGRAM);
             EXPECT_EQ(i->ep_attr->protocol, static_cast<uint32_t>(FI_PROTO_IB_UD));
             EXPECT_EQ(i->addr_format, static_cast<uint32_t>(FI_ADDR_IB_UD));
             EXPECT_EQ(i->src_addrlen, 32u);
             const bool r = std::string(i->domain_attr->name) == "roce0";
             EXPECT_EQ(i->ep_attr->max_msg_size, r ? 1024u : 2048u);  // the active MTU
             EXPECT_EQ(i->tx_attr->inject_size, r ? 188u : 0u);       // a UD QP's inline
             EXPECT_EQ(i->caps & (FI_RMA | FI_ATOMIC | FI_SOURCE), 0u);
             EXPECT_EQ(i->tx_attr->msg_order, static_cast<uint64_t>(FI_ORDER_SAS));
             EXPECT_EQ(i->rx_attr->iov_limit, r ? 29u : 3u);  // one SGE is the receive header's
             EXPECT_EQ(i->tx_attr->iov_limit, r ? 30u : 4u);
             EXPECT_EQ(i->domain_attr->max_ep_srx_ctx, r ? 300u : 0u);
             EXPECT_EQ(i->mode & FI_MSG_PREFIX, 0u);
         })},
        {"ep_type DGRAM, FI_SOURCE", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; h->caps = FI_MSG | FI_SOURCE; }, 0, kAll,
         each([](fi_info* i) { EXPECT_TRUE(i->rx_attr->caps & FI_SOURCE); EXPECT_TRUE(i->caps & FI_SOURCE); })},
        {"ep_type DGRAM, FI_RMA", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; h->caps = FI_MSG | FI_RMA; }, -FI_ENODATA},
        {"ep_type DGRAM, sockaddr", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; h->addr_format = FI_SOCKADDR_IN; }, -FI_ENODATA},
        {"ep_type DGRAM, rx iov_limit of every SGE", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; h->rx_attr->iov_limit = 30; }, -FI_ENODATA},
        {"ep_type DGRAM, message above the MTU", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; h->ep_attr->max_msg_size = 4096; }, -FI_ENODATA},
        {"ep_type DGRAM, shared rx", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT; }, 0, kRoce,
         each([](fi_info* i) { EXPECT_EQ(i->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT); })},
        {"ep_type DGRAM, shared rx and FI_SOURCE", [](fi_info* h) { h->ep_attr->type = FI_EP_DGRAM; h->caps = FI_MSG | FI_SOURCE; h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT; }, -FI_ENODATA},
        {"ep_type MSG, FI_SOURCE", [](fi_info* h) { h->ep_attr->type = FI_EP_MSG; h->caps = FI_MSG | FI_SOURCE; }, -FI_ENODATA},
        {"FI_ADDR_IB_UD without DGRAM", [](fi_info* h) { h->addr_format = FI_ADDR_IB_UD; }, -FI_ENODATA},
        {"protocol RC", [](fi_info* h) { h->ep_attr->protocol = FI_PROTO_RDMA_CM_IB_RC; }, 0, kAll},
        {"protocol iWARP", [](fi_info* h) { h->ep_attr->protocol = FI_PROTO_IWARP; }, -FI_ENODATA},
        {"protocol XRC", [](fi_info* h) { h->ep_attr->protocol = FI_PROTO_RDMA_CM_IB_XRC; }, -FI_ENODATA},
        {"protocol_version 2", [](fi_info* h) { h->ep_attr->protocol_version = 2; }, -FI_ENODATA},
        // --- caps
        {"caps MSG", [](fi_info* h) { h->caps = FI_MSG; }, 0, kAll, each([](fi_info* i) {
             EXPECT_EQ(i->caps, (uint64_t)(FI_MSG | FI_LOCAL_COMM | FI_REMOTE_COMM));
             EXPECT_EQ(i->tx_attr->caps & FI_RMA, 0u);
         })},
        {"caps all", [](fi_info* h) { h->caps = evd::kCaps; }, 0, kAll},
        {"caps TAGGED", [](fi_info* h) { h->caps = FI_MSG | FI_TAGGED; }, -FI_ENODATA},
        {"caps ATOMIC", [](fi_info* h) { h->caps = FI_ATOMIC; }, 0, kAll, each([](fi_info* i) {
             EXPECT_EQ(i->caps, (uint64_t)(FI_ATOMIC | FI_LOCAL_COMM | FI_REMOTE_COMM));
         })},
        {"caps SOURCE", [](fi_info* h) { h->caps = FI_MSG | FI_SOURCE; }, -FI_ENODATA},
        {"caps MULTI_RECV", [](fi_info* h) { h->caps = FI_MSG | FI_MULTI_RECV; }, -FI_ENODATA},
        {"tx caps TAGGED", [](fi_info* h) { h->tx_attr->caps = FI_TAGGED; }, -FI_ENODATA},
        {"rx caps TAGGED", [](fi_info* h) { h->rx_attr->caps = FI_TAGGED; }, -FI_ENODATA},
        {"domain caps SHARED_AV", [](fi_info* h) { h->domain_attr->caps = FI_SHARED_AV; }, -FI_ENODATA},
        // --- modes and immediate data
        {"mode RX_CQ_DATA", [](fi_info* h) { h->mode = FI_RX_CQ_DATA; h->domain_attr->mr_mode = evd::kMrMode; }, 0, kAll,
         each([](fi_info* i) {
             EXPECT_EQ(i->domain_attr->cq_data_size, 4u);
             EXPECT_EQ(i->mode, (uint64_t)FI_RX_CQ_DATA);
         })},
        {"rx mode RX_CQ_DATA", [](fi_info* h) { h->rx_attr->mode = FI_RX_CQ_DATA; h->domain_attr->mr_mode = evd::kMrMode; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->domain_attr->cq_data_size, 4u); })},
        {"no RX_CQ_DATA: no immediate data", [](fi_info* h) { h->mode = FI_CONTEXT; h->domain_attr->mr_mode = evd::kMrMode; }, 0, kAll,
         each([](fi_info* i) {
             EXPECT_EQ(i->domain_attr->cq_data_size, 0u);
             EXPECT_EQ(i->mode, 0u);  // FI_CONTEXT is not needed
             EXPECT_EQ(i->rx_attr->mode, 0u);
         })},
        {"cq_data_size without mode", [](fi_info* h) { h->domain_attr->cq_data_size = 4; }, -FI_ENODATA},
        {"cq_data_size 8", [](fi_info* h) { h->mode = FI_RX_CQ_DATA; h->domain_attr->cq_data_size = 8; }, -FI_ENODATA},
        // --- memory registration mode
        {"mr_mode evd's", [](fi_info* h) { h->domain_attr->mr_mode = evd::kMrMode; }, 0, kAll},
        {"mr_mode superset", [](fi_info* h) { h->domain_attr->mr_mode = evd::kMrMode | FI_MR_ENDPOINT | FI_MR_RAW; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->domain_attr->mr_mode, evd::kMrMode); })},
        {"mr_mode lacks PROV_KEY", [](fi_info* h) { h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED; }, -FI_ENODATA},
        {"mr_mode lacks LOCAL", [](fi_info* h) { h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY; }, -FI_ENODATA},
        {"mr_mode lacks LOCAL but mode LOCAL_MR", [](fi_info* h) {
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
         }, 0, kAll, each([](fi_info* i) {
             // FI_MR_LOCAL was offered as the mode bit: answered the same way.
             EXPECT_EQ(i->domain_attr->mr_mode, evd::kMrMode & ~FI_MR_LOCAL);
             EXPECT_TRUE(i->mode & api::kModeLocalMr);
         })},
        {"mode LOCAL_MR and extra mr_mode bits", [](fi_info* h) {
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_RAW |
                                       FI_MR_ENDPOINT | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT;
         }, 0, kAll, each([](fi_info* i) {
             EXPECT_EQ(i->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
             EXPECT_TRUE(i->mode & api::kModeLocalMr);
         })},
        {"mr_mode UNSPEC with mode LOCAL_MR (API >= 1.5 offers no bit)", [](fi_info* h) {
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = api::kMrUnspec;
         }, -FI_ENODATA},
        {"mr_mode UNSPEC, msg-only caps, mode LOCAL_MR (ALLOCATED still needed)", [](fi_info* h) {
             h->caps = FI_MSG;
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = api::kMrUnspec;
         }, -FI_ENODATA},
        {"msg-only caps, mode LOCAL_MR, mr_mode ALLOCATED", [](fi_info* h) {
             h->caps = FI_MSG;
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = FI_MR_ALLOCATED;
         }, 0, kAll, each([](fi_info* i) {
             EXPECT_EQ(i->domain_attr->mr_mode, FI_MR_ALLOCATED);
             EXPECT_TRUE(i->mode & api::kModeLocalMr);
         })},
        {"msg-only caps, mr_mode LOCAL only", [](fi_info* h) {
             h->caps = FI_MSG;
             h->domain_attr->mr_mode = FI_MR_LOCAL;
         }, -FI_ENODATA},
        {"rma caps, mr_mode LOCAL|ALLOCATED", [](fi_info* h) {
             h->caps = FI_MSG | FI_RMA;
             h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED;
         }, -FI_ENODATA},
        {"mode LOCAL_MR with mr_mode LOCAL is not echoed", [](fi_info* h) { h->mode = api::kModeLocalMr; }, 0, kAll,
         each([](fi_info* i) { EXPECT_FALSE(i->mode & api::kModeLocalMr); })},
        {"mr_mode UNSPEC without LOCAL_MR", [](fi_info* h) { h->domain_attr->mr_mode = api::kMrUnspec; }, -FI_ENODATA},
        {"mr_mode SCALABLE", [](fi_info* h) { h->mode = api::kModeLocalMr; h->domain_attr->mr_mode = api::kMrScalable; }, -FI_ENODATA},
        {"mr_mode BASIC + LOCAL_MR", [](fi_info* h) { h->mode = api::kModeLocalMr; h->domain_attr->mr_mode = api::kMrBasic; }, 0, kAll,
         each([](fi_info* i) {
             EXPECT_EQ(i->domain_attr->mr_mode, api::kMrBasic);
             EXPECT_TRUE(i->mode & api::kModeLocalMr);
         })},
        {"mr_mode BASIC without LOCAL_MR", [](fi_info* h) { h->domain_attr->mr_mode = api::kMrBasic; }, -FI_ENODATA},
        {"mr_mode BASIC mixed", [](fi_info* h) { h->mode = api::kModeLocalMr; h->domain_attr->mr_mode = api::kMrBasic | FI_MR_LOCAL; }, -FI_EINVAL},
        {"msg-only caps need no remote keys", [](fi_info* h) {
             h->caps = FI_MSG;
             h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED;
         }, 0, kAll, each([](fi_info* i) { EXPECT_EQ(i->domain_attr->mr_mode, FI_MR_LOCAL | FI_MR_ALLOCATED); })},
        // --- address format and addresses
        {"addr_format IN", [](fi_info* h) { h->addr_format = FI_SOCKADDR_IN; }, 0, {"roce0"},
         each([](fi_info* i) { EXPECT_EQ(i->addr_format, FI_SOCKADDR_IN); })},
        {"addr_format IN6", [](fi_info* h) { h->addr_format = FI_SOCKADDR_IN6; }, 0, {"roce0"},
         each([](fi_info* i) { EXPECT_EQ(i->addr_format, FI_SOCKADDR_IN6); })},
        {"addr_format IB", [](fi_info* h) { h->addr_format = FI_SOCKADDR_IB; }, 0, {"ib0dev"}},
        {"addr_format SOCKADDR", [](fi_info* h) { h->addr_format = FI_SOCKADDR; }, 0, kAll},
        {"addr_format PSMX2", [](fi_info* h) { h->addr_format = FI_ADDR_PSMX2; }, -FI_ENODATA},
        {"addr_format STR", [](fi_info* h) { h->addr_format = FI_ADDR_STR; }, -FI_ENODATA},
        {"src_addr without length", [](fi_info* h) {
             h->src_addr = calloc(1, sizeof(sockaddr_in));
             h->src_addrlen = 0;
         }, -FI_EINVAL},
        {"dest_addr without length", [](fi_info* h) {
             h->dest_addr = calloc(1, sizeof(sockaddr_in));
             h->dest_addrlen = 0;
         }, -FI_EINVAL},
        {"src_addr truncated", [](fi_info* h) {
             auto* s = static_cast<sockaddr_in6*>(calloc(1, sizeof(sockaddr_in6)));
             s->sin6_family = AF_INET6;
             h->src_addr = s;
             h->src_addrlen = sizeof(sockaddr_in);
         }, -FI_EINVAL},
        {"src_addr unknown family", [](fi_info* h) {
             auto* s = static_cast<sockaddr*>(calloc(1, sizeof(sockaddr_storage)));
             s->sa_family = AF_UNIX;
             h->src_addr = s;
             h->src_addrlen = sizeof(sockaddr_storage);
         }, -FI_EINVAL},
        {"src_addr family contradicts addr_format", [](fi_info* h) {
             auto* s = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
             s->sin_family = AF_INET;
             h->src_addr = s;
             h->src_addrlen = sizeof(*s);
             h->addr_format = FI_SOCKADDR_IN6;
         }, -FI_EINVAL},
        // --- fabric and domain names
        {"domain name", [](fi_info* h) { h->domain_attr->name = strdup("ib0dev"); }, 0, {"ib0dev"}},
        {"domain name any case", [](fi_info* h) { h->domain_attr->name = strdup("ROCE0"); }, 0, kRoce},
        {"domain name unknown", [](fi_info* h) { h->domain_attr->name = strdup("mlx5_0"); }, -FI_ENODATA},
        {"domain name of a down device", [](fi_info* h) { h->domain_attr->name = strdup("down0"); }, -FI_ENODATA},
        {"fabric name", [](fi_info* h) { h->fabric_attr->name = strdup("IB-0xfe80000000001234"); }, 0, {"ib0dev"}},
        {"fabric name unknown", [](fi_info* h) { h->fabric_attr->name = strdup("IB-0x1"); }, -FI_ENODATA},
        // --- domain attributes
        {"threading DOMAIN", [](fi_info* h) { h->domain_attr->threading = FI_THREAD_DOMAIN; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->domain_attr->threading, FI_THREAD_DOMAIN); })},
        {"threading bogus", [](fi_info* h) { set_raw(h->domain_attr->threading, 77); }, -FI_EINVAL},
        {"progress MANUAL", [](fi_info* h) { h->domain_attr->control_progress = FI_PROGRESS_MANUAL; h->domain_attr->data_progress = FI_PROGRESS_MANUAL; }, 0, kAll,
         each([](fi_info* i) {
             EXPECT_EQ(i->domain_attr->control_progress, FI_PROGRESS_MANUAL);
             EXPECT_EQ(i->domain_attr->data_progress, FI_PROGRESS_MANUAL);
         })},
        {"progress data MANUAL only", [](fi_info* h) { h->domain_attr->data_progress = FI_PROGRESS_MANUAL; }, 0, kAll,
         each([](fi_info* i) {
             EXPECT_EQ(i->domain_attr->control_progress, FI_PROGRESS_AUTO);
             EXPECT_EQ(i->domain_attr->data_progress, FI_PROGRESS_MANUAL);
         })},
        {"progress bogus", [](fi_info* h) { set_raw(h->domain_attr->data_progress, 9); }, -FI_EINVAL},
        {"resource_mgmt bogus", [](fi_info* h) { set_raw(h->domain_attr->resource_mgmt, 5); }, -FI_EINVAL},
        {"av_type bogus", [](fi_info* h) { set_raw(h->domain_attr->av_type, 6); }, -FI_EINVAL},
        {"av_type TABLE", [](fi_info* h) { h->domain_attr->av_type = FI_AV_TABLE; }, 0, kAll},
        {"ep_type bogus", [](fi_info* h) { set_raw(h->ep_attr->type, 99); }, -FI_ENODATA},
        {"resource_mgmt DISABLED", [](fi_info* h) { h->domain_attr->resource_mgmt = FI_RM_DISABLED; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->domain_attr->resource_mgmt, FI_RM_DISABLED); })},
        {"mr_key_size 4", [](fi_info* h) { h->domain_attr->mr_key_size = 4; }, 0, kAll},
        {"mr_key_size 8", [](fi_info* h) { h->domain_attr->mr_key_size = 8; }, -FI_ENODATA},
        {"cq_cnt at roce max", [](fi_info* h) { h->domain_attr->cq_cnt = 2000; }, 0, kAll},
        {"cq_cnt over", [](fi_info* h) { h->domain_attr->cq_cnt = 2001; }, -FI_ENODATA},
        {"ep_cnt over", [](fi_info* h) { h->domain_attr->ep_cnt = 1001; }, -FI_ENODATA},
        {"tx_ctx_cnt over", [](fi_info* h) { h->domain_attr->tx_ctx_cnt = 1001; }, -FI_ENODATA},
        {"rx_ctx_cnt over", [](fi_info* h) { h->domain_attr->rx_ctx_cnt = 1001; }, -FI_ENODATA},
        {"mr_cnt over", [](fi_info* h) { h->domain_attr->mr_cnt = 4001; }, -FI_ENODATA},
        {"cntr_cnt at max", [](fi_info* h) { h->domain_attr->cntr_cnt = 2000; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->domain_attr->cntr_cnt, 2000u); })},
        {"cntr_cnt over", [](fi_info* h) { h->domain_attr->cntr_cnt = 2001; }, -FI_ENODATA},
        {"max_ep_srx_ctx needs SRQs", [](fi_info* h) { h->domain_attr->max_ep_srx_ctx = 1; }, 0, kRoce},
        {"max_ep_tx_ctx 2", [](fi_info* h) { h->domain_attr->max_ep_tx_ctx = 2; }, -FI_ENODATA},
        {"max_ep_rx_ctx 2", [](fi_info* h) { h->domain_attr->max_ep_rx_ctx = 2; }, -FI_ENODATA},
        {"max_ep_stx_ctx 1", [](fi_info* h) { h->domain_attr->max_ep_stx_ctx = 1; }, -FI_ENODATA},
        {"mr_iov_limit 2", [](fi_info* h) { h->domain_attr->mr_iov_limit = 2; }, -FI_ENODATA},
        {"auth_key_size", [](fi_info* h) { h->domain_attr->auth_key_size = 8; }, -FI_ENODATA},
        {"max_err_data too big", [](fi_info* h) { h->domain_attr->max_err_data = 4096; }, -FI_ENODATA},
        // --- endpoint attributes
        {"max_msg_size at max", [](fi_info* h) { h->ep_attr->max_msg_size = 1u << 30; }, 0, kAll},
        {"max_msg_size over", [](fi_info* h) { h->ep_attr->max_msg_size = (1ull << 30) + 1; }, -FI_ENODATA},
        {"max_order_raw_size over", [](fi_info* h) { h->ep_attr->max_order_raw_size = (1ull << 30) + 1; }, -FI_ENODATA},
        {"max_order_waw_size over", [](fi_info* h) { h->ep_attr->max_order_waw_size = (1ull << 30) + 1; }, -FI_ENODATA},
        {"max_order_war_size", [](fi_info* h) { h->ep_attr->max_order_war_size = 1; }, -FI_ENODATA},
        {"msg_prefix_size", [](fi_info* h) { h->ep_attr->msg_prefix_size = 8; }, -FI_ENODATA},
        {"ep tx_ctx_cnt 2", [](fi_info* h) { h->ep_attr->tx_ctx_cnt = 2; }, -FI_ENODATA},
        {"ep tx_ctx_cnt shared", [](fi_info* h) { h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT; }, -FI_ENODATA},
        {"ep rx_ctx_cnt shared", [](fi_info* h) { h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT; }, 0, kRoce,
         each([](fi_info* i) { EXPECT_EQ(i->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT); })},
        {"ep rx_ctx_cnt 2", [](fi_info* h) { h->ep_attr->rx_ctx_cnt = 2; }, -FI_ENODATA},
        {"ep auth_key_size", [](fi_info* h) { h->ep_attr->auth_key_size = 4; }, -FI_ENODATA},
        // --- transmit attributes
        {"tx size asked", [](fi_info* h) { h->tx_attr->size = 64; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->tx_attr->size, 64u); })},
        {"tx size over ib", [](fi_info* h) { h->tx_attr->size = 4097; }, 0, kRoce},
        {"tx size over all", [](fi_info* h) { h->tx_attr->size = 16385; }, -FI_ENODATA},
        {"tx iov_limit over ib", [](fi_info* h) { h->tx_attr->iov_limit = 5; }, 0, kRoce,
         each([](fi_info* i) { EXPECT_EQ(i->tx_attr->iov_limit, 5u); })},
        {"tx iov_limit over all", [](fi_info* h) { h->tx_attr->iov_limit = 31; }, -FI_ENODATA},
        {"inject_size asked", [](fi_info* h) { h->tx_attr->inject_size = 64; }, 0, kRoce,
         each([](fi_info* i) { EXPECT_EQ(i->tx_attr->inject_size, 64u); })},
        {"inject_size over", [](fi_info* h) { h->tx_attr->inject_size = 221; }, -FI_ENODATA},
        {"rma_iov_limit 1", [](fi_info* h) { h->tx_attr->rma_iov_limit = 1; }, 0, kAll},
        {"rma_iov_limit 2", [](fi_info* h) { h->tx_attr->rma_iov_limit = 2; }, -FI_ENODATA},
        {"tx op_flags", [](fi_info* h) { h->tx_attr->op_flags = FI_INJECT | FI_COMPLETION; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->tx_attr->op_flags, (uint64_t)(FI_INJECT | FI_COMPLETION)); })},
        {"tx op_flags DELIVERY_COMPLETE", [](fi_info* h) { h->tx_attr->op_flags = FI_DELIVERY_COMPLETE; }, -FI_ENODATA},
        {"tx msg_order SAS", [](fi_info* h) { h->tx_attr->msg_order = FI_ORDER_SAS; }, 0, kAll},
        {"tx msg_order WAR", [](fi_info* h) { h->tx_attr->msg_order = FI_ORDER_WAR; }, -FI_ENODATA},
        {"tx comp_order STRICT", [](fi_info* h) { h->tx_attr->comp_order = api::kOrderStrict; }, 0, kAll},
        {"tx comp_order DATA", [](fi_info* h) { h->tx_attr->comp_order = api::kOrderData; }, -FI_ENODATA},
        // --- receive attributes
        {"rx size asked", [](fi_info* h) { h->rx_attr->size = 100; }, 0, kAll,
         each([](fi_info* i) { EXPECT_EQ(i->rx_attr->size, 100u); })},
        {"rx size over", [](fi_info* h) { h->rx_attr->size = 16385; }, -FI_ENODATA},
        {"rx iov_limit over", [](fi_info* h) { h->rx_attr->iov_limit = 31; }, -FI_ENODATA},
        {"rx op_flags MULTI_RECV", [](fi_info* h) { h->rx_attr->op_flags = FI_MULTI_RECV; }, -FI_ENODATA},
        {"rx comp_order DATA", [](fi_info* h) { h->rx_attr->comp_order = api::kOrderData; }, 0, kAll},
        {"rx msg_order WAR", [](fi_info* h) { h->rx_attr->msg_order = FI_ORDER_WAR; }, -FI_ENODATA},
    };
    return v;
}

INSTANTIATE_TEST_SUITE_P(InfoFilter, HintTable, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<hint_case>& i) {
                             std::string s;
                             for (const char* p = i.param.name; *p; ++p)
                                 s += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                             return s;
                         });

// ------------------------------------------------------------------ versions

// Every API version the headers know, from 1.0 to the newest: what evd must
// answer a caller of that version.
std::vector<uint32_t> every_api_version() {
    std::vector<uint32_t> v;
    for (unsigned m = 0; m <= 22; ++m) v.push_back(FI_VERSION(1, m));
    for (unsigned m = 0; m <= 30; ++m) v.push_back(FI_VERSION(2, m));
    std::erase_if(v, [](uint32_t x) { return x > api::kHeaders; });
    return v;
}

struct version_row {
    const char* name;
    std::function<void(fi_info*)> hint;
    std::function<int(uint32_t)> want;                 // expected return code per version
    std::function<void(uint32_t, fi_info*)> check;     // on each answer when want == 0
};

TEST(InfoFilter, EveryApiVersionGetsItsOwnRules) {
    auto lt = [](uint32_t v, unsigned maj, unsigned min) { return FI_VERSION_LT(v, FI_VERSION(maj, min)); };
    const std::vector<version_row> rows = {
        {"1.5 hints (mr_mode bits evd needs)", [](fi_info*) {},
         [&](uint32_t v) { return lt(v, 1, 5) ? -FI_ENODATA : 0; },
         [&](uint32_t v, fi_info* i) {
             EXPECT_EQ(i->fabric_attr->api_version, v);
             EXPECT_EQ(i->domain_attr->mr_mode & ~FI_MR_LOCAL, evd::kMrMode & ~FI_MR_LOCAL);
             // RC completes in order; from 2.0 the deprecated bits are not reported
             EXPECT_EQ(i->tx_attr->comp_order, lt(v, 2, 0) ? api::kOrderStrict : 0u);
             EXPECT_EQ(i->rx_attr->comp_order,
                       lt(v, 2, 0) ? api::kOrderStrict | api::kOrderData : 0u);
             EXPECT_EQ(i->domain_attr->control_progress, FI_PROGRESS_AUTO);
             EXPECT_FALSE(i->mode & api::kModeLocalMr);
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 20))
             EXPECT_EQ(i->domain_attr->max_ep_auth_key, 0u);
             EXPECT_EQ(i->domain_attr->max_group_id, 0u);
#endif
         }},
        {"mr_mode BASIC with mode FI_LOCAL_MR",
         [](fi_info* h) {
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = api::kMrBasic;
         },
         [](uint32_t) { return 0; },
         [](uint32_t, fi_info* i) {
             EXPECT_EQ(i->domain_attr->mr_mode, api::kMrBasic);
             EXPECT_TRUE(i->mode & api::kModeLocalMr);
         }},
        {"mr_mode UNSPEC with mode FI_LOCAL_MR",
         [](fi_info* h) {
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = api::kMrUnspec;
         },
         [&](uint32_t v) { return lt(v, 1, 5) ? 0 : -FI_ENODATA; },
         [](uint32_t, fi_info* i) { EXPECT_EQ(i->domain_attr->mr_mode, api::kMrBasic); }},
        {"mr_mode SCALABLE",
         [](fi_info* h) {
             h->mode = api::kModeLocalMr;
             h->domain_attr->mr_mode = api::kMrScalable;
         },
         [](uint32_t) { return -FI_ENODATA; }, nullptr},
        {"control_progress FI_PROGRESS_CONTROL_UNIFIED",
         [](fi_info* h) { set_raw(h->domain_attr->control_progress, api::kProgressControlUnified); },
         [&](uint32_t v) { return lt(v, 1, 5) ? -FI_ENODATA : lt(v, 2, 0) ? -FI_EINVAL : 0; },
         [](uint32_t, fi_info* i) {
             EXPECT_EQ(static_cast<unsigned>(i->domain_attr->control_progress),
                       api::kProgressControlUnified);
         }},
        {"data_progress FI_PROGRESS_CONTROL_UNIFIED (a control value only)",
         [](fi_info* h) { set_raw(h->domain_attr->data_progress, api::kProgressControlUnified); },
         [&](uint32_t v) { return lt(v, 1, 5) ? -FI_ENODATA : -FI_EINVAL; }, nullptr},
        {"comp_order FI_ORDER_STRICT asked (deprecated, still accepted)",
         [](fi_info* h) {
             h->tx_attr->comp_order = api::kOrderStrict;
             h->rx_attr->comp_order = api::kOrderStrict | api::kOrderData;
         },
         [&](uint32_t v) { return lt(v, 1, 5) ? -FI_ENODATA : 0; }, nullptr},
    };
    const auto versions = every_api_version();
    ASSERT_EQ(versions.back(), api::kHeaders) << "the newest version is the headers'";
    for (const version_row& r : rows) {
        for (uint32_t v : versions) {
            SCOPED_TRACE(std::string(r.name) + " at API " + std::to_string(FI_MAJOR(v)) + "." +
                         std::to_string(FI_MINOR(v)));
            hints_ptr h;
            r.hint(h.h);
            infos out;
            const int want = r.want(v);
            ASSERT_EQ(run(h.h, out, {}, all(), v), want);
            if (want == 0) {
                ASSERT_FALSE(out.list().empty());
                if (r.check)
                    for (fi_info* i : out.list()) r.check(v, i);
            }
        }
    }
}

TEST(InfoFilter, DeclaresTheNewestApiOfItsHeaders) {
    EXPECT_EQ(evd::kFiVersion, FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION));
}

TEST(InfoFilter, OldApiUsesBasicRegistration) {
    hints_ptr h;
    h.h->mode = api::kModeLocalMr;
    h.h->domain_attr->mr_mode = api::kMrUnspec;
    infos out;
    ASSERT_EQ(run(h.h, out, {}, all(), FI_VERSION(1, 4)), 0);
    for (fi_info* i : out.list()) {
        EXPECT_EQ(i->domain_attr->mr_mode, api::kMrBasic);
        EXPECT_TRUE(i->mode & api::kModeLocalMr);
        EXPECT_EQ(i->fabric_attr->api_version, FI_VERSION(1, 4));
    }
    h.h->mode = 0;
    infos none;
    EXPECT_EQ(run(h.h, none, {}, all(), FI_VERSION(1, 4)), -FI_ENODATA);
    h.h->mode = api::kModeLocalMr;
    h.h->domain_attr->mr_mode = evd::kMrMode;  // 1.5 bits are meaningless before 1.5
    EXPECT_EQ(run(h.h, none, {}, all(), FI_VERSION(1, 4)), -FI_ENODATA);
}

// Stock fabtests' getinfo_mr_mode6: hints->mode = ~0 (so FI_LOCAL_MR is
// offered as a mode bit), no caps, every combination of the eight 1.5 mr_mode
// bits. Each answer must be -FI_ENODATA or infos whose mr_mode only has bits
// the combination offered.
TEST(InfoFilter, EveryMrModeCombinationAnswersASubsetOrNoData) {
    const int bits[] = {FI_MR_LOCAL,     FI_MR_RAW,      FI_MR_VIRT_ADDR,   FI_MR_ALLOCATED,
                        FI_MR_PROV_KEY,  FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT, FI_MR_ENDPOINT};
    const int evd_needs = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;  // LOCAL via mode
    int accepted = 0;
    for (unsigned combo = 0; combo < 256; ++combo) {
        int mr = 0;
        for (int b = 0; b < 8; ++b)
            if (combo & (1u << b)) mr |= bits[b];
        SCOPED_TRACE(testing::Message() << "mr_mode 0x" << std::hex << mr);
        hints_ptr h;
        h.h->mode = ~0ull;
        h.h->domain_attr->mr_mode = mr;
        infos out;
        int rc = run(h.h, out);
        if ((mr & evd_needs) != evd_needs) {
            EXPECT_EQ(rc, -FI_ENODATA);
            continue;
        }
        ASSERT_EQ(rc, 0);
        ++accepted;
        for (fi_info* i : out.list()) {
            EXPECT_EQ(i->domain_attr->mr_mode & ~mr, 0) << "bits not offered";
            EXPECT_EQ(i->domain_attr->mr_mode | FI_MR_LOCAL, evd::kMrMode);
            // FI_MR_LOCAL is required either as the mr_mode bit or as FI_LOCAL_MR.
            EXPECT_NE(!!(i->domain_attr->mr_mode & FI_MR_LOCAL), !!(i->mode & api::kModeLocalMr));
        }
    }
    EXPECT_EQ(accepted, 32);  // VIRT_ADDR|ALLOCATED|PROV_KEY with any of the other 5 bits
}

// The 17 combinations stock fabtests 1.17.0 caught before the fix: mr_mode 0
// and VIRT_ADDR|ALLOCATED|PROV_KEY plus any of RAW/MMU_NOTIFY/RMA_EVENT/
// ENDPOINT without FI_MR_LOCAL (FI_LOCAL_MR offered through mode).
TEST(InfoFilter, FormerlyFailingMrModeCombinations) {
    const int extra[] = {FI_MR_RAW, FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT, FI_MR_ENDPOINT};
    int n = 0;
    {
        hints_ptr h;
        h.h->mode = ~0ull;
        h.h->domain_attr->mr_mode = api::kMrUnspec;
        infos out;
        EXPECT_EQ(run(h.h, out), -FI_ENODATA);
        ++n;
    }
    for (unsigned combo = 0; combo < 16; ++combo) {
        int mr = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        for (int b = 0; b < 4; ++b)
            if (combo & (1u << b)) mr |= extra[b];
        SCOPED_TRACE(testing::Message() << "mr_mode 0x" << std::hex << mr);
        hints_ptr h;
        h.h->mode = ~0ull;
        h.h->domain_attr->mr_mode = mr;
        infos out;
        ASSERT_EQ(run(h.h, out), 0);
        for (fi_info* i : out.list()) {
            EXPECT_EQ(i->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
            EXPECT_TRUE(i->mode & api::kModeLocalMr);
        }
        ++n;
    }
    EXPECT_EQ(n, 17);
}

// fabtests getinfo_mr_mode1..5: FI_MR_BASIC is answered as such from any
// API; FI_MR_UNSPEC before 1.5 means BASIC or SCALABLE (evd: BASIC);
// FI_MR_SCALABLE is never possible.
TEST(InfoFilter, LegacyMrModesPerApiVersion) {
    for (uint32_t ver : {uint32_t{FI_VERSION(1, 0)}, uint32_t{FI_VERSION(1, 4)}, uint32_t{FI_VERSION(1, 5)}, kVer}) {
        SCOPED_TRACE(testing::Message() << "api " << FI_MAJOR(ver) << "." << FI_MINOR(ver));
        hints_ptr h;
        h.h->mode = ~0ull;
        h.h->caps = FI_MSG | FI_RMA;
        h.h->domain_attr->mr_mode = api::kMrBasic;
        infos basic;
        ASSERT_EQ(run(h.h, basic, {}, all(), ver), 0);
        for (fi_info* i : basic.list()) EXPECT_EQ(i->domain_attr->mr_mode, api::kMrBasic);
        h.h->domain_attr->mr_mode = api::kMrScalable;
        infos scalable;
        EXPECT_EQ(run(h.h, scalable, {}, all(), ver), -FI_ENODATA);
        h.h->domain_attr->mr_mode = api::kMrUnspec;
        infos unspec;
        if (FI_VERSION_LT(ver, FI_VERSION(1, 5))) {
            ASSERT_EQ(run(h.h, unspec, {}, all(), ver), 0);
            for (fi_info* i : unspec.list()) EXPECT_EQ(i->domain_attr->mr_mode, api::kMrBasic);
        } else {
            EXPECT_EQ(run(h.h, unspec, {}, all(), ver), -FI_ENODATA);
        }
    }
}

// ------------------------------------------------------------------ resolved addresses

TEST(InfoFilter, OwningDeviceOnly) {
    addr_query q;
    q.any_device = false;
    q.device = "ib0dev";
    infos out;
    ASSERT_EQ(run(nullptr, out, q), 0);
    EXPECT_EQ(out.domains(), (std::vector<std::string>{"ib0dev"}));
    q.device = "down0";
    infos none;
    EXPECT_EQ(run(nullptr, none, q), -FI_ENODATA);
}

TEST(InfoFilter, SourceAddressIsReturned) {
    addr_query q;
    q.any_device = false;
    q.device = "roce0";
    q.src = v4("192.0.2.1", 7471);
    infos out;
    ASSERT_EQ(run(nullptr, out, q), 0);
    auto l = out.list();
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0]->addr_format, FI_SOCKADDR_IN);
    ASSERT_EQ(l[0]->src_addrlen, sizeof(sockaddr_in));
    EXPECT_EQ(0, std::memcmp(l[0]->src_addr, &q.src.ss, sizeof(sockaddr_in)));
    EXPECT_EQ(l[0]->dest_addr, nullptr);

    hints_ptr h;
    h.h->addr_format = FI_SOCKADDR_IN6;  // a v4 source cannot satisfy a v6 request
    infos none;
    EXPECT_EQ(run(h.h, none, q), -FI_ENODATA);
}

TEST(InfoFilter, ServiceOnlyAppliesThePortToEveryAddress) {
    addr_query q;
    q.src = v6("::", 4242);
    q.src_port_only = true;
    hints_ptr h;
    h.h->addr_format = FI_SOCKADDR;
    infos out;
    ASSERT_EQ(run(h.h, out, q), 0);
    auto l = out.list();
    ASSERT_EQ(l.size(), 3u);
    EXPECT_EQ(ntohs(static_cast<sockaddr_in*>(l[0]->src_addr)->sin_port), 4242);
    EXPECT_EQ(ntohs(static_cast<sockaddr_in6*>(l[1]->src_addr)->sin6_port), 4242);
}

TEST(InfoFilter, DestinationSelectsTheFamilyAndIsReturned) {
    addr_query q;
    q.any_device = false;
    q.device = "roce0";
    q.dest = v6("2001:db8::2", 9);
    infos out;
    ASSERT_EQ(run(nullptr, out, q), 0);
    auto l = out.list();
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0]->addr_format, FI_SOCKADDR_IN6);
    ASSERT_EQ(l[0]->dest_addrlen, sizeof(sockaddr_in6));
    EXPECT_EQ(0, std::memcmp(l[0]->dest_addr, &q.dest.ss, sizeof(sockaddr_in6)));
}

TEST(InfoFilter, PassiveEndpointHandleIsCopied) {
    hints_ptr h;
    fid fake{};
    fake.fclass = FI_CLASS_PEP;
    h.h->handle = &fake;
    infos out;
    ASSERT_EQ(run(h.h, out), 0);
    for (fi_info* i : out.list()) EXPECT_EQ(i->handle, &fake);
    h.h->handle = nullptr;  // not ours to free
}

TEST(InfoFilter, StaticHintsFailBeforeAnyDevice) {
    hints_ptr h;
    h.h->ep_attr->type = FI_EP_RDM;
    EXPECT_EQ(evd::check_static_hints(kVer, h.h), -FI_ENODATA);
    h.h->ep_attr->type = FI_EP_MSG;
    EXPECT_EQ(evd::check_static_hints(kVer, h.h), 0);
    h.h->src_addr = calloc(1, 16);
    EXPECT_EQ(evd::check_static_hints(kVer, h.h), -FI_EINVAL);
    EXPECT_EQ(evd::check_static_hints(kVer, nullptr), 0);
}

TEST(InfoFilter, SockaddrAnyRejectsShortAndForeign) {
    sockaddr_any a;
    sockaddr_in s{};
    s.sin_family = AF_INET;
    EXPECT_TRUE(a.set(reinterpret_cast<sockaddr*>(&s), sizeof(s)));
    EXPECT_EQ(a.len, sizeof(s));
    EXPECT_FALSE(a.set(reinterpret_cast<sockaddr*>(&s), sizeof(s) - 1));
    EXPECT_EQ(a.len, 0u);
    EXPECT_FALSE(a.set(nullptr, 16));
    s.sin_family = AF_UNIX;
    EXPECT_FALSE(a.set(reinterpret_cast<sockaddr*>(&s), sizeof(s)));
}

}  // namespace
