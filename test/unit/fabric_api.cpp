// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Provider entry, fi_getinfo, fabric and domain entry points through the real
// libfabric (the plugin is dlopened from the build tree). No RDMA device is
// needed; tests that need "no device" skip on a machine that has one.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>

#include "../common/common.h"
#include "../common/held.h"

namespace {

bool host_has_rdma_device() {
    DIR* d = opendir("/sys/class/infiniband");
    if (!d) return false;
    bool any = false;
    while (struct dirent* e = readdir(d))
        if (e->d_name[0] != '.') any = true;
    closedir(d);
    return any;
}

struct hints_ptr {
    fi_info* h = fi_allocinfo();
    explicit hints_ptr(const char* prov = "evd") {
        if (h && prov) h->fabric_attr->prov_name = strdup(prov);
        if (h) h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    }
    ~hints_ptr() { fi_freeinfo(h); }
};

// evd's provider version as libfabric lists it (FI_PROV_ATTR_ONLY lists
// every loaded provider, devices or not); 0 when evd is not loaded. A test
// that expects -FI_ENODATA from evd checks this first: an unloaded provider
// gives the same code.
uint32_t evd_listed_version() {
    fi_info* info = nullptr;
    if (fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, FI_PROV_ATTR_ONLY, nullptr, &info))
        return 0;
    uint32_t v = 0;
    for (fi_info* i = info; i; i = i->next)
        if (i->fabric_attr->prov_name && std::string(i->fabric_attr->prov_name) == "evd")
            v = i->fabric_attr->prov_version;
    fi_freeinfo(info);
    return v;
}

class FabricApi : public ::testing::Test {
protected:
    void SetUp() override { evdtest::use_build_tree_provider(); }
};

TEST_F(FabricApi, ProviderIsListed) {
    EXPECT_EQ(evd_listed_version(), FI_VERSION(0, 1))
        << "libfabric did not load libevd-fi.so from " EVD_PROVIDER_DIR;
}

TEST_F(FabricApi, GetinfoWithoutDeviceIsNoDataAndQuick) {
    if (host_has_rdma_device()) GTEST_SKIP() << "this host has an RDMA device";
    ASSERT_NE(evd_listed_version(), 0u) << "evd is not loaded: -FI_ENODATA would prove nothing";
    hints_ptr h;
    fi_info* info = reinterpret_cast<fi_info*>(0x1);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h.h, &info), -FI_ENODATA);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    EXPECT_EQ(info, nullptr);
    EXPECT_LT(ms.count(), 2000);
    // With a node and service too: nothing to resolve against, still no crash.
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), "192.0.2.1", "7471", FI_SOURCE, h.h, &info), -FI_ENODATA);
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "7471", 0, h.h, &info), -FI_ENODATA);
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, "7471", FI_SOURCE, h.h, &info), -FI_ENODATA);
}

TEST_F(FabricApi, BadHintsAreRefused) {
    // The core turns every provider error into -FI_ENODATA; the provider's
    // own codes are checked in info_filter.cpp. Here: no crash, no output.
    ASSERT_NE(evd_listed_version(), 0u) << "evd is not loaded: -FI_ENODATA would prove nothing";
    hints_ptr h;
    h.h->src_addr = calloc(1, 16);
    h.h->src_addrlen = 0;
    fi_info* info = nullptr;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h.h, &info), -FI_ENODATA);
    EXPECT_EQ(info, nullptr);
    hints_ptr rdm;
    rdm.h->ep_attr->type = FI_EP_DGRAM;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, rdm.h, &info), -FI_ENODATA);
    EXPECT_EQ(info, nullptr);
}

TEST_F(FabricApi, ParamsAreVisible) {
    hints_ptr h;
    fi_info* info = nullptr;
    (void)fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h.h, &info);  // loads the provider
    fi_freeinfo(info);
    fi_param* params = nullptr;
    int count = 0;
    ASSERT_EQ(fi_getparams(&params, &count), 0);
    std::set<std::string> names;
    for (int i = 0; i < count; ++i)
        if (params[i].name) names.insert(params[i].name);
    fi_freeparams(params);
    for (const char* want : {"FI_EVD_EQ_SIZE", "FI_EVD_EQ_MAX_WRITE", "FI_EVD_CM_TIMEOUT",
                             "FI_EVD_CQ_SIZE", "FI_EVD_INJECT_SIZE", "FI_EVD_TX_SIZE",
                             "FI_EVD_RX_SIZE", "FI_EVD_FAIL_FAST", "FI_EVD_FLUSH_TIMEOUT",
                             "FI_EVD_CONNECT_TIMEOUT", "FI_EVD_PROBE_TIMEOUT",
                             "FI_EVD_RESUME_TIMEOUT", "FI_EVD_RESUME_KEEPALIVE"})
        EXPECT_TRUE(names.count(want)) << want;
}

TEST_F(FabricApi, FabricOpensAndClosesWithoutDevice) {
    evdtest::held<fid_fabric> fab{evdtest::open_fabric()};
    ASSERT_NE(fab, nullptr);
    EXPECT_EQ(fab->fid.fclass, FI_CLASS_FABRIC);
    EXPECT_EQ(fab.close(), 0);
}

TEST_F(FabricApi, CoreRefusesNullFabricAttr) {
    // The core refuses fi_fabric(NULL) before any provider is asked; evd's
    // own check is FabricOpen.NullArgumentsAreInvalid (fabric_internal.cpp).
    evdtest::held<fid_fabric> fab;
    EXPECT_NE(fi_fabric(nullptr, fab.out(), nullptr), 0);
    EXPECT_EQ(fab, nullptr);
}

TEST_F(FabricApi, ManyFabricsOpenAndClose) {
    for (int i = 0; i < 200; ++i) {
        evdtest::held<fid_fabric> fab{evdtest::open_fabric()};
        ASSERT_NE(fab, nullptr) << i;
        ASSERT_EQ(fab.close(), 0) << i;
    }
}

TEST_F(FabricApi, DomainArgumentsAreChecked) {
    evdtest::held<fid_fabric> fab{evdtest::open_fabric()};
    ASSERT_NE(fab, nullptr);
    evdtest::held<fid_domain> dom;  // none of these opens may succeed
    // No info: -FI_EINVAL.
    EXPECT_EQ(fi_domain(fab, nullptr, dom.out(), nullptr), -FI_EINVAL);
    fi_info* info = fi_allocinfo();
    ASSERT_NE(info, nullptr);
    // No device name: -FI_EINVAL.
    EXPECT_EQ(fi_domain(fab, info, dom.out(), nullptr), -FI_EINVAL);
    // Not a MSG endpoint type: -FI_EINVAL.
    info->domain_attr->name = strdup("rxe0");
    info->ep_attr->type = FI_EP_RDM;
    EXPECT_EQ(fi_domain(fab, info, dom.out(), nullptr), -FI_EINVAL);
    // A device that does not exist: -FI_ENODEV.
    info->ep_attr->type = FI_EP_MSG;
    free(info->domain_attr->name);
    info->domain_attr->name = strdup("no_such_device_0");
    EXPECT_EQ(fi_domain(fab, info, dom.out(), nullptr), -FI_ENODEV);
    EXPECT_EQ(dom, nullptr);
    fi_freeinfo(info);
    // Failed opens left nothing behind: the fabric closes.
    EXPECT_EQ(fab.close(), 0);
}

TEST_F(FabricApi, FabricCloseIsBusyWhileAnEqIsOpen) {
    evdtest::held<fid_fabric> fab{evdtest::open_fabric()};
    ASSERT_NE(fab, nullptr);
    fi_eq_attr attr{};
    attr.size = 8;
    attr.wait_obj = FI_WAIT_NONE;
    evdtest::held<fid_eq> eq;
    int rc = fi_eq_open(fab, &attr, eq.out(), nullptr);
    if (rc == -FI_ENOSYS) {
        EXPECT_EQ(fab.close(), 0);
        GTEST_SKIP() << "fi_eq_open is not implemented in this build";
    }
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(fab.close(), -FI_EBUSY);
    EXPECT_EQ(eq.close(), 0);
    EXPECT_EQ(fab.close(), 0);
}

}  // namespace
