// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The ibv_wc_status -> fi errno translation table (prov/src/cq/cq.cpp), the
// completion flags per opcode, the fi_mr access mapping, and the man page
// section that prints the table.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "cq/cq.h"
#include "mr/mr.h"

using namespace evd;

namespace {

// The fi errno names this table may use (for checking the man page).
const std::map<int, std::string> kErrName = {
    {0, "none"},
    {FI_ETRUNC, "FI_ETRUNC"},
    {FI_EIO, "FI_EIO"},
    {FI_EACCES, "FI_EACCES"},
    {FI_ECANCELED, "FI_ECANCELED"},
    {FI_EREMOTEIO, "FI_EREMOTEIO"},
    {FI_ETIMEDOUT, "FI_ETIMEDOUT"},
    {FI_ENORX, "FI_ENORX"},
    {FI_ECONNABORTED, "FI_ECONNABORTED"},
    {FI_EOTHER, "FI_EOTHER"},
};

}  // namespace

TEST(WcTable, OneRowPerStatusInEnumOrder) {
    ASSERT_EQ(wc_table_len, static_cast<size_t>(IBV_WC_TM_RNDV_INCOMPLETE) + 1);
    std::set<std::string> names;
    for (size_t i = 0; i < wc_table_len; ++i) {
        EXPECT_EQ(wc_table[i].status, static_cast<int>(i)) << wc_table[i].name;
        EXPECT_EQ(wc_lookup(static_cast<int>(i)), &wc_table[i]);
        ASSERT_NE(wc_table[i].name, nullptr);
        EXPECT_EQ(std::string(wc_table[i].name).rfind("IBV_WC_", 0), 0u) << wc_table[i].name;
        EXPECT_TRUE(names.insert(wc_table[i].name).second) << "duplicate " << wc_table[i].name;
        ASSERT_NE(wc_table[i].meaning, nullptr);
        EXPECT_GT(std::string(wc_table[i].meaning).size(), 10u);
    }
}

TEST(WcTable, KnownMappings) {
    struct {
        int status;
        int err;
        bool fatal;
        const char* name;
    } want[] = {
        {IBV_WC_SUCCESS, 0, false, "IBV_WC_SUCCESS"},
        {IBV_WC_LOC_LEN_ERR, FI_ETRUNC, true, "IBV_WC_LOC_LEN_ERR"},
        {IBV_WC_LOC_PROT_ERR, FI_EACCES, true, "IBV_WC_LOC_PROT_ERR"},
        {IBV_WC_WR_FLUSH_ERR, FI_ECANCELED, false, "IBV_WC_WR_FLUSH_ERR"},
        {IBV_WC_REM_ACCESS_ERR, FI_EACCES, true, "IBV_WC_REM_ACCESS_ERR"},
        {IBV_WC_REM_INV_REQ_ERR, FI_EREMOTEIO, true, "IBV_WC_REM_INV_REQ_ERR"},
        {IBV_WC_REM_OP_ERR, FI_EREMOTEIO, true, "IBV_WC_REM_OP_ERR"},
        {IBV_WC_RETRY_EXC_ERR, FI_ETIMEDOUT, true, "IBV_WC_RETRY_EXC_ERR"},
        {IBV_WC_RNR_RETRY_EXC_ERR, FI_ENORX, true, "IBV_WC_RNR_RETRY_EXC_ERR"},
        {IBV_WC_REM_ABORT_ERR, FI_ECONNABORTED, true, "IBV_WC_REM_ABORT_ERR"},
        {IBV_WC_FATAL_ERR, FI_EIO, true, "IBV_WC_FATAL_ERR"},
        {IBV_WC_GENERAL_ERR, FI_EOTHER, true, "IBV_WC_GENERAL_ERR"},
    };
    for (const auto& w : want) {
        const wc_row* r = wc_lookup(w.status);
        ASSERT_NE(r, nullptr) << w.name;
        EXPECT_STREQ(r->name, w.name);
        EXPECT_EQ(r->fi_errno, w.err) << w.name;
        EXPECT_EQ(r->qp_fatal, w.fatal) << w.name;
        EXPECT_EQ(wc_fi_errno(w.status), w.err) << w.name;
    }
}

TEST(WcTable, EveryErrorIsAnErrnoAndAllButFlushEndTheEndpoint) {
    for (size_t i = 1; i < wc_table_len; ++i) {
        const wc_row& r = wc_table[i];
        EXPECT_GT(r.fi_errno, 0) << r.name;
        EXPECT_TRUE(kErrName.count(r.fi_errno)) << r.name << " uses an errno the test does not know";
        EXPECT_NE(std::string(fi_strerror(r.fi_errno)), "") << r.name;
        EXPECT_EQ(r.qp_fatal, r.status != IBV_WC_WR_FLUSH_ERR) << r.name;
        // the status text rdma-core gives exists for every row
        EXPECT_NE(ibv_wc_status_str(static_cast<enum ibv_wc_status>(r.status)), nullptr);
    }
}

TEST(WcTable, UnknownStatus) {
    EXPECT_EQ(wc_lookup(-1), nullptr);
    EXPECT_EQ(wc_lookup(1000), nullptr);
    EXPECT_EQ(wc_fi_errno(1000), FI_EOTHER);
}

TEST(WcTable, CompletionFlagsPerOpcode) {
    struct ibv_wc wc {};
    wc.opcode = IBV_WC_SEND;
    EXPECT_EQ(wc_flags(wc), FI_SEND | FI_MSG);
    wc.opcode = IBV_WC_RDMA_WRITE;
    EXPECT_EQ(wc_flags(wc), FI_RMA | FI_WRITE);
    wc.opcode = IBV_WC_RDMA_READ;
    EXPECT_EQ(wc_flags(wc), FI_RMA | FI_READ);
    wc.opcode = IBV_WC_RECV;
    EXPECT_EQ(wc_flags(wc), FI_RECV | FI_MSG);
    wc.wc_flags = IBV_WC_WITH_IMM;
    EXPECT_EQ(wc_flags(wc), FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    EXPECT_EQ(wc_flags(wc), FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
    wc.opcode = IBV_WC_COMP_SWAP;
    EXPECT_EQ(wc_flags(wc), FI_ATOMIC);
    wc.opcode = IBV_WC_FETCH_ADD;
    EXPECT_EQ(wc_flags(wc), FI_ATOMIC);
    wc.opcode = IBV_WC_BIND_MW;  // evd posts none
    EXPECT_EQ(wc_flags(wc), 0u);
}

TEST(WcTable, SuppressedWrIdIsPrivate) {
    int user_ctx;
    EXPECT_NE(wr_id_suppressed(), 0u);
    EXPECT_NE(wr_id_suppressed(), reinterpret_cast<uintptr_t>(&user_ctx));
    EXPECT_EQ(wr_id_suppressed(), wr_id_suppressed());
}

TEST(WcTableMr, AccessMapping) {
    EXPECT_EQ(mr_ibv_access(FI_SEND), 0);
    EXPECT_EQ(mr_ibv_access(FI_WRITE), 0);
    EXPECT_EQ(mr_ibv_access(FI_SEND | FI_WRITE), 0);
    EXPECT_EQ(mr_ibv_access(FI_RECV), IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(mr_ibv_access(FI_READ), IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(mr_ibv_access(FI_REMOTE_READ), IBV_ACCESS_REMOTE_READ);
    EXPECT_EQ(mr_ibv_access(FI_REMOTE_WRITE), IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(mr_ibv_access(FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE),
              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(mr_ibv_access(0), IBV_ACCESS_LOCAL_WRITE);
}

// Remote atomics are granted with FI_REMOTE_WRITE, and only on a device that
// has atomics (atomic_table.h).
TEST(WcTableMr, RemoteWriteGrantsAtomicsOnAtomicDevices) {
    EXPECT_EQ(mr_ibv_access(FI_REMOTE_WRITE, false, true),
              IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
    EXPECT_EQ(mr_ibv_access(FI_REMOTE_WRITE, false, false),
              IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(mr_ibv_access(FI_REMOTE_READ, false, true), IBV_ACCESS_REMOTE_READ);
    EXPECT_EQ(mr_ibv_access(FI_READ | FI_WRITE | FI_SEND | FI_RECV, false, true),
              IBV_ACCESS_LOCAL_WRITE);
}

// On iWARP the sink of an RDMA READ is written by the peer's read response.
TEST(WcTableMr, IwarpReadSinkAllowsRemoteWrites) {
    EXPECT_EQ(mr_ibv_access(FI_READ, true), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    EXPECT_EQ(mr_ibv_access(FI_READ | FI_WRITE, true),
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    // nothing else changes
    for (uint64_t a : {uint64_t{FI_SEND}, uint64_t{FI_RECV}, uint64_t{FI_WRITE}, uint64_t{FI_REMOTE_READ},
                       uint64_t{FI_REMOTE_WRITE}, uint64_t{0}})
        EXPECT_EQ(mr_ibv_access(a, true), mr_ibv_access(a, false)) << a;
}

#ifdef EVD_SRCDIR
// fi_evd(7) prints the table: every status, on one line with the errno it maps to.
TEST(WcTable, ManPagePrintsEveryRow) {
    std::ifstream in(std::string(EVD_SRCDIR) + "/man/parts/datapath.7");
    ASSERT_TRUE(in.good()) << "man/parts/datapath.7 not found under " << EVD_SRCDIR;
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (size_t i = 0; i < wc_table_len; ++i) {
        const wc_row& r = wc_table[i];
        bool found = false;
        for (const auto& l : lines) {
            // ".B IBV_WC_X \(-> FI_EY" (the name followed by a space: no prefix matches)
            if (l.find(std::string(r.name) + " ") == std::string::npos) continue;
            found = true;
            EXPECT_NE(l.find(kErrName.at(r.fi_errno)), std::string::npos)
                << r.name << " is printed without " << kErrName.at(r.fi_errno) << ": " << l;
            EXPECT_EQ(l.find("terminal") != std::string::npos, r.qp_fatal && r.fi_errno != 0)
                << r.name << ": " << l;
        }
        EXPECT_TRUE(found) << r.name << " missing from man/parts/datapath.7";
    }
}
#else
#error "EVD_SRCDIR must be defined for the man page check (Makefile.am)"
#endif
