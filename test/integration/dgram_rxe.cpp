// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Datagram endpoints (FI_EP_DGRAM over UD QPs, fi_evd(7) "DATAGRAM
// ENDPOINTS") on Soft-RoCE: what fi_getinfo answers, the address vector
// (insert, lookup, straddr, remove, FI_SYNC_ERR, table order), messages both
// ways with their data checked, immediate data, the sender of each receive
// (FI_SOURCE), the limits (max_msg_size, inject), what UD cannot do, and the
// receives a closing endpoint flushes.
// Datagram endpoints are offered unless FI_EVD_DGRAM=0 (read once per
// process): ./evd_integration --gtest_filter='Dgram*' in the VM; DgramOff
// runs in a process of its own with FI_EVD_DGRAM=0.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/common.h"
#include "../common/held.h"
#include "rxe_util.h"

namespace {

constexpr size_t kNameLen = 32;  // FI_ADDR_IB_UD

bool dgram_off() {
    const char* v = std::getenv("FI_EVD_DGRAM");
    return v && std::string(v) == "0";
}

#define REQUIRE_DGRAM()                                                            \
    do {                                                                           \
        REQUIRE_VM();                                                              \
        if (dgram_off()) GTEST_SKIP() << "FI_EVD_DGRAM=0 hides datagram endpoints"; \
        if (rxetest::on_iwarp()) GTEST_SKIP() << "iWARP has no datagram QPs";       \
    } while (0)

struct fi_info* dgram_hints(uint64_t caps) {
    struct fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_DGRAM;
    h->caps = caps;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED;
    h->fabric_attr->prov_name = strdup("evd");
    return h;
}

// The info of a datagram endpoint on the device of address `addr`.
struct fi_info* dgram_info(const char* addr, uint64_t caps, int* ret_out = nullptr) {
    evdtest::use_build_tree_provider();
    struct fi_info* h = dgram_hints(caps);
    struct fi_info* info = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), addr, nullptr, FI_SOURCE, h, &info);
    fi_freeinfo(h);
    if (ret_out) *ret_out = ret;
    return ret ? nullptr : info;
}

const char* addr0() { return rxetest::env_or("EVD_VM_ADDR0", "192.0.2.1"); }
const char* addr1() { return rxetest::env_or("EVD_VM_ADDR1", "192.0.2.2"); }

// The GID a RoCE v2 port has for an IPv4 address: ::ffff:a.b.c.d.
std::vector<uint8_t> v4_gid(const char* ip) {
    std::vector<uint8_t> g(16, 0);
    g[10] = g[11] = 0xff;
    inet_pton(AF_INET, ip, &g[12]);
    return g;
}

// One datagram endpoint with everything it needs, on the device of `addr`.
struct dside {
    struct fi_info* info = nullptr;
    struct fid_fabric* fab = nullptr;
    struct fid_domain* dom = nullptr;
    struct fid_av* av = nullptr;
    struct fid_cq* txcq = nullptr;
    struct fid_cq* rxcq = nullptr;
    struct fid_ep* ep = nullptr;
    std::vector<uint8_t> buf;
    struct fid_mr* mr = nullptr;
    uint8_t name[kNameLen] = {};

    void open(const char* addr, uint64_t caps, enum fi_av_type avt = FI_AV_MAP) {
        info = dgram_info(addr, caps);
        ASSERT_NE(info, nullptr);
        ASSERT_EQ(fi_fabric(info->fabric_attr, &fab, nullptr), 0);
        ASSERT_EQ(fi_domain(fab, info, &dom, nullptr), 0);
        struct fi_av_attr aa {};
        aa.type = avt;
        ASSERT_EQ(fi_av_open(dom, &aa, &av, nullptr), 0);
        struct fi_cq_attr ca {};
        ca.format = FI_CQ_FORMAT_DATA;
        ca.size = 256;
        ASSERT_EQ(fi_cq_open(dom, &ca, &txcq, nullptr), 0);
        ASSERT_EQ(fi_cq_open(dom, &ca, &rxcq, nullptr), 0);
        ASSERT_EQ(fi_endpoint(dom, info, &ep, nullptr), 0);
        ASSERT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
        ASSERT_EQ(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT), 0);
        ASSERT_EQ(fi_ep_bind(ep, &rxcq->fid, FI_RECV), 0);
        ASSERT_EQ(fi_enable(ep), 0);
        size_t len = sizeof name;
        ASSERT_EQ(fi_getname(&ep->fid, name, &len), 0);
        ASSERT_EQ(len, kNameLen);
        buf.assign(64 * 1024, 0);
        ASSERT_EQ(fi_mr_reg(dom, buf.data(), buf.size(), FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr),
                  0);
    }
    void close() {
        if (mr) { EXPECT_EQ(fi_close(&mr->fid), 0); }
        if (ep) { EXPECT_EQ(fi_close(&ep->fid), 0); }
        if (av) { EXPECT_EQ(fi_close(&av->fid), 0); }
        if (txcq) { EXPECT_EQ(fi_close(&txcq->fid), 0); }
        if (rxcq) { EXPECT_EQ(fi_close(&rxcq->fid), 0); }
        if (dom) { EXPECT_EQ(fi_close(&dom->fid), 0); }
        if (fab) { EXPECT_EQ(fi_close(&fab->fid), 0); }
        if (info) fi_freeinfo(info);
        *this = dside{};
    }
    uint8_t* at(size_t off) { return buf.data() + off; }
    void* desc() { return fi_mr_desc(mr); }
};

// Waits for one completion and its source on cq: 1, -FI_EAVAIL or -FI_ETIMEDOUT.
ssize_t wait_from(struct fid_cq* cq, struct fi_cq_data_entry& e, fi_addr_t& from, int ms = 10000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        ssize_t r = fi_cq_readfrom(cq, &e, 1, &from);
        if (r != -FI_EAGAIN) return r;
        if (std::chrono::steady_clock::now() > end) return -FI_ETIMEDOUT;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

class DgramRxe : public ::testing::Test {
protected:
    dside a, b;  // a on rxe0, b on rxe1
    fi_addr_t a_to_b = FI_ADDR_NOTAVAIL, b_to_a = FI_ADDR_NOTAVAIL;

    void TearDown() override {
        b.close();
        a.close();
    }
    void open_pair(uint64_t caps = FI_MSG) {
        ASSERT_NO_FATAL_FAILURE(a.open(addr0(), caps));
        ASSERT_NO_FATAL_FAILURE(b.open(addr1(), caps));
        ASSERT_EQ(fi_av_insert(a.av, b.name, 1, &a_to_b, 0, nullptr), 1);
        ASSERT_EQ(fi_av_insert(b.av, a.name, 1, &b_to_a, 0, nullptr), 1);
    }
    // One datagram of `len` bytes from `from` to `to`, its data checked;
    // returns the source the receiver's CQ names.
    fi_addr_t one_datagram(dside& from, fi_addr_t dest, dside& to, size_t len, uint8_t seed) {
        for (size_t i = 0; i < len; ++i) from.at(0)[i] = static_cast<uint8_t>(seed + i * 7);
        std::memset(to.at(32768), 0, len + 1);
        int rctx = 0, sctx = 0;
        EXPECT_EQ(fi_recv(to.ep, to.at(32768), len + 1, to.desc(), FI_ADDR_UNSPEC, &rctx), 0);
        EXPECT_EQ(fi_send(from.ep, from.at(0), len, from.desc(), dest, &sctx), 0);
        struct fi_cq_data_entry e {};
        fi_addr_t src = 12345;
        EXPECT_EQ(rxetest::cq_wait_one(from.txcq, e, 10000), 1);
        EXPECT_EQ(e.op_context, &sctx);
        e = {};
        EXPECT_EQ(wait_from(to.rxcq, e, src), 1);
        EXPECT_EQ(e.op_context, &rctx);
        EXPECT_EQ(e.len, len) << "the receive header is not the user's";
        EXPECT_EQ(e.flags & (FI_RECV | FI_MSG), FI_RECV | FI_MSG);
        EXPECT_EQ(std::memcmp(from.at(0), to.at(32768), len), 0);
        EXPECT_EQ(to.at(32768)[len], 0);
        return src;
    }
};

TEST_F(DgramRxe, GetinfoDescribesADatagramEndpointNamedByTheAddressGid) {
    REQUIRE_DGRAM();
    struct fi_info* info = dgram_info(addr0(), FI_MSG);
    ASSERT_NE(info, nullptr);
    for (struct fi_info* i = info; i; i = i->next) {
        EXPECT_EQ(i->ep_attr->type, FI_EP_DGRAM);
        EXPECT_EQ(i->ep_attr->protocol, static_cast<uint32_t>(FI_PROTO_IB_UD));
        EXPECT_EQ(i->addr_format, static_cast<uint32_t>(FI_ADDR_IB_UD));
        ASSERT_EQ(i->src_addrlen, kNameLen);
        EXPECT_EQ(std::memcmp(i->src_addr, v4_gid(addr0()).data(), 16), 0);
        EXPECT_EQ(i->caps & (FI_RMA | FI_ATOMIC), 0u);
        EXPECT_EQ(i->ep_attr->msg_prefix_size, 0u);
        EXPECT_EQ(i->mode & FI_MSG_PREFIX, 0u);
        EXPECT_GE(i->ep_attr->max_msg_size, 256u);
        EXPECT_LE(i->ep_attr->max_msg_size, 4096u);  // the port's MTU
        EXPECT_EQ(i->tx_attr->msg_order, static_cast<uint64_t>(FI_ORDER_SAS));
        EXPECT_EQ(i->tx_attr->rma_iov_limit, 0u);
        EXPECT_EQ(std::string(i->domain_attr->name), rxetest::env_or("EVD_VM_DEV0", "rxe0"));
    }
    fi_freeinfo(info);
    // an FI_EP_UNSPEC caller gets no datagram endpoint (evd's are MSG; the
    // core adds ofi_rxm's RDM over them)
    evdtest::use_build_tree_provider();
    struct fi_info* h = dgram_hints(FI_MSG);
    h->ep_attr->type = FI_EP_UNSPEC;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), nullptr, FI_SOURCE, h, &info), 0);
    size_t msg = 0;
    for (struct fi_info* i = info; i; i = i->next) {
        EXPECT_NE(i->ep_attr->type, FI_EP_DGRAM);
        msg += i->ep_attr->type == FI_EP_MSG;
    }
    EXPECT_GT(msg, 0u);
    fi_freeinfo(info);
    // what a datagram endpoint cannot offer
    h->ep_attr->type = FI_EP_DGRAM;
    h->caps = FI_MSG | FI_RMA;
    info = nullptr;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), nullptr, FI_SOURCE, h, &info), -FI_ENODATA);
    h->caps = FI_MSG;
    h->addr_format = FI_SOCKADDR_IN;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), nullptr, FI_SOURCE, h, &info), -FI_ENODATA);
    // an FI_ADDR_IB_UD name as the source picks its device
    h->addr_format = FI_ADDR_IB_UD;
    uint8_t name[kNameLen] = {};
    std::memcpy(name, v4_gid(addr1()).data(), 16);
    h->src_addr = std::malloc(kNameLen);
    std::memcpy(h->src_addr, name, kNameLen);
    h->src_addrlen = kNameLen;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
    for (struct fi_info* i = info; i; i = i->next)
        EXPECT_EQ(std::string(i->domain_attr->name), rxetest::env_or("EVD_VM_DEV1", "rxe1"));
    fi_freeinfo(info);
    fi_freeinfo(h);
}

TEST_F(DgramRxe, DatagramsBothWaysWithTheirDataAndLength) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    const size_t max = a.info->ep_attr->max_msg_size;
    for (size_t len : {size_t{1}, size_t{40}, size_t{64}, size_t{1000}, max}) {
        SCOPED_TRACE(len);
        fi_addr_t src = one_datagram(b, b_to_a, a, len, static_cast<uint8_t>(len));
        EXPECT_EQ(src, FI_ADDR_NOTAVAIL) << "no FI_SOURCE: no sender";
        one_datagram(a, a_to_b, b, len, static_cast<uint8_t>(len + 1));
    }
    // a zero-byte datagram
    int rctx = 0;
    ASSERT_EQ(fi_recv(a.ep, a.at(0), 16, a.desc(), FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(fi_inject(b.ep, nullptr, 0, b_to_a), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(rxetest::cq_wait_one(a.rxcq, e, 10000), 1);
    EXPECT_EQ(e.op_context, &rctx);
    EXPECT_EQ(e.len, 0u);
}

TEST_F(DgramRxe, ManyRoundTripsNoneLostNoneCorrupted) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    const size_t max = a.info->ep_attr->max_msg_size;
    for (int i = 0; i < 300; ++i) {
        const size_t len = 1 + (static_cast<size_t>(i) * 37) % max;
        one_datagram(b, b_to_a, a, len, static_cast<uint8_t>(i));
        one_datagram(a, a_to_b, b, len, static_cast<uint8_t>(i + 3));
        if (HasFailure()) break;
    }
}

TEST_F(DgramRxe, FiSourceNamesTheSenderByItsAddressVectorEntry) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair(FI_MSG | FI_SOURCE));
    EXPECT_TRUE(a.info->caps & FI_SOURCE);
    // a second entry before it, so the answer is not 0 by chance
    fi_addr_t self = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(fi_av_insert(a.av, a.name, 1, &self, 0, nullptr), 1);
    for (int i = 0; i < 20; ++i) {
        fi_addr_t src = one_datagram(b, b_to_a, a, 100, static_cast<uint8_t>(i));
        EXPECT_EQ(src, a_to_b);
    }
    // from a peer the receiver's AV does not hold
    ASSERT_EQ(fi_av_remove(a.av, &a_to_b, 1, 0), 0);
    EXPECT_EQ(one_datagram(b, b_to_a, a, 100, 9), FI_ADDR_NOTAVAIL);
    // back in, under a new fi_addr_t
    fi_addr_t again = FI_ADDR_NOTAVAIL;
    ASSERT_EQ(fi_av_insert(a.av, b.name, 1, &again, 0, nullptr), 1);
    EXPECT_NE(again, a_to_b);
    EXPECT_EQ(one_datagram(b, b_to_a, a, 100, 10), again);
}

TEST_F(DgramRxe, ImmediateDataArrivesWithTheMessage) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    int rctx = 0, sctx = 0;
    ASSERT_EQ(fi_recv(a.ep, a.at(0), 256, a.desc(), FI_ADDR_UNSPEC, &rctx), 0);
    std::memcpy(b.at(0), "hello", 5);
    ASSERT_EQ(fi_senddata(b.ep, b.at(0), 5, b.desc(), 0xfeedbeef, b_to_a, &sctx), 0);
    struct fi_cq_data_entry e {};
    ASSERT_EQ(rxetest::cq_wait_one(a.rxcq, e, 10000), 1);
    EXPECT_EQ(e.len, 5u);
    EXPECT_TRUE(e.flags & FI_REMOTE_CQ_DATA);
    EXPECT_EQ(e.data, 0xfeedbeefu);
    EXPECT_EQ(std::memcmp(a.at(0), "hello", 5), 0);
    ASSERT_EQ(rxetest::cq_wait_one(b.txcq, e, 10000), 1);
    EXPECT_EQ(e.op_context, &sctx);
    EXPECT_EQ(fi_senddata(b.ep, b.at(0), 5, b.desc(), 1ULL << 32, b_to_a, &sctx), -FI_EINVAL);
}

TEST_F(DgramRxe, AddressVectorInsertLookupStraddrRemove) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    // lookup gives the name back, whatever the buffer
    uint8_t back[kNameLen] = {};
    size_t len = sizeof back;
    ASSERT_EQ(fi_av_lookup(a.av, a_to_b, back, &len), 0);
    EXPECT_EQ(len, kNameLen);
    EXPECT_EQ(std::memcmp(back, b.name, kNameLen), 0);
    len = 4;
    ASSERT_EQ(fi_av_lookup(a.av, a_to_b, back, &len), 0);
    EXPECT_EQ(len, kNameLen);
    EXPECT_EQ(fi_av_lookup(a.av, 999, back, &len), -FI_EINVAL);
    // the text form verbs prints
    char text[128];
    len = sizeof text;
    ASSERT_NE(fi_av_straddr(a.av, b.name, text, &len), nullptr);
    EXPECT_EQ(std::string(text).rfind("fi_addr_ib_ud://::ffff:" + std::string(addr1()) + ":", 0), 0u)
        << text;
    EXPECT_EQ(len, std::strlen(text) + 1);
    // FI_SYNC_ERR: one good name, one with QP number 0, one without GID or LID
    uint8_t names[3][kNameLen] = {};
    std::memcpy(names[0], b.name, kNameLen);
    std::memcpy(names[1], b.name, kNameLen);
    std::memset(names[1] + 16, 0, 4);
    std::memcpy(names[2] + 16, b.name + 16, 4);
    fi_addr_t out[3];
    int errs[3] = {-1, -1, -1};
    EXPECT_EQ(fi_av_insert(a.av, names, 3, out, FI_SYNC_ERR, errs), 1);
    EXPECT_EQ(errs[0], 0);
    EXPECT_EQ(errs[1], FI_EINVAL);
    EXPECT_EQ(errs[2], FI_EINVAL);
    EXPECT_NE(out[0], FI_ADDR_NOTAVAIL);
    EXPECT_EQ(out[1], FI_ADDR_NOTAVAIL);
    EXPECT_EQ(fi_av_insert(a.av, names, 1, out, FI_EVENT, nullptr), -FI_EBADFLAGS);
    // removed: sends to it are refused, a second remove too
    ASSERT_EQ(fi_av_remove(a.av, &a_to_b, 1, 0), 0);
    EXPECT_EQ(fi_send(a.ep, a.at(0), 8, a.desc(), a_to_b, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_av_remove(a.av, &a_to_b, 1, 0), -FI_EINVAL);
    EXPECT_EQ(fi_av_lookup(a.av, a_to_b, back, &len), -FI_EINVAL);
    // the other copy still works
    one_datagram(a, out[0], b, 64, 1);
    // an AV with endpoints bound does not close
    EXPECT_EQ(fi_close(&a.av->fid), -FI_EBUSY);
}

TEST_F(DgramRxe, TableAddressesAreIndicesInInsertionOrder) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(a.open(addr0(), FI_MSG, FI_AV_TABLE));
    ASSERT_NO_FATAL_FAILURE(b.open(addr1(), FI_MSG, FI_AV_TABLE));
    uint8_t names[4][kNameLen];
    for (auto& n : names) std::memcpy(n, b.name, kNameLen);
    ASSERT_EQ(fi_av_insert(a.av, names, 2, nullptr, 0, nullptr), 2);
    fi_addr_t more[2];
    ASSERT_EQ(fi_av_insert(a.av, names + 2, 2, more, 0, nullptr), 2);
    EXPECT_EQ(more[0], 2u);
    EXPECT_EQ(more[1], 3u);
    ASSERT_EQ(fi_av_insert(b.av, a.name, 1, &b_to_a, 0, nullptr), 1);
    EXPECT_EQ(b_to_a, 0u);
    one_datagram(a, 1, b, 200, 5);
    one_datagram(b, 0, a, 200, 6);
}

TEST_F(DgramRxe, LimitsAndWhatUdCannotDoAreRefusedAtTheCall) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    const size_t max = a.info->ep_attr->max_msg_size;
    EXPECT_EQ(fi_send(a.ep, a.at(0), max + 1, a.desc(), a_to_b, nullptr), -FI_EMSGSIZE);
    const size_t inj = a.info->tx_attr->inject_size;
    if (inj < max) {
        EXPECT_EQ(fi_inject(a.ep, a.at(0), inj + 1, a_to_b), -FI_EINVAL);
    }
    EXPECT_EQ(fi_send(a.ep, a.at(0), 8, a.desc(), 777, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_read(a.ep, a.at(0), 8, a.desc(), a_to_b, 0, 0, nullptr), -FI_ENOSYS);
    EXPECT_EQ(fi_write(a.ep, a.at(0), 8, a.desc(), a_to_b, 0, 0, nullptr), -FI_ENOSYS);
    EXPECT_EQ(fi_connect(a.ep, b.name, nullptr, 0), -FI_ENOSYS);
    EXPECT_EQ(fi_setname(&a.ep->fid, b.name, kNameLen), -FI_ENOSYS);
    size_t len = 8;
    uint8_t small[8];
    EXPECT_EQ(fi_getname(&a.ep->fid, small, &len), -FI_ETOOSMALL);
    EXPECT_EQ(len, kNameLen);
    // the endpoint still works after all that
    one_datagram(a, a_to_b, b, 32, 3);
    // inject within the limit
    if (inj) {
        int rctx = 0;
        ASSERT_EQ(fi_recv(b.ep, b.at(0), 256, b.desc(), FI_ADDR_UNSPEC, &rctx), 0);
        std::memcpy(a.at(100), "inj", 3);
        ASSERT_EQ(fi_inject(a.ep, a.at(100), 3, a_to_b), 0);
        struct fi_cq_data_entry e {};
        ASSERT_EQ(rxetest::cq_wait_one(b.rxcq, e, 10000), 1);
        EXPECT_EQ(e.len, 3u);
        EXPECT_EQ(std::memcmp(b.at(0), "inj", 3), 0);
        EXPECT_EQ(fi_cq_read(a.txcq, &e, 1), -FI_EAGAIN) << "an inject completes silently";
    }
}

TEST_F(DgramRxe, ClosingFlushesPostedReceivesAsCanceled) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    int ctx[4];
    for (int i = 0; i < 4; ++i)
        ASSERT_EQ(fi_recv(a.ep, a.at(i * 1024), 1024, a.desc(), FI_ADDR_UNSPEC, &ctx[i]), 0);
    ASSERT_EQ(fi_close(&a.ep->fid), 0);
    a.ep = nullptr;
    int seen = 0;
    for (int i = 0; i < 4; ++i) {
        struct fi_cq_data_entry e {};
        ASSERT_EQ(rxetest::cq_wait_one(a.rxcq, e, 5000), -FI_EAVAIL);
        struct fi_cq_err_entry err {};
        ASSERT_EQ(fi_cq_readerr(a.rxcq, &err, 0), 1);
        EXPECT_EQ(err.err, FI_ECANCELED);
        EXPECT_EQ(err.op_context, &ctx[i]) << "in posting order";
        ++seen;
    }
    EXPECT_EQ(seen, 4);
    struct fi_cq_data_entry e {};
    EXPECT_EQ(fi_cq_read(a.rxcq, &e, 1), -FI_EAGAIN);
}

// The name's service: the port its SIDR listener is bound to.
uint16_t service_of(const uint8_t name[kNameLen]) {
    uint16_t s;
    std::memcpy(&s, name + 24, 2);
    return s;
}

// A datagram endpoint is found by node and service: fi_getinfo asks the
// endpoint listening there (SIDR) and answers its name as dest_addr.
TEST_F(DgramRxe, GetinfoFindsThePeerByNodeAndService) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(a.open(addr0(), FI_MSG | FI_SOURCE));
    const uint16_t port = service_of(a.name);
    ASSERT_NE(port, 0) << "an enabled endpoint listens on an ephemeral port";
    evdtest::use_build_tree_provider();
    struct fi_info* h = dgram_hints(FI_MSG | FI_SOURCE);
    struct fi_info* info = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), std::to_string(port).c_str(), 0, h, &info), 0);
    ASSERT_EQ(info->dest_addrlen, kNameLen);
    EXPECT_EQ(std::memcmp(info->dest_addr, a.name, 20), 0) << "GID and QP number";
    EXPECT_EQ(service_of(static_cast<uint8_t*>(info->dest_addr)), port);
    fi_freeinfo(info);
    // from rxe1's address: the answer is on rxe1, and the name works
    auto* sin = static_cast<struct sockaddr_in*>(calloc(1, sizeof(struct sockaddr_in)));
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, addr1(), &sin->sin_addr);
    h->src_addr = sin;
    h->src_addrlen = sizeof *sin;
    h->addr_format = FI_SOCKADDR_IN;
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), std::to_string(port).c_str(), 0, h, &info),
              -FI_ENODATA) << "a sockaddr is not a datagram endpoint's address format";
    h->addr_format = FI_FORMAT_UNSPEC;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), std::to_string(port).c_str(), 0, h, &info), 0);
    EXPECT_EQ(std::string(info->domain_attr->name), rxetest::env_or("EVD_VM_DEV1", "rxe1"));
    // a node without a service: the device and source that reach it, no peer
    struct fi_info* route = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), nullptr, 0, h, &route), 0);
    EXPECT_EQ(route->dest_addr, nullptr);
    EXPECT_EQ(std::memcmp(route->src_addr, v4_gid(addr1()).data(), 16), 0);
    fi_freeinfo(route);
    fi_freeinfo(h);
    ASSERT_NO_FATAL_FAILURE(b.open(addr1(), FI_MSG | FI_SOURCE));
    ASSERT_EQ(fi_av_insert(b.av, info->dest_addr, 1, &b_to_a, 0, nullptr), 1);
    fi_freeinfo(info);
    ASSERT_EQ(fi_av_insert(a.av, b.name, 1, &a_to_b, 0, nullptr), 1);
    EXPECT_EQ(one_datagram(b, b_to_a, a, 333, 1), a_to_b);
}

// Nobody at the service: -FI_ENODATA at once (the peer's CM says so), as
// a connection request to a port nobody listens on is rejected at once;
// a MSG listener on that port is nobody for datagrams.
TEST_F(DgramRxe, NobodyAtTheServiceIsEnodataAtOnce) {
    REQUIRE_DGRAM();
    evdtest::use_build_tree_provider();
    struct fi_info* h = dgram_hints(FI_MSG);
    struct fi_info* info = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), "47111", 0, h, &info), -FI_ENODATA);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, 1.5) << "not a timeout";
    fi_freeinfo(h);
}

// fi_av_insertsvc asks the same way; a service taken by another endpoint
// is refused at fi_enable.
TEST_F(DgramRxe, InsertsvcAndAServiceInUse) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(a.open(addr0(), FI_MSG));
    ASSERT_NO_FATAL_FAILURE(b.open(addr1(), FI_MSG));
    const std::string port = std::to_string(service_of(a.name));
    ASSERT_EQ(fi_av_insertsvc(b.av, addr0(), port.c_str(), &b_to_a, 0, nullptr), 1);
    ASSERT_EQ(fi_av_insert(a.av, b.name, 1, &a_to_b, 0, nullptr), 1);
    one_datagram(b, b_to_a, a, 100, 2);
    one_datagram(a, a_to_b, b, 100, 3);
    // the same service again, on a second endpoint of a's domain
    evdtest::use_build_tree_provider();
    struct fi_info* h = dgram_hints(FI_MSG);
    struct fi_info* info = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), addr0(), port.c_str(), FI_SOURCE, h, &info), 0);
    fi_freeinfo(h);
    evdtest::held<struct fid_ep> ep2;
    ASSERT_EQ(fi_endpoint(a.dom, info, ep2.out(), nullptr), 0);
    fi_freeinfo(info);
    ASSERT_EQ(fi_ep_bind(ep2, &a.av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep2, &a.txcq->fid, FI_TRANSMIT), 0);
    ASSERT_EQ(fi_ep_bind(ep2, &a.rxcq->fid, FI_RECV), 0);
    EXPECT_EQ(fi_enable(ep2), -FI_EADDRINUSE);
    EXPECT_EQ(ep2.close(), 0);
}

// Datagram endpoints of one domain share a receive context: each receive
// still gets its header out of the way, whichever endpoint it lands on.
TEST_F(DgramRxe, SharedReceiveContextFeedsSeveralEndpoints) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    struct fi_rx_attr ra = *a.info->rx_attr;
    evdtest::held<struct fid_ep> srx;
    ASSERT_EQ(fi_srx_context(a.dom, &ra, srx.out(), nullptr), 0);
    evdtest::held<struct fid_ep> eps[2];
    fi_addr_t to[2];
    for (int k = 0; k < 2; ++k) {
        ASSERT_EQ(fi_endpoint(a.dom, a.info, eps[k].out(), nullptr), 0);
        ASSERT_EQ(fi_ep_bind(eps[k], &a.av->fid, 0), 0);
        ASSERT_EQ(fi_ep_bind(eps[k], &a.txcq->fid, FI_TRANSMIT), 0);
        ASSERT_EQ(fi_ep_bind(eps[k], &a.rxcq->fid, FI_RECV), 0);
        ASSERT_EQ(fi_ep_bind(eps[k], &srx->fid, 0), 0);
        ASSERT_EQ(fi_enable(eps[k]), 0);
        uint8_t name[kNameLen];
        size_t len = sizeof name;
        ASSERT_EQ(fi_getname(&eps[k]->fid, name, &len), 0);
        ASSERT_EQ(fi_av_insert(b.av, name, 1, &to[k], 0, nullptr), 1);
    }
    EXPECT_EQ(fi_recv(eps[0], a.at(0), 64, a.desc(), FI_ADDR_UNSPEC, nullptr), -FI_EOPBADSTATE)
        << "receives go to the shared context";
    int rctx[4];
    for (int i = 0; i < 4; ++i)
        ASSERT_EQ(fi_recv(srx, a.at(4096 * i), 1024, a.desc(), FI_ADDR_UNSPEC, &rctx[i]), 0);
    for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 100 + i; ++j) b.at(1000 * i)[j] = static_cast<uint8_t>(i * 31 + j);
        ASSERT_EQ(fi_send(b.ep, b.at(1000 * i), 100 + i, b.desc(), to[i % 2], nullptr), 0);
        struct fi_cq_data_entry e {};
        ASSERT_EQ(rxetest::cq_wait_one(a.rxcq, e, 10000), 1);
        EXPECT_EQ(e.op_context, &rctx[i]) << "in posting order";
        EXPECT_EQ(e.len, 100u + i);
        EXPECT_EQ(std::memcmp(a.at(4096 * i), b.at(1000 * i), 100 + i), 0);
    }
    // FI_SOURCE cannot be kept for receives of a shared context
    struct fi_info* src_info = dgram_info(addr0(), FI_MSG | FI_SOURCE);
    ASSERT_NE(src_info, nullptr);
    evdtest::held<struct fid_ep> ep3;
    ASSERT_EQ(fi_endpoint(a.dom, src_info, ep3.out(), nullptr), 0);
    fi_freeinfo(src_info);
    ASSERT_EQ(fi_ep_bind(ep3, &a.av->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep3, &a.txcq->fid, FI_TRANSMIT), 0);
    ASSERT_EQ(fi_ep_bind(ep3, &a.rxcq->fid, FI_RECV), 0);
    ASSERT_EQ(fi_ep_bind(ep3, &srx->fid, 0), 0);
    EXPECT_EQ(fi_enable(ep3), -FI_EOPNOTSUPP);
    EXPECT_EQ(ep3.close(), 0);
    for (auto& e : eps) EXPECT_EQ(e.close(), 0);
    EXPECT_EQ(srx.close(), 0);
}

// Several datagram endpoints on each domain, each pair talking (what
// fi_shared_ctx -e dgram does): the second endpoints' names and address
// handles work as the first ones do.
TEST_F(DgramRxe, SeveralEndpointsPerDomainTalkPairwise) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair());
    evdtest::held<struct fid_ep> a2, b2;  // a's and b's second endpoints
    fi_addr_t to_b[2] = {a_to_b, 0}, to_a[2] = {b_to_a, 0};
    for (dside* x : {&a, &b}) {
        evdtest::held<struct fid_ep>& e2 = x == &a ? a2 : b2;
        ASSERT_EQ(fi_endpoint(x->dom, x->info, e2.out(), nullptr), 0);
        ASSERT_EQ(fi_ep_bind(e2, &x->av->fid, 0), 0);
        ASSERT_EQ(fi_ep_bind(e2, &x->txcq->fid, FI_TRANSMIT), 0);
        ASSERT_EQ(fi_ep_bind(e2, &x->rxcq->fid, FI_RECV), 0);
        ASSERT_EQ(fi_enable(e2), 0);
    }
    struct fid_ep* ea[2] = {a.ep, a2};
    struct fid_ep* eb[2] = {b.ep, b2};
    uint8_t na[kNameLen], nb[kNameLen];
    size_t len = kNameLen;
    ASSERT_EQ(fi_getname(&ea[1]->fid, na, &len), 0);
    len = kNameLen;
    ASSERT_EQ(fi_getname(&eb[1]->fid, nb, &len), 0);
    EXPECT_NE(std::memcmp(na, a.name, kNameLen), 0);
    ASSERT_EQ(fi_av_insert(a.av, nb, 1, &to_b[1], 0, nullptr), 1);
    ASSERT_EQ(fi_av_insert(b.av, na, 1, &to_a[1], 0, nullptr), 1);
    for (int k = 0; k < 2; ++k) {
        SCOPED_TRACE(k);
        int rctx = 0, sctx = 0;
        std::memcpy(a.at(0), "ping", 4);
        ASSERT_EQ(fi_recv(eb[k], b.at(100), 64, b.desc(), FI_ADDR_UNSPEC, &rctx), 0);
        ASSERT_EQ(fi_send(ea[k], a.at(0), 4, a.desc(), to_b[k], &sctx), 0);
        struct fi_cq_data_entry e {};
        ASSERT_EQ(rxetest::cq_wait_one(a.txcq, e, 10000), 1);
        EXPECT_EQ(e.op_context, &sctx);
        ASSERT_EQ(rxetest::cq_wait_one(b.rxcq, e, 10000), 1);
        EXPECT_EQ(e.op_context, &rctx);
        EXPECT_EQ(std::memcmp(b.at(100), "ping", 4), 0);
        ASSERT_EQ(fi_recv(ea[k], a.at(100), 64, a.desc(), FI_ADDR_UNSPEC, &rctx), 0);
        ASSERT_EQ(fi_send(eb[k], b.at(100), 4, b.desc(), to_a[k], &sctx), 0);
        ASSERT_EQ(rxetest::cq_wait_one(b.txcq, e, 10000), 1);
        ASSERT_EQ(rxetest::cq_wait_one(a.rxcq, e, 10000), 1);
        EXPECT_EQ(std::memcmp(a.at(100), "ping", 4), 0);
    }
    EXPECT_EQ(a2.close(), 0);
    EXPECT_EQ(b2.close(), 0);
}

// Sends and FI_SOURCE lookups run without a lock while another thread
// inserts into the same AV (its chunks and source index grow) and removes
// again: every datagram's data and sender stay right. Under TSan in the
// sanitizer runs of the VM (soak-in-guest.sh).
TEST_F(DgramRxe, ThreadsInsertWhileTheAvIsReadFrom) {
    REQUIRE_DGRAM();
    ASSERT_NO_FATAL_FAILURE(open_pair(FI_MSG | FI_SOURCE));
    std::atomic<bool> stop{false};
    std::atomic<int> inserted{0};
    std::thread grower([&] {
        // copies of a's own name: another QP number than b's, so the
        // sender of b's datagrams stays a_to_b whatever the index holds
        std::vector<fi_addr_t> mine;
        while (!stop.load() && inserted.load() < 3000) {
            fi_addr_t x = FI_ADDR_NOTAVAIL;
            if (fi_av_insert(a.av, a.name, 1, &x, 0, nullptr) != 1) break;
            mine.push_back(x);
            inserted.fetch_add(1);
            if (mine.size() % 7 == 0) {
                EXPECT_EQ(fi_av_remove(a.av, &mine.front(), 1, 0), 0);
                mine.erase(mine.begin());
            }
        }
    });
    for (int i = 0; i < 200 && !HasFailure(); ++i) {
        EXPECT_EQ(one_datagram(b, b_to_a, a, 1 + i % 500, static_cast<uint8_t>(i)), a_to_b);
        one_datagram(a, a_to_b, b, 1 + i % 300, static_cast<uint8_t>(i + 1));
    }
    stop.store(true);
    grower.join();
    EXPECT_GT(inserted.load(), 0);
}

// iWARP has no unreliable datagram QPs: hints asking for FI_EP_DGRAM find
// no siw device (each skipped with that reason).
TEST(DgramIwarp, IwarpOffersNoDatagramEndpoints) {
    REQUIRE_VM();
    if (!rxetest::on_iwarp()) GTEST_SKIP() << "runs on siw (test/vm/run-in-vm --driver siw)";
    int ret = 0;
    struct fi_info* info = dgram_info(addr0(), FI_MSG, &ret);
    EXPECT_EQ(ret, -FI_ENODATA);
    EXPECT_EQ(info, nullptr);
    fi_freeinfo(info);
}

// With FI_EVD_DGRAM=0, hints asking for FI_EP_DGRAM find nothing.
TEST(DgramOff, HintsAskingForDatagramsFindNothingWhenHidden) {
    REQUIRE_VM();
    if (!dgram_off()) GTEST_SKIP() << "runs with FI_EVD_DGRAM=0";
    int ret = 0;
    struct fi_info* info = dgram_info(addr0(), FI_MSG, &ret);
    EXPECT_EQ(ret, -FI_ENODATA);
    EXPECT_EQ(info, nullptr);
    fi_freeinfo(info);
}

}  // namespace
