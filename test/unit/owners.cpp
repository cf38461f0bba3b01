// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The owners of owners.h: a deleter releases its handle once, and a release
// that fails is reported under the name of the call that failed.
#include <gtest/gtest.h>

#include <cerrno>

#include "owners.h"

struct owned_thing {};
static int g_calls = 0;
static int g_rc = 0;
// shaped like ibv_destroy_qp (an errno back) and rdma_destroy_id (-1, errno)
int release_owned_thing(owned_thing*) {
    ++g_calls;
    return g_rc;
}
int release_owned_thing_errno(owned_thing*) {
    ++g_calls;
    errno = EBUSY;
    return -1;
}

namespace {

template <auto Fn>
struct signature_of {  // the same shape as call_deleter's operator()
    template <class T>
    static const char* sig(T*) {
        return __PRETTY_FUNCTION__;
    }
};

TEST(Owners, ReleaseNameFromEitherCompilersSignature) {
    EXPECT_EQ(evd::release_fn_name("void evd::call_deleter<Fn>::operator()(T*) const [with T = "
                                   "ibv_qp; auto Fn = ibv_destroy_qp]"),
              "ibv_destroy_qp");
    EXPECT_EQ(evd::release_fn_name("void evd::call_deleter<&ibv_destroy_qp>::operator()(ibv_qp *) "
                                   "const [Fn = &ibv_destroy_qp, T = ibv_qp]"),
              "ibv_destroy_qp");
    EXPECT_EQ(evd::release_fn_name("no template arguments"), "no template arguments");
    // and this compiler's own
    EXPECT_EQ(evd::release_fn_name(
                  signature_of<release_owned_thing>::sig(static_cast<owned_thing*>(nullptr))),
              "release_owned_thing");
}

TEST(Owners, ReleasesOnceWhetherOrNotTheReleaseFails) {
    static owned_thing thing;  // never freed: a failed release leaks by design
    for (int rc : {0, EBUSY}) {
        g_calls = 0;
        g_rc = rc;
        { std::unique_ptr<owned_thing, evd::call_deleter<release_owned_thing>> p(&thing); }
        EXPECT_EQ(g_calls, 1) << "rc " << rc;
    }
    g_calls = 0;
    { std::unique_ptr<owned_thing, evd::call_deleter<release_owned_thing_errno>> p(&thing); }
    EXPECT_EQ(g_calls, 1);
    g_calls = 0;
    { std::unique_ptr<owned_thing, evd::call_deleter<release_owned_thing>> p; }  // empty
    EXPECT_EQ(g_calls, 0);
}

}  // namespace
