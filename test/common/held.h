// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// held<T>: the one owner a test gives a libfabric object it opens in its
// body (an MR, an endpoint, a CQ, ...). The object is closed when the
// owner goes out of scope, so a failed ASSERT_* that returns from the test
// leaves nothing open behind it: without it, the fixture's domain would
// then refuse to close (-FI_EBUSY) and the test after it would start from a
// leak. A test that checks what fi_close returns (0, -FI_EBUSY) calls
// close() itself; the destructor reports a close that fails as a test
// failure, never silently.
#pragma once

#include <rdma/fabric.h>

#include <gtest/gtest.h>

#include <utility>

namespace evdtest {

template <class T>
class held {
public:
    held() = default;
    explicit held(T* p) noexcept : p_(p) {}
    held(const held&) = delete;
    held& operator=(const held&) = delete;
    held(held&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    held& operator=(held&& o) noexcept {
        if (this != &o) {
            close_quietly_checked();
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    ~held() { close_quietly_checked(); }

    T* get() const noexcept { return p_; }
    operator T*() const noexcept { return p_; }  // fi_mr_desc(mr), fi_send(ep, ...)
    T* operator->() const noexcept { return p_; }

    // For the open call's out parameter: fi_mr_reg(dom, ..., mr.out(), ...).
    // Whatever was held is closed first.
    T** out() {
        close_quietly_checked();
        return &p_;
    }
    // Closes now and returns fi_close's result (0 when nothing is held). On
    // an error the object stays held (as fi_close leaves it open), and is
    // tried again at the end of the scope.
    int close() {
        if (!p_) return 0;
        int r = fi_close(&p_->fid);
        if (r == 0) p_ = nullptr;
        return r;
    }
    // Gives the object up without closing it (the test closes it itself).
    T* release() noexcept { return std::exchange(p_, nullptr); }

private:
    void close_quietly_checked() {
        if (!p_) return;
        int r = fi_close(&p_->fid);
        p_ = nullptr;
        EXPECT_EQ(r, 0) << "fi_close at the end of its owner's scope";
    }
    T* p_ = nullptr;
};

}  // namespace evdtest
