// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Helpers shared by the EQ tests (eq_*.cpp, wait_poll.cpp): all go through
// the real libfabric API with evd loaded as a plugin.
#pragma once

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_evd.h>

#include <chrono>
#include <cstring>

#include "../common/common.h"

namespace evdtest {

inline struct fid_fabric* open_fabric_api(uint32_t api) {
    use_build_tree_provider();
    struct fi_fabric_attr attr {};
    attr.name = const_cast<char*>("evd");
    attr.prov_name = const_cast<char*>("evd");
    attr.api_version = api;
    struct fid_fabric* fab = nullptr;
    if (fi_fabric(&attr, &fab, nullptr) != 0) return nullptr;
    return fab;
}

// A fabric per test; EQs opened through it are closed at the end.
class EqTest : public ::testing::Test {
protected:
    struct fid_fabric* fab = nullptr;
    struct fid_eq* eqs[16] = {};
    int neqs = 0;

    void SetUp() override {
        fab = open_fabric();
        ASSERT_NE(fab, nullptr) << "evd fabric did not open (FI_PROVIDER_PATH?)";
    }
    void TearDown() override {
        for (int i = neqs - 1; i >= 0; i--) {
            if (eqs[i]) {
                EXPECT_EQ(fi_close(&eqs[i]->fid), 0);
            }
        }
        if (fab) {
            EXPECT_EQ(fi_close(&fab->fid), 0);
        }
    }
    struct fid_eq* open(size_t size = 0, enum fi_wait_obj w = FI_WAIT_NONE,
                        uint64_t flags = FI_WRITE, struct fid_wait* ws = nullptr,
                        void* ctx = nullptr) {
        struct fi_eq_attr a {};
        a.size = size;
        a.flags = flags;
        a.wait_obj = w;
        a.wait_set = ws;
        struct fid_eq* q = nullptr;
        int rc = fi_eq_open(fab, &a, &q, ctx);
        EXPECT_EQ(rc, 0) << fi_strerror(-rc);
        if (rc) return nullptr;
        eqs[neqs++] = q;
        return q;
    }
    // Closes one of the EQs opened with open() (so TearDown skips it).
    int close_eq(struct fid_eq* q) {
        for (int i = 0; i < neqs; i++)
            if (eqs[i] == q) eqs[i] = nullptr;
        return fi_close(&q->fid);
    }
    struct fi_evd_eq_ops* ext(struct fid_eq* q) {
        struct fi_evd_eq_ops* ops = nullptr;
        EXPECT_EQ(fi_open_ops(&q->fid, FI_EVD_EQ_OPS_V1, 0, reinterpret_cast<void**>(&ops),
                              nullptr),
                  0);
        return ops;
    }
};

// An fi_eq_entry whose fid is `src` (the per-source ordering key).
inline struct fi_eq_entry entry(const void* src, uint64_t data, void* ctx = nullptr) {
    struct fi_eq_entry e {};
    e.fid = reinterpret_cast<fid_t>(const_cast<void*>(src));
    e.context = ctx;
    e.data = data;
    return e;
}

inline ssize_t write_entry(struct fid_eq* q, uint32_t ev, const void* src, uint64_t data) {
    struct fi_eq_entry e = entry(src, data);
    return fi_eq_write(q, ev, &e, sizeof e, 0);
}

inline ssize_t write_error(struct fi_evd_eq_ops* ops, struct fid_eq* q, const void* src, int err,
                           uint64_t data, const void* err_data = nullptr, size_t n = 0) {
    struct fi_eq_err_entry e {};
    e.fid = reinterpret_cast<fid_t>(const_cast<void*>(src));
    e.err = err;
    e.data = data;
    e.prov_errno = FI_EVD_PERR(FI_EVD_PERR_USER, err);
    e.err_data = const_cast<void*>(err_data);
    e.err_data_size = n;
    return ops->write_err(q, &e, 0);
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace evdtest
