// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The rdma_cm event -> EQ record table and evd's private-data header,
// exercised with synthetic rdma_cm_event structs through the same
// translation code the event channel uses.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cm/cm.h"
#include "eq/eq.h"
#include "fabric.h"

using namespace evd;

namespace {

struct rdma_cm_event make_event(enum rdma_cm_event_type type, int status, const void* pd,
                                uint8_t pd_len) {
    struct rdma_cm_event ev;
    std::memset(&ev, 0, sizeof(ev));
    ev.event = type;
    ev.status = status;
    ev.param.conn.private_data = pd;
    ev.param.conn.private_data_len = pd_len;
    return ev;
}

// What IB CM delivers: header + data, zero-padded to the message's space.
std::vector<uint8_t> wire(const std::vector<uint8_t>& user, size_t space) {
    std::vector<uint8_t> buf(space, 0);
    int n = cm_pack(buf.data(), buf.size(), user.data(), user.size());
    EXPECT_EQ(n, static_cast<int>(kCmHdrLen + user.size()));
    return buf;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i++) v[i] = static_cast<uint8_t>(seed + 7 * i);
    return v;
}

bool is_terminal_outcome(cm_outcome o) {
    return o == cm_outcome::shutdown || o == cm_outcome::error || o == cm_outcome::removal;
}

}  // namespace

TEST(CmTable, OneRowPerEventInEnumOrderNamedLikeRdmaCm) {
    size_t n = 0;
    const cm_row* rows = cm_table(&n);
    ASSERT_EQ(n, static_cast<size_t>(RDMA_CM_EVENT_TIMEWAIT_EXIT) + 1);
    std::set<std::string> names;
    for (size_t i = 0; i < n; i++) {
        EXPECT_EQ(static_cast<size_t>(rows[i].event), i);
        EXPECT_STREQ(rows[i].name, rdma_event_str(rows[i].event)) << "row " << i;
        EXPECT_TRUE(names.insert(rows[i].name).second) << rows[i].name;
        ASSERT_NE(rows[i].doc, nullptr);
        EXPECT_GT(std::strlen(rows[i].doc), 10u) << rows[i].name;
        EXPECT_EQ(&cm_row_for(rows[i].event), &rows[i]);
    }
}

TEST(CmTable, OutcomesAreConsistent) {
    size_t n = 0;
    const cm_row* rows = cm_table(&n);
    for (size_t i = 0; i < n; i++) {
        const cm_row& r = rows[i];
        SCOPED_TRACE(r.name);
        EXPECT_EQ(r.terminal, is_terminal_outcome(r.outcome));
        switch (r.outcome) {
            case cm_outcome::connreq: EXPECT_EQ(r.fi_event, static_cast<uint32_t>(FI_CONNREQ)); break;
            case cm_outcome::connected: EXPECT_EQ(r.fi_event, static_cast<uint32_t>(FI_CONNECTED)); break;
            case cm_outcome::shutdown: EXPECT_EQ(r.fi_event, static_cast<uint32_t>(FI_SHUTDOWN)); break;
            case cm_outcome::error:
            case cm_outcome::removal:
                EXPECT_EQ(r.fi_event, 0u);
                EXPECT_GT(r.fi_err, 0);
                break;
            default:
                EXPECT_EQ(r.fi_event, 0u);
                EXPECT_EQ(r.fi_err, 0);
        }
    }
}

TEST(CmTable, ConnectionFailuresAreDistinctErrors) {
    // A user can act on each: not everything is ETIMEDOUT.
    std::set<int> errs;
    for (auto ev : {RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_UNREACHABLE,
                    RDMA_CM_EVENT_CONNECT_ERROR, RDMA_CM_EVENT_REJECTED,
                    RDMA_CM_EVENT_DEVICE_REMOVAL}) {
        const cm_row& r = cm_row_for(ev);
        EXPECT_TRUE(r.terminal) << r.name;
        EXPECT_TRUE(errs.insert(r.fi_err).second) << r.name << " shares its error";
    }
    EXPECT_EQ(cm_row_for(RDMA_CM_EVENT_REJECTED).fi_err, FI_ECONNREFUSED);
    EXPECT_EQ(cm_row_for(RDMA_CM_EVENT_DEVICE_REMOVAL).fi_err, FI_ENODEV);
    EXPECT_EQ(cm_row_for(RDMA_CM_EVENT_DISCONNECTED).outcome, cm_outcome::shutdown);
    EXPECT_EQ(cm_row_for(RDMA_CM_EVENT_ADDR_RESOLVED).outcome, cm_outcome::resolve_route);
    EXPECT_EQ(cm_row_for(RDMA_CM_EVENT_ROUTE_RESOLVED).outcome, cm_outcome::send_connect);
}

TEST(CmTable, UnknownEventIsInternalAndLogged) {
    const cm_row& r = cm_row_for(1000);
    EXPECT_EQ(r.outcome, cm_outcome::internal);
    EXPECT_FALSE(r.terminal);
    // A type newer than rdma_cma.h, stored without forming an invalid enum value.
    auto ev = make_event(RDMA_CM_EVENT_ADDR_RESOLVED, -5, nullptr, 0);
    const int future_type = 1000;
    std::memcpy(&ev.event, &future_type, sizeof future_type);
    cm_action a = cm_translate(ev);
    EXPECT_EQ(a.row, &r);
    EXPECT_EQ(a.prov_errno, -5);
}

TEST(CmTable, AdvertisedLimitIsRequestSpaceMinusHeader) {
    EXPECT_EQ(kCmDataMax, kCmReqSpace - kCmHdrLen);
    EXPECT_LE(kCmHdrLen + kCmDataMax, kCmRepSpace);
    EXPECT_LE(kCmHdrLen + kCmDataMax, kCmRejSpace);
    EXPECT_EQ(kCmDataMax, 52u);
}

TEST(CmPrivateData, PackEnforcesTheLimit) {
    uint8_t buf[256];
    for (size_t len : {size_t{0}, size_t{1}, kCmDataMax}) {
        auto d = pattern(len, 3);
        EXPECT_EQ(cm_pack(buf, sizeof(buf), d.data(), len), static_cast<int>(kCmHdrLen + len));
    }
    auto big = pattern(kCmDataMax + 1, 1);
    EXPECT_EQ(cm_pack(buf, sizeof(buf), big.data(), big.size()), -FI_EINVAL);
    EXPECT_EQ(cm_pack(buf, sizeof(buf), nullptr, 4), -FI_EINVAL);
    EXPECT_EQ(cm_pack(buf, kCmHdrLen + 3, big.data(), 4), -FI_EINVAL);
    EXPECT_EQ(cm_pack(buf, kCmHdrLen, nullptr, 0), static_cast<int>(kCmHdrLen));
}

TEST(CmPrivateData, ConnreqCarriesExactLengthDespitePadding) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{17}, kCmDataMax}) {
        SCOPED_TRACE(len);
        auto user = pattern(len, static_cast<uint8_t>(len));
        auto pd = wire(user, kCmReqSpace);
        auto ev = make_event(RDMA_CM_EVENT_CONNECT_REQUEST, 0, pd.data(),
                             static_cast<uint8_t>(pd.size()));
        cm_action a = cm_translate(ev);
        EXPECT_EQ(a.row->outcome, cm_outcome::connreq);
        ASSERT_TRUE(a.data_ok);
        ASSERT_EQ(a.data_len, len);
        if (len) EXPECT_EQ(0, std::memcmp(a.data, user.data(), len));
        else EXPECT_EQ(a.data, nullptr);
    }
}

TEST(CmPrivateData, AcceptDataOnEstablishedActiveSide) {
    auto user = pattern(kCmDataMax, 9);
    auto pd = wire(user, kCmRepSpace);
    auto ev = make_event(RDMA_CM_EVENT_ESTABLISHED, 0, pd.data(), static_cast<uint8_t>(pd.size()));
    cm_action a = cm_translate(ev);
    EXPECT_EQ(a.row->outcome, cm_outcome::connected);
    ASSERT_TRUE(a.data_ok);
    ASSERT_EQ(a.data_len, kCmDataMax);
    EXPECT_EQ(0, std::memcmp(a.data, user.data(), kCmDataMax));
    // the passive side's ESTABLISHED has no private data: fine, 0 bytes
    auto ev2 = make_event(RDMA_CM_EVENT_ESTABLISHED, 0, nullptr, 0);
    cm_action b = cm_translate(ev2);
    EXPECT_TRUE(b.data_ok);
    EXPECT_EQ(b.data_len, 0u);
}

TEST(CmPrivateData, PeerRejectVersusTransportReject) {
    auto user = pattern(5, 42);
    auto pd = wire(user, kCmRejSpace);
    auto peer = make_event(RDMA_CM_EVENT_REJECTED, kRejConsumer, pd.data(),
                           static_cast<uint8_t>(pd.size()));
    cm_action a = cm_translate(peer);
    EXPECT_EQ(a.row->fi_err, FI_ECONNREFUSED);
    EXPECT_TRUE(a.peer_reject);
    EXPECT_EQ(a.prov_errno, kRejConsumer);
    ASSERT_TRUE(a.data_ok);
    ASSERT_EQ(a.data_len, 5u);
    EXPECT_EQ(0, std::memcmp(a.data, user.data(), 5));

    auto nolisten = make_event(RDMA_CM_EVENT_REJECTED, kRejNoListener, pd.data(),
                               static_cast<uint8_t>(pd.size()));
    cm_action b = cm_translate(nolisten);
    EXPECT_EQ(b.row->fi_err, FI_ECONNREFUSED);
    EXPECT_FALSE(b.peer_reject);
    EXPECT_EQ(b.prov_errno, kRejNoListener);
    EXPECT_EQ(b.data_len, 0u);  // transport rejects carry no user data
}

// iWARP reports rejects as negative errnos; they get the IB reasons.
TEST(CmPrivateData, IwarpRejectsGetTheIbReasons) {
    auto user = pattern(7, 3);
    auto pd = wire(user, kCmRejSpace);
    auto mpa = make_event(RDMA_CM_EVENT_REJECTED, -ECONNRESET, pd.data(),
                          static_cast<uint8_t>(pd.size()));
    cm_action a = cm_translate(mpa);
    EXPECT_EQ(a.row->fi_err, FI_ECONNREFUSED);
    EXPECT_TRUE(a.peer_reject);
    EXPECT_EQ(a.prov_errno, kRejConsumer);
    ASSERT_TRUE(a.data_ok);
    ASSERT_EQ(a.data_len, 7u);
    EXPECT_EQ(0, std::memcmp(a.data, user.data(), 7));

    auto rst = make_event(RDMA_CM_EVENT_REJECTED, -ECONNREFUSED, nullptr, 0);
    cm_action b = cm_translate(rst);
    EXPECT_EQ(b.row->fi_err, FI_ECONNREFUSED);
    EXPECT_FALSE(b.peer_reject);
    EXPECT_EQ(b.prov_errno, kRejNoListener);
    EXPECT_EQ(b.data_len, 0u);

    // cxgb4 and irdma report the peer's reject as -ECONNREFUSED: its data says
    auto other = make_event(RDMA_CM_EVENT_REJECTED, -ECONNREFUSED, pd.data(),
                            static_cast<uint8_t>(pd.size()));
    cm_action o = cm_translate(other);
    EXPECT_TRUE(o.peer_reject);
    EXPECT_EQ(o.prov_errno, kRejConsumer);
    ASSERT_TRUE(o.data_ok);
    EXPECT_EQ(o.data_len, 7u);

    // an MPA reject whose data is not evd's: the reason, no data
    auto foreign = make_event(RDMA_CM_EVENT_REJECTED, -ECONNRESET, nullptr, 0);
    cm_action c = cm_translate(foreign);
    EXPECT_EQ(c.prov_errno, kRejConsumer);
    EXPECT_FALSE(c.data_ok);
    EXPECT_EQ(c.data_len, 0u);
}

TEST(CmPrivateData, ErrorsKeepRdmaCmStatus) {
    for (auto type : {RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR,
                      RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_CONNECT_ERROR}) {
        auto ev = make_event(type, -ETIMEDOUT, nullptr, 0);
        cm_action a = cm_translate(ev);
        EXPECT_EQ(a.prov_errno, -ETIMEDOUT) << a.row->name;
        EXPECT_EQ(a.row->outcome, cm_outcome::error);
        EXPECT_EQ(a.data_len, 0u);
    }
}

// rdma_cm reports DEVICE_REMOVAL with status 0; the record must still say
// why (like the other CM errors: a negative errno), never "no detail".
TEST(CmPrivateData, DeviceRemovalHasAnErrnoLikeTheOtherCmErrors) {
    auto ev = make_event(RDMA_CM_EVENT_DEVICE_REMOVAL, 0, nullptr, 0);
    cm_action a = cm_translate(ev);
    EXPECT_EQ(a.row->outcome, cm_outcome::removal);
    EXPECT_EQ(a.row->fi_err, FI_ENODEV);
    EXPECT_EQ(a.prov_errno, -ENODEV);
    EXPECT_EQ(a.data_len, 0u);
    // A status rdma_cm does give is kept verbatim, as for every CM error.
    auto ev2 = make_event(RDMA_CM_EVENT_DEVICE_REMOVAL, -EIO, nullptr, 0);
    EXPECT_EQ(cm_translate(ev2).prov_errno, -EIO);
}

// The same record end to end: posted to a real EQ as ep_msg.cpp/pep.cpp do,
// read back with fi_eq_readerr and explained by fi_eq_strerror.
TEST(CmPrivateData, DeviceRemovalRecordExplainsItself) {
    struct fi_fabric_attr fa {};
    fa.api_version = FI_VERSION(1, 17);
    struct fid_fabric* fab = nullptr;
    ASSERT_EQ(evd::fabric_open(&fa, &fab, nullptr), 0);
    struct fi_eq_attr qa {};
    qa.size = 8;
    qa.wait_obj = FI_WAIT_NONE;
    struct fid_eq* q = nullptr;
    ASSERT_EQ(evd::eq_open(fab, &qa, &q, nullptr), 0);

    int ctx = 0;
    struct fid ep_fid {};
    ep_fid.fclass = FI_CLASS_EP;
    ep_fid.context = &ctx;
    cm_action a = cm_translate(make_event(RDMA_CM_EVENT_DEVICE_REMOVAL, 0, nullptr, 0));
    ASSERT_EQ(cm_post_err(evd::eq_from_fid(q), &ep_fid, a.row->fi_err, a.prov_errno, nullptr, 0), 0);

    struct fi_eq_err_entry err {};
    ASSERT_EQ(fi_eq_readerr(q, &err, 0), static_cast<ssize_t>(sizeof err));
    EXPECT_EQ(err.fid, &ep_fid);
    EXPECT_EQ(err.context, &ctx);
    EXPECT_EQ(err.err, FI_ENODEV);
    EXPECT_EQ(err.prov_errno, -ENODEV);
    char buf[256];
    const char* s = fi_eq_strerror(q, err.prov_errno, err.err_data, buf, sizeof buf);
    ASSERT_NE(s, nullptr);
    std::string text(s);
    EXPECT_NE(text.find(std::strerror(ENODEV)), std::string::npos) << text;
    EXPECT_EQ(text.find("no provider-specific detail"), std::string::npos) << text;

    EXPECT_EQ(fi_close(&q->fid), 0);
    EXPECT_EQ(fi_close(&fab->fid), 0);
}

TEST(CmPrivateData, MalformedHeadersAreRejected) {
    auto good = wire(pattern(10, 1), kCmReqSpace);
    struct bad_case {
        const char* what;
        std::vector<uint8_t> pd;
    };
    std::vector<bad_case> cases;
    {
        auto b = good;
        b[0] ^= 0xff;
        cases.push_back({"magic", b});
    }
    {
        auto b = good;
        b[2] = kCmVersion + 1;
        cases.push_back({"version", b});
    }
    {
        auto b = good;
        b[3] = static_cast<uint8_t>(kCmReqSpace - kCmHdrLen + 1);
        cases.push_back({"length past the end", b});
    }
    cases.push_back({"shorter than the header", std::vector<uint8_t>(good.begin(), good.begin() + 3)});
    cases.push_back({"all zero (IB CM padding only)", std::vector<uint8_t>(kCmReqSpace, 0)});
    for (auto& c : cases) {
        SCOPED_TRACE(c.what);
        auto ev = make_event(RDMA_CM_EVENT_CONNECT_REQUEST, 0, c.pd.data(),
                             static_cast<uint8_t>(c.pd.size()));
        cm_action a = cm_translate(ev);
        EXPECT_FALSE(a.data_ok);
        EXPECT_EQ(a.data_len, 0u);
    }
    auto none = make_event(RDMA_CM_EVENT_CONNECT_REQUEST, 0, nullptr, 0);
    EXPECT_FALSE(cm_translate(none).data_ok);
    // a header whose length exactly fills the buffer is fine
    auto full = good;
    full[3] = static_cast<uint8_t>(kCmReqSpace - kCmHdrLen);
    auto ev = make_event(RDMA_CM_EVENT_CONNECT_REQUEST, 0, full.data(),
                         static_cast<uint8_t>(full.size()));
    cm_action a = cm_translate(ev);
    EXPECT_TRUE(a.data_ok);
    EXPECT_EQ(a.data_len, kCmReqSpace - kCmHdrLen);
}

TEST(CmPrivateData, RandomBytesNeverEscapeTheBuffer) {
    std::mt19937 rng(12345);
    for (int it = 0; it < 20000; it++) {
        size_t n = rng() % 257;
        std::vector<uint8_t> buf(n);
        for (auto& b : buf) b = static_cast<uint8_t>(rng());
        if (n >= 3 && (rng() & 1)) {  // make some look like evd headers
            buf[0] = kCmMagic0;
            buf[1] = kCmMagic1;
            buf[2] = kCmVersion;
        }
        const uint8_t* d = nullptr;
        size_t len = 0;
        int ret = cm_unpack(n ? buf.data() : nullptr, n, &d, &len);
        if (ret == 0) {
            ASSERT_GE(n, kCmHdrLen);
            ASSERT_LE(len, n - kCmHdrLen);
            if (len) {
                ASSERT_EQ(d, buf.data() + kCmHdrLen);
            }
        } else {
            ASSERT_EQ(ret, -FI_EINVAL);
            ASSERT_EQ(len, 0u);
        }
    }
}

TEST(CmAddr, CopyAddrReportsNeededLength) {
    struct sockaddr_in sin = {};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(1234);
    char out[64];
    size_t len = 4;
    EXPECT_EQ(cm_copy_addr(reinterpret_cast<struct sockaddr*>(&sin), out, &len), -FI_ETOOSMALL);
    EXPECT_EQ(len, sizeof(sin));
    len = sizeof(out);
    EXPECT_EQ(cm_copy_addr(reinterpret_cast<struct sockaddr*>(&sin), out, &len), 0);
    EXPECT_EQ(len, sizeof(sin));
    EXPECT_EQ(0, std::memcmp(out, &sin, sizeof(sin)));
    EXPECT_EQ(cm_copy_addr(nullptr, out, &len), -FI_EADDRNOTAVAIL);
}

// fi_evd(7)'s CM section is generated from this table: it cannot go stale.
TEST(CmTable, ManPageListsEveryRow) {
    std::ifstream f(std::string(EVD_SRCDIR) + "/man/parts/cm.7");
    ASSERT_TRUE(f.good()) << "man/parts/cm.7 missing";
    std::stringstream ss;
    ss << f.rdbuf();
    std::string page = ss.str();
    size_t n = 0;
    const cm_row* rows = cm_table(&n);
    for (size_t i = 0; i < n; i++) {
        EXPECT_NE(page.find(rows[i].name), std::string::npos) << rows[i].name;
        EXPECT_NE(page.find(rows[i].doc), std::string::npos)
            << rows[i].name << ": doc text differs from the table";
    }
    EXPECT_NE(page.find(std::to_string(kCmDataMax)), std::string::npos);
}

// The transport retry count a connection asks for. Unset (the default), it is
// 7 except on Soft-RoCE, whose completer never runs out of 7 retries: there a
// peer that died would never be noticed (the multi-node failure matrix,
// test/nodes/failures.sh "kill", shows it). The request carries it for both
// ends, so the rdma_conn_param evd fills must hold it.
TEST(CmTable, RetryCountIsSixOnSoftRoceSevenElsewhere) {
    ASSERT_EQ(get_params().retry_count, -1) << "FI_EVD_RETRY_COUNT set in the test environment";
    EXPECT_EQ(cm_retry_count(kSoftRoceVendorId), 6);
    EXPECT_EQ(cm_retry_count(0x02c9), 7);  // Mellanox
    EXPECT_EQ(cm_retry_count(0x8086), 7);  // Intel
    EXPECT_EQ(cm_retry_count(0), 7);
    struct rdma_conn_param p;
    const uint8_t data[3] = {1, 2, 3};
    cm_fill_conn_param(&p, data, sizeof data, cm_retry_count(kSoftRoceVendorId));
    EXPECT_EQ(p.retry_count, 6);
    EXPECT_EQ(p.rnr_retry_count, 7);
    EXPECT_EQ(p.private_data_len, 3);
    cm_fill_conn_param(&p, data, sizeof data, cm_retry_count(0x02c9));
    EXPECT_EQ(p.retry_count, 7);
}
