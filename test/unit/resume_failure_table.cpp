// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Which failures a resumable connection rides through
// (resume/failure_table.h): the rows against the rule, against the tables
// that end an endpoint today (cq/wc_table.cpp, device/async_table.cpp), and
// against fi_evd(7), which prints them.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cq/cq.h"
#include "device/async.h"
#include "resume/failure_table.h"

namespace resume_failure_table_test {

using evd::resume::failure_lookup;
using evd::resume::failure_row;
using evd::resume::failure_source;
using evd::resume::failure_table;
using evd::resume::failure_table_len;
using evd::resume::failure_verdict;
using evd::resume::failure_verdict_of;

// The policy, written out once more: what a resumable connection is to
// ride through, and what it ignores (its QP goes on). Changing a row means
// changing these lists, on purpose.
const std::set<std::pair<failure_source, int>> kTransient = {
    {failure_source::completion, IBV_WC_RETRY_EXC_ERR},
    {failure_source::completion, IBV_WC_RESP_TIMEOUT_ERR},
    {failure_source::completion, IBV_WC_WR_FLUSH_ERR},
};
const std::set<std::pair<failure_source, int>> kIgnored = {
    {failure_source::async_event, IBV_EVENT_PORT_ERR},
    {failure_source::async_event, IBV_EVENT_GID_CHANGE},
    {failure_source::async_event, IBV_EVENT_LID_CHANGE},
    {failure_source::async_event, IBV_EVENT_PKEY_CHANGE},
    {failure_source::async_event, IBV_EVENT_SM_CHANGE},
    {failure_source::async_event, IBV_EVENT_CLIENT_REREGISTER},
    {failure_source::async_event, IBV_EVENT_PATH_MIG_ERR},
    {failure_source::cm_event, RDMA_CM_EVENT_ADDR_CHANGE},
};

TEST(ResumeFailureTable, EveryRowIsOnceAndAsThePolicySays) {
    std::set<std::pair<failure_source, int>> seen;
    for (size_t i = 0; i < failure_table_len; ++i) {
        const failure_row& r = failure_table[i];
        EXPECT_TRUE(seen.insert({r.source, r.code}).second) << r.name << " twice";
        EXPECT_EQ(failure_lookup(r.source, r.code), &r);
        const failure_verdict want = kTransient.count({r.source, r.code}) ? failure_verdict::transient
                                     : kIgnored.count({r.source, r.code}) ? failure_verdict::ignored
                                                                          : failure_verdict::ends;
        EXPECT_EQ(r.verdict, want) << r.name;
        EXPECT_EQ(failure_verdict_of(r.source, r.code), r.verdict) << r.name;
        ASSERT_NE(r.why, nullptr);
        EXPECT_GT(std::string(r.why).size(), 10u) << r.name;
    }
    for (const auto& k : kTransient) EXPECT_TRUE(seen.count(k)) << "a transient row is missing";
    for (const auto& k : kIgnored) EXPECT_TRUE(seen.count(k)) << "an ignored row is missing";
    // an error completion the table does not know ends; an event it does
    // not know is no failure (PORT_ACTIVE, COMM_EST, TIMEWAIT_EXIT...)
    EXPECT_EQ(failure_verdict_of(failure_source::completion, 12345), failure_verdict::ends);
    EXPECT_EQ(failure_verdict_of(failure_source::async_event, IBV_EVENT_PORT_ACTIVE),
              failure_verdict::ignored);
    EXPECT_EQ(failure_verdict_of(failure_source::cm_event, RDMA_CM_EVENT_TIMEWAIT_EXIT),
              failure_verdict::ignored);
    EXPECT_EQ(failure_lookup(failure_source::cm_event, RDMA_CM_EVENT_ESTABLISHED), nullptr);
}

// Every completion status that ends an endpoint today (wc_table's qp_fatal)
// has a row, but those RC queue pairs and evd never produce.
TEST(ResumeFailureTable, EveryCompletionThatEndsAnEndpointHasARow) {
    const std::set<int> never = {IBV_WC_LOC_EEC_OP_ERR, IBV_WC_LOC_RDD_VIOL_ERR,
                                 IBV_WC_INV_EECN_ERR,   IBV_WC_INV_EEC_STATE_ERR,
                                 IBV_WC_TM_ERR,         IBV_WC_TM_RNDV_INCOMPLETE};
    for (size_t i = 0; i < evd::wc_table_len; ++i) {
        const evd::wc_row& w = evd::wc_table[i];
        if (!w.qp_fatal || never.count(w.status)) continue;
        const failure_row* r = failure_lookup(failure_source::completion, w.status);
        ASSERT_NE(r, nullptr) << w.name << " ends an endpoint and has no row";
        EXPECT_STREQ(r->name, w.name);
    }
    EXPECT_NE(failure_lookup(failure_source::completion, IBV_WC_WR_FLUSH_ERR), nullptr);
}

// So does every async event that ends an endpoint or its port's; and only
// an event that ends an endpoint today may end a resumable one.
TEST(ResumeFailureTable, EveryAsyncEventThatEndsAnEndpointHasARow) {
    for (int t : {IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR,
                  IBV_EVENT_PORT_ERR, IBV_EVENT_DEVICE_FATAL, IBV_EVENT_CQ_ERR}) {
        const failure_row* r = failure_lookup(failure_source::async_event, t);
        ASSERT_NE(r, nullptr) << ibv_event_type_str(static_cast<enum ibv_event_type>(t));
        EXPECT_STREQ(r->name, evd::async_row_for(t)->name);
    }
    // a completion row that does not end or flush is none: transient rows
    // are QP failures (wc_table's qp_fatal, or the flush behind one)
    for (size_t i = 0; i < failure_table_len; ++i) {
        const failure_row& r = failure_table[i];
        if (r.source != failure_source::completion) continue;
        const evd::wc_row* w = evd::wc_lookup(r.code);
        ASSERT_NE(w, nullptr) << r.name;
        EXPECT_TRUE(w->qp_fatal || r.code == IBV_WC_WR_FLUSH_ERR) << r.name;
    }
}

#ifdef EVD_SRCDIR
// fi_evd(7) prints the table: every row, on one line saying what happens.
TEST(ResumeFailureTable, ManPagePrintsEveryRow) {
    std::ifstream in(std::string(EVD_SRCDIR) + "/man/parts/resume.7");
    ASSERT_TRUE(in.good()) << "man/parts/resume.7 not found under " << EVD_SRCDIR;
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (size_t i = 0; i < failure_table_len; ++i) {
        const failure_row& r = failure_table[i];
        bool found = false;
        for (const auto& l : lines) {
            if (l.rfind(".B " + std::string(r.name) + " ", 0) != 0) continue;
            found = true;
            const char* want = evd::resume::failure_verdict_name(r.verdict);
            EXPECT_NE(l.find(want), std::string::npos) << r.name << ": " << l;
        }
        EXPECT_TRUE(found) << r.name << " missing from man/parts/resume.7";
    }
}
#else
#error "EVD_SRCDIR must be defined for the man page check (Makefile.am)"
#endif

}  // namespace resume_failure_table_test
