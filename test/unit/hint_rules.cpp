// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The hint rules of fi_getinfo (prov/src/info/hint_rules.cpp), row by row: hints
// that break a row get that row's code from check_static_hints and from
// build_infos, hints at the row's limit are answered, and fi_evd(7) lists
// every row as the table says.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "api.h"
#include "../common/fake_devices.h"
#include "info/hint_rules.h"
#include "info/info.h"

namespace {

using evd::hint_cmp;
using evd::hint_rule;

// Hints every row accepts: fi_allocinfo() plus the registration modes evd
// needs and FI_RX_CQ_DATA (so cq_data_size may be asked for).
struct hints {
    fi_info* h = fi_allocinfo();
    hints() {
        h->domain_attr->mr_mode = evd::kMrMode;
        h->mode = FI_RX_CQ_DATA;
    }
    ~hints() { fi_freeinfo(h); }
};

// A caller's API version the row applies to (the newest 1.x the tests use,
// else the first version the row names).
uint32_t version_for(const hint_rule& r) {
    const uint32_t v = FI_VERSION(1, 17);
    return evd::hint_rule_applies(r, v) ? v : r.api_from;
}

void store(const hint_rule& r, fi_info* h, uint64_t v) {
    // a row of datagram endpoints only is tested with hints that ask for them
    if (r.types == evd::kRuleDgram) h->ep_attr->type = FI_EP_DGRAM;
    void* p = evd::hint_field_ptr(r.field, h);
    ASSERT_NE(p, nullptr);
    if (r.field.size == sizeof(uint32_t)) {
        const uint32_t v32 = static_cast<uint32_t>(v);
        std::memcpy(p, &v32, sizeof v32);
    } else {
        std::memcpy(p, &v, sizeof v);
    }
}

uint64_t field_max(const hint_rule& r) {
    return r.field.size == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;
}

// Values that break the row.
std::vector<uint64_t> breaking(const hint_rule& r) {
    std::vector<uint64_t> v;
    switch (r.cmp) {
    case hint_cmp::subset:
        for (int b = 0; b < 8 * r.field.size; ++b)
            if (!(r.limit & (1ull << b))) v.push_back(1ull << b);
        v.push_back(field_max(r) & ~r.limit);
        break;
    case hint_cmp::at_most: v = {r.limit + 1, field_max(r)}; break;
    case hint_cmp::one_of:
        for (uint64_t x = 0; v.size() < 3; ++x)
            if (std::find(r.allowed.begin(), r.allowed.end(), x) == r.allowed.end()) v.push_back(x);
        break;
    case hint_cmp::unset: v = {1, field_max(r)}; break;
    }
    return v;
}

// Values at the row's limit.
std::vector<uint64_t> at_limit(const hint_rule& r) {
    switch (r.cmp) {
    case hint_cmp::subset: return {r.limit, 0};
    case hint_cmp::at_most: return {r.limit, 0};
    case hint_cmp::one_of: return {r.allowed.begin(), r.allowed.end()};
    case hint_cmp::unset: return {0};
    }
    return {};
}

std::string row_name(const hint_rule& r) {
    std::string s = evd::hint_name(r.field);
    if (r.types == evd::kRuleMsg) s += " of FI_EP_MSG";
    if (r.types == evd::kRuleDgram) s += " of FI_EP_DGRAM";
    if (r.api_from) s += " from API " + std::to_string(FI_MAJOR(r.api_from)) + "." +
                         std::to_string(FI_MINOR(r.api_from));
    if (r.api_before) s += " before API " + std::to_string(FI_MAJOR(r.api_before)) + "." +
                           std::to_string(FI_MINOR(r.api_before));
    return s;
}

int answer(const fi_info* h, uint32_t ver) {
    fi_info* out = nullptr;
    int rc = evd::build_infos(evdtest::fake_devices(), ver, {}, h, &out);
    EXPECT_EQ(rc != 0, out == nullptr);
    fi_freeinfo(out);
    return rc;
}

class HintRule : public ::testing::TestWithParam<size_t> {
  protected:
    const hint_rule& row() const { return evd::hint_rules()[GetParam()]; }
};

TEST_P(HintRule, BreakingItGivesItsCode) {
    const hint_rule& r = row();
    const uint32_t ver = version_for(r);
    ASSERT_TRUE(evd::hint_rule_applies(r, ver));
    for (uint64_t v : breaking(r)) {
        SCOPED_TRACE(testing::Message() << row_name(r) << " = 0x" << std::hex << v);
        hints h;
        store(r, h.h, v);
        EXPECT_FALSE(evd::hint_rule_holds(r, v));
        EXPECT_EQ(evd::check_static_hints(ver, h.h), r.code);
        EXPECT_EQ(answer(h.h, ver), r.code);
        char line[640];
        evd::hint_refusal_text(r, h.h, line, sizeof line);
        EXPECT_EQ(std::string(line).rfind(evd::hint_name(r.field) + " ", 0), 0u) << line;
        EXPECT_NE(std::string(line).find(std::string("(") + r.reason + ")"), std::string::npos)
            << line;
        store(r, h.h, 0);  // auth_key: not a pointer fi_freeinfo may free
    }
}

TEST_P(HintRule, AtTheLimitIsAnswered) {
    const hint_rule& r = row();
    const uint32_t ver = version_for(r);
    for (uint64_t v : at_limit(r)) {
        SCOPED_TRACE(testing::Message() << row_name(r) << " = 0x" << std::hex << v);
        hints h;
        store(r, h.h, v);
        EXPECT_TRUE(evd::hint_rule_holds(r, v));
        EXPECT_EQ(evd::check_static_hints(ver, h.h), 0);
        EXPECT_EQ(answer(h.h, ver), 0);
    }
}

INSTANTIATE_TEST_SUITE_P(HintRules, HintRule,
                         ::testing::Range(size_t{0}, evd::hint_rules().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                             std::string s;
                             for (char c : row_name(evd::hint_rules()[i.param]).substr(7))
                                 s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                             return s;
                         });

TEST(HintRules, OneRowPerAttributeAndVersionRange) {
    std::set<std::tuple<std::string, uint32_t, uint32_t, uint8_t>> seen;
    for (const hint_rule& r : evd::hint_rules()) {
        EXPECT_TRUE(seen.emplace(evd::hint_name(r.field), r.api_from, r.api_before, r.types).second)
            << row_name(r) << " has two rows";
        EXPECT_NE(*r.reason, '\0') << row_name(r) << " gives no reason";
        EXPECT_TRUE(r.code == -FI_ENODATA || r.code == -FI_EINVAL || r.code == 0) << row_name(r);
    }
}

// A row bounded by API versions leaves the callers outside them alone.
TEST(HintRules, VersionBoundRowsSkipOtherVersions) {
    for (const hint_rule& r : evd::hint_rules()) {
        SCOPED_TRACE(row_name(r));
        if (r.api_from) {
            EXPECT_FALSE(evd::hint_rule_applies(r, r.api_from - 1));
        }
        if (r.api_before) {
            EXPECT_FALSE(evd::hint_rule_applies(r, r.api_before));
        }
    }
}

TEST(HintRules, RefusalNamesTheAttributeItsValueAndTheLimit) {
    for (const hint_rule& r : evd::hint_rules()) {
        if (evd::hint_name(r.field) != "hints->tx_attr->rma_iov_limit") continue;
        hints h;
        h.h->tx_attr->rma_iov_limit = 4;
        char line[640];
        evd::hint_refusal_text(r, h.h, line, sizeof line);
        EXPECT_STREQ(line, "hints->tx_attr->rma_iov_limit 4 > 1 (an RDMA work request names "
                           "one remote range)");
        return;
    }
    FAIL() << "no rma_iov_limit row";
}

TEST(HintRules, AbsentAttributeStructsAreNotChecked) {
    fi_info bare{};
    bare.caps = FI_MSG;
    EXPECT_EQ(evd::check_static_hints(FI_VERSION(1, 17), &bare), 0);
}

// ------------------------------------------------------------------ fi_evd(7)

std::string value_name(const hint_rule& r, uint64_t v) {
    if (r.tostr >= 0) {
        char buf[128] = "";
        const uint32_t v32 = static_cast<uint32_t>(v);
        const void* p = r.field.size == sizeof v32 ? static_cast<const void*>(&v32) : &v;
        fi_tostr_r(buf, sizeof buf, p, static_cast<fi_type>(r.tostr));
        if (*buf) return buf;
    }
    if (v == FI_SHARED_CONTEXT) return "FI_SHARED_CONTEXT";
    return std::to_string(v);
}

// The man page lines of one row: the attribute, what evd accepts, the code.
std::string man_row(const hint_rule& r) {
    std::string want;
    switch (r.cmp) {
    case hint_cmp::subset: want = "no other bits"; break;
    case hint_cmp::at_most: want = "at most " + std::to_string(r.limit); break;
    case hint_cmp::unset: want = "0"; break;
    case hint_cmp::one_of:
        want = "one of ";
        for (size_t i = 0; i < r.allowed.size(); ++i)
            want += (i ? ", " : "") + value_name(r, r.allowed[i]);
        break;
    }
    std::string s = ".TP\n.I " + row_name(r).substr(7) + "\n" + want + " (" + r.reason + "); ";
    if (r.code == -FI_ENODATA) s += "else \\-FI_ENODATA\n";
    else if (r.code == -FI_EINVAL) s += "else \\-FI_EINVAL\n";
    else s += "else only logged (debug level)\n";
    return s;
}

constexpr const char* kBegin =
    ".\\\" hint rules: begin (printed by test/unit/hint_rules.cpp from prov/src/info/hint_rules.cpp)\n";
constexpr const char* kEnd = ".\\\" hint rules: end\n";

// fi_evd(7) lists the rules exactly as the table has them. EVD_UPDATE_MAN=1
// rewrites the block in man/parts/getinfo.7 (then run man/assemble.sh).
TEST(HintRules, ManPageListsEveryRow) {
    const std::string path = std::string(EVD_SRCDIR) + "/man/parts/getinfo.7";
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << path << " missing";
    std::stringstream ss;
    ss << f.rdbuf();
    std::string page = ss.str();
    std::string want;
    for (const hint_rule& r : evd::hint_rules()) want += man_row(r);
    const size_t b = page.find(kBegin), e = page.find(kEnd);
    ASSERT_NE(b, std::string::npos) << "no hint rule block in " << path;
    ASSERT_NE(e, std::string::npos);
    const size_t from = b + std::strlen(kBegin);
    const std::string have = page.substr(from, e - from);
    if (have != want && std::getenv("EVD_UPDATE_MAN")) {
        page.replace(from, e - from, want);
        std::ofstream(path) << page;
        return;
    }
    EXPECT_EQ(have, want) << "fi_evd(7) differs from the hint rules: run this test with "
                             "EVD_UPDATE_MAN=1, then man/assemble.sh";
}

}  // namespace
