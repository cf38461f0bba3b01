// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fi_getinfo on real devices (Soft-RoCE in the test VM): every limit equals
// what rdma-core reports for the device, and node/service/FI_SOURCE/src_addr
// select the device that owns the address.
//
// Environment (test/vm sets it; defaults match test/vm/setup-rxe.sh):
//   EVD_VM_DEV0=rxe0 EVD_VM_ADDR0=192.0.2.1   EVD_VM_DEV1=rxe1 EVD_VM_ADDR1=192.0.2.2
#include <algorithm>
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../common/common.h"

namespace {

std::string env(const char* name, const char* def) {
    const char* v = std::getenv(name);
    return v && *v ? v : def;
}
std::string dev0() { return env("EVD_VM_DEV0", "rxe0"); }
std::string dev1() { return env("EVD_VM_DEV1", "rxe1"); }
std::string addr0() { return env("EVD_VM_ADDR0", "192.0.2.1"); }
std::string addr1() { return env("EVD_VM_ADDR1", "192.0.2.2"); }

bool have_device(const std::string& name) {
    std::string p = "/sys/class/infiniband/" + name;
    DIR* d = opendir(p.c_str());
    if (d) closedir(d);
    return d != nullptr;
}

#define NEED_RXE()                                                                        \
    do {                                                                                  \
        if (!have_device(dev0()) || !have_device(dev1()))                                 \
            GTEST_SKIP() << "needs " << dev0() << " and " << dev1() << " (run in the VM)"; \
    } while (0)

struct hints_ptr {
    fi_info* h = fi_allocinfo();
    hints_ptr() {
        h->fabric_attr->prov_name = strdup("evd");
        h->ep_attr->type = FI_EP_MSG;
        h->caps = FI_MSG | FI_RMA;
        h->mode = FI_RX_CQ_DATA;
        h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    }
    ~hints_ptr() { fi_freeinfo(h); }
};

struct infos {
    fi_info* head = nullptr;
    ~infos() { fi_freeinfo(head); }
    std::vector<fi_info*> list() const {
        std::vector<fi_info*> v;
        for (fi_info* i = head; i; i = i->next) v.push_back(i);
        return v;
    }
};

std::string ip_of(const void* a) {
    char buf[INET6_ADDRSTRLEN] = "?";
    auto* sa = static_cast<const sockaddr*>(a);
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &static_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &static_cast<const sockaddr_in6*>(a)->sin6_addr, buf, sizeof buf);
    return buf;
}
int port_of(const void* a) {
    auto* sa = static_cast<const sockaddr*>(a);
    if (sa->sa_family == AF_INET) return ntohs(static_cast<const sockaddr_in*>(a)->sin_port);
    if (sa->sa_family == AF_INET6) return ntohs(static_cast<const sockaddr_in6*>(a)->sin6_port);
    return -1;
}

// The device as rdma-core describes it, read here independently of evd.
struct truth {
    ibv_device_attr_ex attr{};
    ibv_port_attr port{};
    uint64_t subnet_prefix = 0;
    ibv_context* ctx = nullptr;
    ~truth() {
        if (ctx) ibv_close_device(ctx);
    }
};

bool read_truth(const std::string& name, truth& t) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) return false;
    for (int i = 0; i < n; ++i)
        if (name == ibv_get_device_name(list[i])) t.ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!t.ctx) return false;
    if (ibv_query_device_ex(t.ctx, nullptr, &t.attr)) return false;
    if (ibv_query_port(t.ctx, 1, &t.port)) return false;
    ibv_gid gid;
    if (ibv_query_gid(t.ctx, 1, 0, &gid)) return false;
    t.subnet_prefix = be64toh(gid.global.subnet_prefix);
    return true;
}

// Creates an RC QP asking for `inline_size` bytes of inline data.
bool qp_accepts_inline(ibv_context* ctx, uint32_t inline_size) {
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = pd ? ibv_create_cq(ctx, 2, nullptr, nullptr, 0) : nullptr;
    bool ok = false;
    if (cq) {
        ibv_qp_init_attr ia{};
        ia.send_cq = ia.recv_cq = cq;
        ia.qp_type = IBV_QPT_RC;
        ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        ia.cap.max_inline_data = inline_size;
        if (ibv_qp* qp = ibv_create_qp(pd, &ia)) {
            ok = true;
            ibv_destroy_qp(qp);
        }
        ibv_destroy_cq(cq);
    }
    if (pd) ibv_dealloc_pd(pd);
    return ok;
}

class GetinfoRxe : public ::testing::Test {
protected:
    void SetUp() override { evdtest::use_build_tree_provider(); }
};

TEST_F(GetinfoRxe, ListsBothDevicesWithDeviceLimits) {
    NEED_RXE();
    hints_ptr h;
    infos out;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h.h, &out.head), 0);
    std::map<std::string, int> seen;
    for (fi_info* i : out.list()) {
        std::string name = i->domain_attr->name;
        SCOPED_TRACE(name);
        seen[name]++;
        truth t;
        ASSERT_TRUE(read_truth(name, t));
        const ibv_device_attr& a = t.attr.orig_attr;
        EXPECT_STREQ(i->fabric_attr->prov_name, "evd");
        EXPECT_EQ(i->ep_attr->type, FI_EP_MSG);
        const bool iwarp = t.ctx->device->transport_type == IBV_TRANSPORT_IWARP;
        EXPECT_EQ(i->ep_attr->protocol,
                  iwarp ? (uint32_t)FI_PROTO_IWARP : (uint32_t)FI_PROTO_RDMA_CM_IB_RC);
        EXPECT_EQ(i->ep_attr->max_msg_size, t.port.max_msg_sz);
        // default depth when hints are silent (FI_EVD_TX_SIZE, 384), never above the device
        EXPECT_EQ(i->tx_attr->size, std::min<size_t>(384, (size_t)a.max_qp_wr));
        EXPECT_EQ(i->rx_attr->size, std::min<size_t>(384, (size_t)a.max_qp_wr));
        EXPECT_EQ(i->tx_attr->iov_limit, (size_t)a.max_sge);
        EXPECT_EQ(i->rx_attr->iov_limit, (size_t)a.max_sge);
        EXPECT_EQ(i->domain_attr->cq_cnt, (size_t)a.max_cq);
        EXPECT_EQ(i->domain_attr->ep_cnt, (size_t)a.max_qp);
        EXPECT_EQ(i->domain_attr->mr_cnt, (size_t)a.max_mr);
        EXPECT_EQ(i->domain_attr->max_ep_srx_ctx, (size_t)a.max_srq);
        EXPECT_EQ(i->domain_attr->mr_key_size, sizeof(uint32_t));
        EXPECT_EQ(i->domain_attr->cq_data_size, iwarp ? 0u : sizeof(uint32_t));  // fi_evd(7), IWARP
        char fabric[40];
        snprintf(fabric, sizeof fabric, "IB-0x%llx", (unsigned long long)t.subnet_prefix);
        EXPECT_STREQ(i->fabric_attr->name, iwarp ? "Ethernet-iWARP" : fabric);
        // inject_size is the largest inline size an RC QP accepts.
        EXPECT_GT(i->tx_attr->inject_size, 0u);
        EXPECT_TRUE(qp_accepts_inline(t.ctx, i->tx_attr->inject_size));
        EXPECT_FALSE(qp_accepts_inline(t.ctx, i->tx_attr->inject_size + 1));
        // The source address is one of the device's own.
        ASSERT_NE(i->src_addr, nullptr);
        if (i->addr_format == FI_SOCKADDR_IN) {
            EXPECT_EQ(ip_of(i->src_addr), name == dev0() ? addr0() : addr1());
        }
    }
    EXPECT_GE(seen[dev0()], 1);
    EXPECT_GE(seen[dev1()], 1);
}

TEST_F(GetinfoRxe, SourceNodeSelectsTheOwningDevice) {
    NEED_RXE();
    for (int k = 0; k < 2; ++k) {
        std::string addr = k ? addr1() : addr0(), dev = k ? dev1() : dev0();
        SCOPED_TRACE(addr);
        hints_ptr h;
        infos out;
        ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr.c_str(), "7471", FI_SOURCE, h.h, &out.head), 0);
        auto l = out.list();
        ASSERT_EQ(l.size(), 1u);
        EXPECT_EQ(std::string(l[0]->domain_attr->name), dev);
        EXPECT_EQ(l[0]->addr_format, FI_SOCKADDR_IN);
        ASSERT_NE(l[0]->src_addr, nullptr);
        EXPECT_EQ(ip_of(l[0]->src_addr), addr);
        EXPECT_EQ(port_of(l[0]->src_addr), 7471);
        EXPECT_EQ(l[0]->dest_addr, nullptr);
    }
}

TEST_F(GetinfoRxe, HintsSourceAddressSelectsTheOwningDevice) {
    NEED_RXE();
    hints_ptr h;
    auto* sin = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, addr1().c_str(), &sin->sin_addr);
    h.h->src_addr = sin;
    h.h->src_addrlen = sizeof(*sin);
    h.h->addr_format = FI_SOCKADDR_IN;
    infos out;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h.h, &out.head), 0);
    for (fi_info* i : out.list()) EXPECT_EQ(std::string(i->domain_attr->name), dev1());
}

TEST_F(GetinfoRxe, DestinationNodeResolvesTheRoute) {
    NEED_RXE();
    // From addr0 to addr1: the route leaves through dev0 (policy routing in the VM).
    hints_ptr h;
    auto* sin = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, addr0().c_str(), &sin->sin_addr);
    h.h->src_addr = sin;
    h.h->src_addrlen = sizeof(*sin);
    infos out;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr1().c_str(), "7471", 0, h.h, &out.head), 0);
    auto l = out.list();
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(std::string(l[0]->domain_attr->name), dev0());
    ASSERT_NE(l[0]->dest_addr, nullptr);
    EXPECT_EQ(ip_of(l[0]->dest_addr), addr1());
    EXPECT_EQ(port_of(l[0]->dest_addr), 7471);
    ASSERT_NE(l[0]->src_addr, nullptr);
    EXPECT_EQ(ip_of(l[0]->src_addr), addr0());

    // Without a source address the kernel picks one; whatever it picks, the
    // returned source belongs to the returned device.
    hints_ptr h2;
    infos out2;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0().c_str(), "7471", 0, h2.h, &out2.head), 0);
    auto l2 = out2.list();
    ASSERT_EQ(l2.size(), 1u);
    ASSERT_NE(l2[0]->src_addr, nullptr);
    std::string d = l2[0]->domain_attr->name;
    EXPECT_TRUE(d == dev0() || d == dev1()) << d;
    EXPECT_EQ(ip_of(l2[0]->src_addr), d == dev0() ? addr0() : addr1());
}

TEST_F(GetinfoRxe, ServiceAloneListensOnEveryDevice) {
    NEED_RXE();
    hints_ptr h;
    h.h->addr_format = FI_SOCKADDR_IN;
    infos out;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, "7472", FI_SOURCE, h.h, &out.head), 0);
    std::map<std::string, int> seen;
    for (fi_info* i : out.list()) {
        seen[i->domain_attr->name]++;
        ASSERT_NE(i->src_addr, nullptr);
        EXPECT_EQ(port_of(i->src_addr), 7472);
    }
    EXPECT_EQ(seen[dev0()], 1);
    EXPECT_EQ(seen[dev1()], 1);
}

TEST_F(GetinfoRxe, DomainNameHintSelectsOneDevice) {
    NEED_RXE();
    hints_ptr h;
    h.h->domain_attr->name = strdup(dev1().c_str());
    infos out;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h.h, &out.head), 0);
    for (fi_info* i : out.list()) EXPECT_EQ(std::string(i->domain_attr->name), dev1());
}

TEST_F(GetinfoRxe, AddressesOfNoDeviceAreNoData) {
    NEED_RXE();
    hints_ptr h;
    infos out;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "7471", FI_SOURCE, h.h, &out.head), -FI_ENODATA);
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), "203.0.113.9", "7471", FI_SOURCE, h.h, &out.head),
              -FI_ENODATA);
    EXPECT_EQ(out.head, nullptr);
}

TEST_F(GetinfoRxe, RepeatedCallsKeepNoFileDescriptors) {
    NEED_RXE();
    auto fds = [] {
        int n = 0;
        DIR* d = opendir("/proc/self/fd");
        while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
        closedir(d);
        return n;
    };
    hints_ptr h;
    {
        infos warm;
        ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0().c_str(), "7471", FI_SOURCE, h.h, &warm.head), 0);
    }
    int before = fds();
    for (int i = 0; i < 50; ++i) {
        infos a, b;
        ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h.h, &a.head), 0);
        ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr1().c_str(), "7471", FI_SOURCE, h.h, &b.head), 0);
    }
    EXPECT_EQ(fds(), before);
}

}  // namespace
