// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The terminal record of a resumable endpoint not joined again
// (resume/resume_err.h, rdma/fi_ext_evd.h): its prov_errno and err_data,
// and what fi_eq_strerror says of them.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>

#include "eq/eq.h"
#include "resume/resume_err.h"

namespace resume_err_test {

using evd::resume::failure_source;
using evd::resume::give_up;
using evd::resume::outage;

std::string text(int perr, const void* data) {
    char buf[512];
    const char* s = evd::eq_error_text(perr, data, buf, sizeof buf);
    return s ? s : "";
}

TEST(ResumeErr, TheRecordSaysResumptionWasTriedWhyItFailedAndWhatFailedFirst) {
    outage o;
    o.why = give_up::deadline;
    o.attempts = 7;
    o.ms = 30012;
    o.cause_source = failure_source::completion;
    o.cause_code = IBV_WC_RETRY_EXC_ERR;
    o.generation = 7;
    const struct fi_evd_resume_err e = evd::resume::resume_err_make(o);
    EXPECT_EQ(e.magic, FI_EVD_RESUME_ERR_MAGIC);
    EXPECT_EQ(e.version, FI_EVD_RESUME_ERR_VERSION);
    EXPECT_EQ(e.size, sizeof e);
    EXPECT_EQ(e.reason, static_cast<uint32_t>(FI_EVD_RESUME_DEADLINE));
    EXPECT_EQ(e.attempts, 7u);
    EXPECT_EQ(e.outage_ms, 30012u);
    EXPECT_EQ(e.cause_source, 1u);
    EXPECT_EQ(e.cause_code, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(e.refusal, 0u);
    const int perr = evd::resume::resume_prov_errno(o.why);
    EXPECT_EQ(FI_EVD_PERR_CLASS(perr), static_cast<unsigned>(FI_EVD_PERR_RESUME));
    EXPECT_EQ(FI_EVD_PERR_CODE(perr), FI_EVD_RESUME_DEADLINE);
    const std::string t = text(perr, &e);
    for (const char* want : {"could not be joined again", "within the resume deadline",
                             "30012 ms", "7 attempts", "IBV_WC_RETRY_EXC_ERR"})
        EXPECT_NE(t.find(want), std::string::npos) << want << " not in: " << t;
}

TEST(ResumeErr, ARefusalNamesThePeersReason) {
    outage o;
    o.why = give_up::refused;
    o.attempts = 1;
    o.refusal = FI_EVD_RESUME_REFUSED_UNKNOWN;  // the peer restarted: it knows no token
    o.cause_source = failure_source::async_event;
    o.cause_code = IBV_EVENT_PORT_ERR;
    const struct fi_evd_resume_err e = evd::resume::resume_err_make(o);
    const std::string t = text(evd::resume::resume_prov_errno(o.why), &e);
    for (const char* want : {"refused", "no connection has that token", "1 attempt;",
                             "IBV_EVENT_PORT_ERR"})
        EXPECT_NE(t.find(want), std::string::npos) << want << " not in: " << t;
    o.why = give_up::peer_gone;
    EXPECT_EQ(evd::resume::resume_err_make(o).refusal, 0u) << "only a refusal has one";
}

TEST(ResumeErr, WithoutItsRecordTheReasonAloneAndOtherClassesAreNotItsOwn) {
    const int perr = evd::resume::resume_prov_errno(give_up::verdict);
    std::string t = text(perr, nullptr);
    EXPECT_NE(t.find("neither repeated nor known done"), std::string::npos) << t;
    struct fi_evd_resume_err wrong {};
    wrong.magic = 0x12345678u;  // not this record's magic (nor the async record's, whose
                                // reader would take 128 bytes from this 40-byte one)
    t = text(perr, &wrong);
    EXPECT_EQ(t.find("attempt"), std::string::npos) << "not read as a resume record: " << t;
    // the right magic, but a size too small for the record: not read past it
    const uint32_t shortrec[2] = {FI_EVD_RESUME_ERR_MAGIC, FI_EVD_RESUME_ERR_VERSION | (8u << 16)};
    t = text(perr, shortrec);
    EXPECT_EQ(t.find("attempt"), std::string::npos) << t;
    char buf[64];
    EXPECT_EQ(evd::resume::resume_err_text(FI_EVD_PERR(FI_EVD_PERR_WC, IBV_WC_REM_ACCESS_ERR),
                                           nullptr, buf, sizeof buf),
              nullptr);
    EXPECT_EQ(evd::resume::resume_err_text(0, nullptr, buf, sizeof buf), nullptr);
    // a short buffer is cut, not overrun
    struct fi_evd_resume_err e = evd::resume::resume_err_make({});
    char small[16];
    ASSERT_NE(evd::resume::resume_err_text(evd::resume::resume_prov_errno(give_up::deadline), &e,
                                           small, sizeof small),
              nullptr);
    EXPECT_EQ(std::string(small).size(), sizeof small - 1);
}

}  // namespace resume_err_test
