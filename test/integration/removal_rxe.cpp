// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// `rdma link delete` of a device evd used, in the same process that keeps
// running: once the removal was reported on the EQ and the application closed
// every evd object on the device, evd must hold nothing of it (the kernel
// finishes the delete only when every user context is closed; rxe cannot
// disassociate them). The process then keeps working on the other device,
// fi_getinfo forgets the removed one and finds it again once re-created.
// The device is re-created in TearDown even when the test fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "../common/common.h"
#include "../common/held.h"
#include "rxe_util.h"

namespace {

std::string env(const char* name, const char* def) {
    const char* v = std::getenv(name);
    return v && *v ? v : def;
}

using rxetest::device_exists;

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}


fi_info* base_hints() {
    fi_info* h = fi_allocinfo();
    if (!h) return nullptr;
    h->fabric_attr->prov_name = strdup("evd");
    h->ep_attr->type = FI_EP_MSG;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    return h;
}

// Domain names fi_getinfo lists with no node (every device).
std::vector<std::string> listed_domains() {
    std::vector<std::string> out;
    fi_info* h = base_hints();
    fi_info* info = nullptr;
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info);
    fi_freeinfo(h);
    if (rc) return out;
    for (fi_info* i = info; i; i = i->next)
        if (i->domain_attr && i->domain_attr->name) out.push_back(i->domain_attr->name);
    fi_freeinfo(info);
    return out;
}

bool listed(const std::string& dev) {
    for (auto& n : listed_domains())
        if (n == dev) return true;
    return false;
}

// fi_info for a listener on `addr:port` (FI_SOURCE), i.e. on that address's device.
fi_info* source_info(const std::string& addr, const std::string& port) {
    fi_info* h = base_hints();
    if (!h) return nullptr;
    fi_info* info = nullptr;
    int rc = fi_getinfo(FI_VERSION(1, 17), addr.c_str(), port.c_str(), FI_SOURCE, h, &info);
    fi_freeinfo(h);
    return rc ? nullptr : info;
}

class RemovalRxe : public ::testing::Test {
protected:
    std::string dev0 = env("EVD_VM_DEV0", "rxe0");
    std::string dev1 = env("EVD_VM_DEV1", "rxe1");
    std::string net1 = env("EVD_VM_NETDEV1", "veth1");
    std::string addr1 = env("EVD_VM_ADDR1", "192.0.2.2");
    pid_t del_pid = -1;
    int del_status = -1;

    void SetUp() override {
        evdtest::use_build_tree_provider();
        if (!std::getenv("EVD_VM") || !device_exists(dev0) || !device_exists(dev1))
            GTEST_SKIP() << "needs " << dev0 << " and " << dev1 << " in the test VM";
    }

    // Starts `rdma link delete dev1` in a child process.
    bool start_delete() {
        del_pid = fork();
        if (del_pid < 0) return false;
        if (del_pid == 0) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            execlp("rdma", "rdma", "link", "delete", dev1.c_str(), static_cast<char*>(nullptr));
            _exit(127);
        }
        return true;
    }

    // Waits up to `secs` for the delete to exit; true if it did.
    bool reap_delete(double secs) {
        if (del_pid <= 0) return true;
        double end = now_s() + secs;
        for (;;) {
            pid_t r = waitpid(del_pid, &del_status, WNOHANG);
            if (r == del_pid) {
                del_pid = -1;
                return true;
            }
            if (r < 0 || now_s() > end) return false;
            usleep(50000);
        }
    }

    bool readd() { return rxetest::readd_device(dev1, net1, 30); }

    void TearDown() override {
        if (IsSkipped()) return;
        // Leave the VM as found: the delete may still be pending (a failure),
        // give it time, then put the device back if it is gone.
        if (del_pid > 0 && !reap_delete(30)) {
            ADD_FAILURE() << "rdma link delete still running in TearDown; " << dev1 << " cannot be re-created";
            kill(del_pid, SIGKILL);
            return;
        }
        if (!device_exists(dev1)) {
            EXPECT_TRUE(readd()) << "could not re-create " << dev1;
        }
    }
};

TEST_F(RemovalRxe, DeleteCompletesOnceEveryObjectIsClosed) {
    std::string port = std::to_string(20000 + getpid() % 20000);
    fi_info* info = source_info(addr1, port);
    ASSERT_NE(info, nullptr) << "fi_getinfo(" << addr1 << ")";
    ASSERT_STREQ(info->domain_attr->name, dev1.c_str());

    evdtest::held<fid_fabric> fab;
    evdtest::held<fid_eq> eq;  // before dom: dom is bound to it and closes first
    evdtest::held<fid_domain> dom;
    evdtest::held<fid_cq> cq;
    evdtest::held<fid_mr> mr;
    evdtest::held<fid_pep> pep;
    ASSERT_EQ(fi_fabric(info->fabric_attr, fab.out(), nullptr), 0);
    ASSERT_EQ(fi_domain(fab, info, dom.out(), nullptr), 0);
    fi_eq_attr ea{};
    ea.size = 64;
    ea.wait_obj = FI_WAIT_UNSPEC;
    ASSERT_EQ(fi_eq_open(fab, &ea, eq.out(), nullptr), 0);
    ASSERT_EQ(fi_domain_bind(dom, &eq->fid, 0), 0);
    fi_cq_attr ca{};
    ca.size = 16;
    ca.format = FI_CQ_FORMAT_CONTEXT;
    ASSERT_EQ(fi_cq_open(dom, &ca, cq.out(), nullptr), 0);
    static char buf[4096];
    ASSERT_EQ(fi_mr_reg(dom, buf, sizeof buf, FI_SEND | FI_RECV, 0, 0, 0, mr.out(), nullptr), 0);
    // A listener on the device: rxe reports the removal through rdma_cm
    // (DEVICE_REMOVAL on its id), not with IBV_EVENT_DEVICE_FATAL.
    ASSERT_EQ(fi_passive_ep(fab, info, pep.out(), nullptr), 0);
    ASSERT_EQ(fi_pep_bind(pep, &eq->fid, 0), 0);
    ASSERT_EQ(fi_listen(pep), 0);

    double t0 = now_s();
    ASSERT_TRUE(start_delete());
    // The removal arrives as an error record on the EQ (FI_ENODEV on the
    // listener, or a device-fatal record on the domain).
    bool removal = false;
    double seen = 0;
    while (!removal && now_s() - t0 < 30) {
        fi_eq_cm_entry ent{};
        uint32_t event = 0;
        ssize_t rc = fi_eq_sread(eq, &event, &ent, sizeof ent, 1000, 0);
        if (rc == -FI_EAGAIN) continue;
        if (rc == -FI_EAVAIL) {
            fi_eq_err_entry err{};
            ASSERT_GT(fi_eq_readerr(eq, &err, 0), 0);
            std::printf("# error record: err %d (%s) prov_errno %d fid %s\n", err.err,
                        fi_strerror(err.err), err.prov_errno,
                        err.fid == &pep->fid ? "pep" : err.fid == &dom->fid ? "domain" : "other");
            if (err.err == FI_ENODEV || err.err == FI_EIO || err.err == FI_ESHUTDOWN) {
                removal = true;
                seen = now_s() - t0;
            }
            continue;
        }
        ASSERT_GE(rc, 0) << fi_strerror(static_cast<int>(-rc));
        std::printf("# record: event %u\n", event);
    }
    ASSERT_TRUE(removal) << "no removal error on the EQ within 30 s";
    std::printf("# removal reported after %.2f s\n", seen);

    double tc = now_s();
    EXPECT_EQ(pep.close(), 0);
    EXPECT_EQ(mr.close(), 0);
    EXPECT_EQ(cq.close(), 0);
    EXPECT_EQ(dom.close(), 0);
    EXPECT_EQ(eq.close(), 0);
    EXPECT_EQ(fab.close(), 0);
    fi_freeinfo(info);

    ASSERT_TRUE(reap_delete(20)) << "rdma link delete did not complete within 20 s of closing every object";
    std::printf("# rdma link delete exited %.2f s after the last close (status %d)\n", now_s() - tc,
                del_status);
    EXPECT_TRUE(WIFEXITED(del_status) && WEXITSTATUS(del_status) == 0);
    EXPECT_FALSE(device_exists(dev1));

    // fi_getinfo no longer lists it; the other device still works.
    std::vector<std::string> names = listed_domains();
    std::string all;
    for (auto& n : names) all += n + " ";
    std::printf("# fi_getinfo after the delete: %s\n", all.c_str());
    EXPECT_FALSE(listed(dev1)) << all;
    EXPECT_TRUE(listed(dev0)) << all;
    {
        fi_info* h = base_hints();
        ASSERT_NE(h, nullptr);
        h->domain_attr->name = strdup(dev0.c_str());
        fi_info* i0 = nullptr;
        ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &i0), 0);
        fi_freeinfo(h);
        evdtest::held<fid_fabric> f0;
        evdtest::held<fid_domain> d0;
        evdtest::held<fid_cq> c0;
        ASSERT_EQ(fi_fabric(i0->fabric_attr, f0.out(), nullptr), 0);
        ASSERT_EQ(fi_domain(f0, i0, d0.out(), nullptr), 0);
        ASSERT_EQ(fi_cq_open(d0, &ca, c0.out(), nullptr), 0);
        EXPECT_EQ(c0.close(), 0);
        EXPECT_EQ(d0.close(), 0);
        EXPECT_EQ(f0.close(), 0);
        fi_freeinfo(i0);
    }
    // A domain on the removed device's name is refused.
    {
        fi_info* h = base_hints();
        ASSERT_NE(h, nullptr);
        h->domain_attr->name = strdup(dev1.c_str());
        fi_info* i1 = nullptr;
        EXPECT_NE(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &i1), 0);
        fi_freeinfo(i1);
        fi_freeinfo(h);
    }

    // Re-created, it is listed again and usable.
    double ta = now_s();
    ASSERT_TRUE(readd()) << "could not re-create " << dev1;
    std::printf("# %s re-created and ACTIVE in %.2f s\n", dev1.c_str(), now_s() - ta);
    EXPECT_TRUE(listed(dev1));
    fi_info* again = source_info(addr1, port);
    ASSERT_NE(again, nullptr);
    EXPECT_STREQ(again->domain_attr->name, dev1.c_str());
    evdtest::held<fid_fabric> f1;
    evdtest::held<fid_domain> d1;
    ASSERT_EQ(fi_fabric(again->fabric_attr, f1.out(), nullptr), 0);
    EXPECT_EQ(fi_domain(f1, again, d1.out(), nullptr), 0);
    if (d1) {
        EXPECT_EQ(d1.close(), 0);
    }
    EXPECT_EQ(f1.close(), 0);
    fi_freeinfo(again);
}

}  // namespace
