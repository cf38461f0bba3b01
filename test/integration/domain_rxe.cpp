// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fi_domain on real devices (Soft-RoCE in the test VM): open/close, parent
// and child reference counting, fi_domain_bind of an EQ, and 1000 open/close
// cycles that leave no file descriptor and no memory behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <rdma/fi_endpoint.h>

#include "../common/common.h"
#include "../common/held.h"

namespace {

std::string env(const char* name, const char* def) {
    const char* v = std::getenv(name);
    return v && *v ? v : def;
}

bool have_device(const std::string& name) {
    std::string p = "/sys/class/infiniband/" + name;
    DIR* d = opendir(p.c_str());
    if (d) closedir(d);
    return d != nullptr;
}

int open_fds() {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

long rss_kib() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
    return -1;
}

class DomainRxe : public ::testing::Test {
protected:
    fi_info* info = nullptr;
    fid_fabric* fab = nullptr;

    void SetUp() override {
        evdtest::use_build_tree_provider();
        std::string dev = env("EVD_VM_DEV0", "rxe0");
        if (!have_device(dev)) {
            GTEST_SKIP() << "needs " << dev << " (run in the VM)";
        }
        fi_info* h = fi_allocinfo();
        ASSERT_NE(h, nullptr);
        h->fabric_attr->prov_name = strdup("evd");
        h->domain_attr->name = strdup(dev.c_str());
        h->ep_attr->type = FI_EP_MSG;
        h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info);
        fi_freeinfo(h);
        ASSERT_EQ(rc, 0);
        ASSERT_EQ(fi_fabric(info->fabric_attr, &fab, nullptr), 0);
    }
    void TearDown() override {
        if (fab) {
            EXPECT_EQ(fi_close(&fab->fid), 0);
        }
        fi_freeinfo(info);
    }
    fid_domain* open_domain(void* ctx = nullptr) {
        fid_domain* d = nullptr;
        int rc = fi_domain(fab, info, &d, ctx);
        EXPECT_EQ(rc, 0) << fi_strerror(-rc);
        return d;
    }
    fid_eq* open_eq_or_skip_flag(bool* skip) {
        fi_eq_attr attr{};
        attr.size = 16;
        attr.wait_obj = FI_WAIT_UNSPEC;
        fid_eq* eq = nullptr;
        int rc = fi_eq_open(fab, &attr, &eq, nullptr);
        *skip = rc == -FI_ENOSYS;
        if (!*skip) {
            EXPECT_EQ(rc, 0);
        }
        return eq;
    }
};

TEST_F(DomainRxe, OpensAndCloses) {
    int ctx = 0;
    evdtest::held<fid_domain> d{open_domain(&ctx)};
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->fid.fclass, FI_CLASS_DOMAIN);
    EXPECT_EQ(d->fid.context, &ctx);
    EXPECT_NE(d->ops, nullptr);
    EXPECT_NE(d->mr, nullptr);
    EXPECT_EQ(d.close(), 0);
}

TEST_F(DomainRxe, EveryListedDeviceOpens) {
    fi_info* h = fi_allocinfo();
    h->fabric_attr->prov_name = strdup("evd");
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    fi_info* all = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &all), 0);
    fi_freeinfo(h);
    int n = 0;
    for (fi_info* i = all; i; i = i->next) {
        if (i->ep_attr->type != FI_EP_MSG) continue;  // ofi_rxm layered entries
        evdtest::held<fid_domain> d;
        ASSERT_EQ(fi_domain(fab, i, d.out(), nullptr), 0) << i->domain_attr->name;
        EXPECT_EQ(d.close(), 0);
        ++n;
    }
    fi_freeinfo(all);
    EXPECT_GE(n, 2);
}

TEST_F(DomainRxe, FabricIsBusyWhileADomainIsOpen) {
    evdtest::held<fid_domain> d{open_domain()};
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(fi_close(&fab->fid), -FI_EBUSY);
    evdtest::held<fid_domain> d2{open_domain()};  // a second domain on the same device
    ASSERT_NE(d2, nullptr);
    EXPECT_EQ(d.close(), 0);
    EXPECT_EQ(fi_close(&fab->fid), -FI_EBUSY);
    EXPECT_EQ(d2.close(), 0);
}

TEST_F(DomainRxe, DomainIsBusyWhileACqIsOpen) {
    evdtest::held<fid_domain> d{open_domain()};
    ASSERT_NE(d, nullptr);
    fi_cq_attr attr{};
    attr.size = 16;
    attr.format = FI_CQ_FORMAT_CONTEXT;
    evdtest::held<fid_cq> cq;
    int rc = fi_cq_open(d, &attr, cq.out(), nullptr);
    if (rc == -FI_ENOSYS) {
        EXPECT_EQ(d.close(), 0);
        GTEST_SKIP() << "fi_cq_open is not implemented in this build";
    }
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(d.close(), -FI_EBUSY);
    EXPECT_EQ(cq.close(), 0);
    EXPECT_EQ(d.close(), 0);
}

TEST_F(DomainRxe, UnsupportedObjectsSayNotImplemented) {
    evdtest::held<fid_domain> d{open_domain()};
    ASSERT_NE(d, nullptr);
    fi_av_attr av{};
    fid_av* a = nullptr;
    EXPECT_EQ(fi_av_open(d, &av, &a, nullptr), -FI_ENOSYS);
    fid_stx* stx = nullptr;
    EXPECT_EQ(fi_stx_context(d, nullptr, &stx, nullptr), -FI_ENOSYS);
    fid_ep* sep = nullptr;
    EXPECT_EQ(fi_scalable_ep(d, info, &sep, nullptr), -FI_ENOSYS);
    EXPECT_EQ(d.close(), 0);
}

TEST_F(DomainRxe, BindEq) {
    evdtest::held<fid_domain> d{open_domain()};
    ASSERT_NE(d, nullptr);
    bool skip = false;
    evdtest::held<fid_eq> eq{open_eq_or_skip_flag(&skip)};
    if (skip) {
        EXPECT_EQ(d.close(), 0);
        GTEST_SKIP() << "fi_eq_open is not implemented in this build";
    }
    ASSERT_NE(eq, nullptr);
    // Not an EQ, unknown flags: refused.
    EXPECT_EQ(fi_domain_bind(d, &fab->fid, 0), -FI_EINVAL);
    EXPECT_EQ(fi_domain_bind(d, &eq->fid, FI_SEND), -FI_EINVAL);
    ASSERT_EQ(fi_domain_bind(d, &eq->fid, 0), 0);
    EXPECT_EQ(fi_domain_bind(d, &eq->fid, 0), -FI_EINVAL);  // one EQ per domain
    EXPECT_EQ(eq.close(), -FI_EBUSY);                // bound
    // The EQ reads the device's async fd: reading finds nothing, blocks nothing.
    uint32_t ev = 0;
    fi_eq_entry e{};
    EXPECT_EQ(fi_eq_read(eq, &ev, &e, sizeof e, 0), -FI_EAGAIN);
    EXPECT_EQ(d.close(), 0);
    EXPECT_EQ(eq.close(), 0);
}

TEST_F(DomainRxe, TwoDomainsShareOneEq) {
    bool skip = false;
    evdtest::held<fid_eq> eq{open_eq_or_skip_flag(&skip)};
    if (skip) {
        GTEST_SKIP() << "fi_eq_open is not implemented in this build";
    }
    ASSERT_NE(eq, nullptr);
    evdtest::held<fid_domain> a{open_domain()};
    evdtest::held<fid_domain> b{open_domain()};
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(fi_domain_bind(a, &eq->fid, 0), 0);
    ASSERT_EQ(fi_domain_bind(b, &eq->fid, 0), 0);
    EXPECT_EQ(a.close(), 0);
    EXPECT_EQ(eq.close(), -FI_EBUSY);  // b still bound
    EXPECT_EQ(b.close(), 0);
    EXPECT_EQ(eq.close(), 0);
}

TEST_F(DomainRxe, ThousandOpenCloseCyclesLeakNothing) {
    bool skip = false;
    evdtest::held<fid_eq> eq{open_eq_or_skip_flag(&skip)};  // bind too when the EQ exists
    auto cycle = [&] {
        evdtest::held<fid_domain> d;
        ASSERT_EQ(fi_domain(fab, info, d.out(), nullptr), 0);
        if (eq) {
            ASSERT_EQ(fi_domain_bind(d, &eq->fid, 0), 0);
        }
        ASSERT_EQ(d.close(), 0);
    };
    for (int i = 0; i < 10; ++i) cycle();  // warm up caches and lazily opened state
    int fds = open_fds();
    size_t heap = mallinfo2().uordblks;
    long rss = rss_kib();
    for (int i = 0; i < 1000; ++i) {
        cycle();
        if (HasFatalFailure()) break;
    }
    EXPECT_EQ(open_fds(), fds);
    size_t heap_after = mallinfo2().uordblks;
    EXPECT_LT(heap_after > heap ? heap_after - heap : 0, 64u * 1024) << "heap grew";
    EXPECT_LT(rss_kib() - rss, 4096) << "RSS grew (KiB)";
    if (eq) {
        EXPECT_EQ(eq.close(), 0);
    }
}

// Several threads open, bind and close domains on the same device while
// others read the shared EQ (which drains the device's async fd): the device
// table, the per-device registry and the single async-fd reader are shared.
TEST_F(DomainRxe, ConcurrentOpenBindCloseAndEqReads) {
    bool skip = false;
    evdtest::held<fid_eq> eq{open_eq_or_skip_flag(&skip)};
    std::atomic<int> failures{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> readers;
    if (eq) {
        for (int r = 0; r < 2; ++r)
            readers.emplace_back([&] {
                uint32_t ev;
                fi_eq_entry e;
                while (!stop.load()) {
                    ssize_t n = fi_eq_read(eq, &ev, &e, sizeof e, 0);
                    if (n != -FI_EAGAIN) failures++;  // nothing is expected on this EQ
                }
            });
    }
    std::vector<std::thread> openers;
    for (int t = 0; t < 4; ++t)
        openers.emplace_back([&] {
            for (int i = 0; i < 50; ++i) {
                fid_domain* d = nullptr;
                if (fi_domain(fab, info, &d, nullptr) != 0) {
                    failures++;
                    continue;
                }
                if (eq && fi_domain_bind(d, &eq->fid, 0) != 0) failures++;
                if (fi_close(&d->fid) != 0) failures++;
            }
        });
    for (auto& t : openers) t.join();
    stop = true;
    for (auto& t : readers) t.join();
    EXPECT_EQ(failures.load(), 0);
    if (eq) {
        EXPECT_EQ(eq.close(), 0);
    }
}

}  // namespace
