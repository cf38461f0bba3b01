// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The hints fi_getinfo refuses without looking at a device, as data.
//
// Each hint attribute evd bounds is one row of hint_rules(): where the field
// lives, how its value is compared (bits within a mask, a maximum, one of a
// few values, unset), the bound, the code of a refusal and why. One walker,
// check_hint_rules(), applies the rows and logs a refusal naming the
// attribute. What is not a comparison (the provider name list, addresses,
// implied caps, immediate data and FI_RX_CQ_DATA, mr_mode across API
// versions) stays logic in info.cpp, run between the steps below so that
// fi_getinfo checks hints in the order fi_getinfo(3) lists them.
//
// The table is listed in fi_evd(7) ("Hints evd refuses") and each row is
// exercised by test/unit/hint_rules.cpp.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace evd {

// The attribute structs of a struct fi_info a rule reads.
enum class hint_attr : uint8_t { info, domain, ep, tx, rx };

// One field: which struct, where in it, how wide (4 or 8 bytes), its name.
struct hint_field {
    hint_attr in;
    uint16_t offset;
    uint8_t size;
    const char* member;
};

// How the field is compared with hint_rule::limit / allowed.
enum class hint_cmp : uint8_t {
    subset,   // no bit outside limit
    at_most,  // value <= limit (a count, or the last value of an enum)
    one_of,   // value is one of allowed
    unset,    // 0 / NULL
};

// When the walker takes the row (static_check in info.cpp interleaves the
// logic checks between these steps).
enum class hint_step : uint8_t { endpoint, address, caps, cq_data, attributes };

// The endpoint types a row bounds (bits): hints asking FI_EP_DGRAM are held
// to the DGRAM rows, any other hints to the MSG rows.
inline constexpr uint8_t kRuleMsg = 1, kRuleDgram = 2, kRuleAny = kRuleMsg | kRuleDgram;
// The row type bit of hints h.
uint8_t hint_rule_type(const fi_info* h);

struct hint_rule {
    hint_step step;
    hint_field field;
    hint_cmp cmp;
    uint64_t limit = 0;                    // subset: mask; at_most: maximum
    std::span<const uint64_t> allowed {};  // one_of
    int tostr = -1;                        // fi_tostr type naming values/bits, -1: numbers
    int code = -FI_ENODATA;                // -FI_EINVAL: malformed; 0: noted at debug level only
    uint32_t api_from = 0;                 // applies to callers of API >= this (0: any)
    uint32_t api_before = 0;               // ... and < this (0: any)
    uint8_t types = kRuleAny;              // the endpoint types it bounds
    const char* reason = "";
};

// Every rule, in the order the walker applies them.
std::span<const hint_rule> hint_rules();

// "hints->tx_attr->rma_iov_limit"
std::string hint_name(const hint_field& f);
// The field in h, or nullptr when h lacks the struct that holds it.
const void* hint_field_ptr(const hint_field& f, const fi_info* h);
void* hint_field_ptr(const hint_field& f, fi_info* h);
// Does rule r concern a caller of API `version`?
bool hint_rule_applies(const hint_rule& r, uint32_t version);
// Does `value` satisfy r?
bool hint_rule_holds(const hint_rule& r, uint64_t value);

// The line logged when h breaks r, e.g. "hints->tx_attr->rma_iov_limit 4 > 1
// (an RDMA work request names one remote range)"; never throws.
void hint_refusal_text(const hint_rule& r, const fi_info* h, char* out, size_t n);

// Applies the rules of `step` to h; the first violated rule's code (after
// logging why: -FI_ENODATA at info level, -FI_EINVAL as a warning), else 0.
int check_hint_rules(uint32_t version, const fi_info* h, hint_step step);

}  // namespace evd
