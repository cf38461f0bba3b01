// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// What each libfabric API version means to evd, in one place.
//
// evd declares the newest API of the headers it is built with, so that the
// core hands it callers of every version up to that one, and answers each
// caller as its own version says (fi_getinfo's version reaches every object
// through fabric_attr->api_version).
//
// libfabric 2.0 deprecated some values that still mean something to callers
// of older versions (FI_MR_BASIC, the FI_LOCAL_MR mode bit, FI_ORDER_STRICT,
// ...): the 2.x headers turn every use of those macros into a warning. evd
// keeps their meaning for the callers that use them, spelled here as numbers
// (they are ABI: they cannot change); under pre-2.0 headers the static_asserts
// pin them to the macros.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstdint>

namespace evd::api {

// The newest API the headers know: evd's fi_provider::fi_version.
inline constexpr uint32_t kHeaders = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

inline constexpr int kMrUnspec = 0;                   // FI_MR_UNSPEC
inline constexpr int kMrBasic = 1 << 0;               // FI_MR_BASIC
inline constexpr int kMrScalable = 1 << 1;            // FI_MR_SCALABLE
inline constexpr uint64_t kModeLocalMr = 1ULL << 55;  // FI_LOCAL_MR (a mode bit)
inline constexpr uint64_t kBindRegMr = 1ULL << 59;    // FI_REG_MR (fi_domain_bind flag)
inline constexpr uint64_t kOrderStrict = 0x1FF;       // FI_ORDER_STRICT (comp_order)
inline constexpr uint64_t kOrderData = 1ULL << 16;    // FI_ORDER_DATA (comp_order)
// FI_PROGRESS_CONTROL_UNIFIED (2.0): a control_progress value only.
inline constexpr unsigned kProgressControlUnified = 3;

#if FI_MAJOR_VERSION < 2
static_assert(kMrUnspec == FI_MR_UNSPEC && kMrBasic == FI_MR_BASIC &&
              kMrScalable == FI_MR_SCALABLE);
static_assert(kModeLocalMr == FI_LOCAL_MR && kBindRegMr == FI_REG_MR);
static_assert(kOrderStrict == FI_ORDER_STRICT && kOrderData == FI_ORDER_DATA);
#else
static_assert(kProgressControlUnified == FI_PROGRESS_CONTROL_UNIFIED);
#endif

// The 1.5 rules: mr_mode is a bit set, err_data belongs to the caller when
// it gives err_data_size, fi_cq_err_entry has err_data_size.
constexpr bool has_1_5(uint32_t v) { return v == 0 || FI_VERSION_GE(v, FI_VERSION(1, 5)); }
// 2.0: the deprecated ordering bits are not reported, FI_PROGRESS_CONTROL_UNIFIED exists.
constexpr bool has_2_0(uint32_t v) { return v == 0 || FI_MAJOR(v) >= 2; }

}  // namespace evd::api
