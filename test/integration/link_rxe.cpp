// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Link and port failures on Soft-RoCE (fi_evd(7), LINK AND PORT FAILURES):
// a connected pair (server endpoint on rxe0, client on rxe1) across a flap
// of veth0, the link under rxe0.
//  * default: a flap ends no connection by itself; an idle connection works
//    again once the link is back;
//  * an endpoint closed while its link is down tells its peer when the link
//    returns (lingering disconnect), so the peer gets FI_SHUTDOWN instead of
//    keeping a dead connection forever;
//  * nothing leaves a port that is down: a refused request (fi_close of its
//    endpoint, fi_reject), fi_accept, fi_shutdown and fi_connect while the
//    port is down send no CM message then (on rxe one would disable rxe0's
//    connection management for good), the peer is answered once the link
//    is back, and rxe0 takes the next connection;
//  * fail-fast (fi_control FI_EVD_FAIL_FAST_SET): PORT_ERR ends every
//    connected endpoint on the port at once with one FI_ENETDOWN terminal
//    error naming the port, and flushes posted work with its context.
// Each test restores the link (and veth0's routes) before it ends.
// Runs inside the VM: test/vm/run-in-vm -- ./evd_integration --gtest_filter='LinkRxe*'
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_ext_evd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/common.h"
#include "../common/held.h"
#include "rxe_util.h"

namespace {

using clk = std::chrono::steady_clock;
using rxetest::env_or;

double ms_since(clk::time_point t) {
    return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

// Drops every packet veth0 sends (netem, 100% loss) while the link stays up:
// rxe0 still sends, nothing reaches rxe1, no error is raised anywhere.
int blackhole_veth0(bool on) {
    return std::system(rxetest::netem_loss_cmd(env_or("EVD_VM_NETDEV0", "veth0"), on).c_str());
}

using side = rxetest::pair_side;

class LinkRxe : public rxetest::PairFixture<LinkRxe> {
    friend class rxetest::PairFixture<LinkRxe>;

protected:
    bool fail_fast = false;  // set on both domains before their endpoints open

    void SetUp() override {
        // siw ends every connection of an interface that is set down
        // (fi_evd(7), IWARP); its flaps across nodes are test/nodes's
        if (rxetest::on_iwarp()) GTEST_SKIP() << "siw ends every connection when its interface goes down";
        PairFixture::SetUp();
    }

    void TearDown() override {
        blackhole_veth0(false);
        rxetest::link_up();  // never leave the link down for later tests
        if (busy_mr) {  // before its domain
            EXPECT_EQ(fi_close(&busy_mr->fid), 0);
        }
        busy_mr = nullptr;
        close_side(c);
        close_side(s);
        close_listener();
    }

    struct fi_info* pair_hints() { return rxetest::rma_hints(64); }

    void open_side(side& x, struct fi_info* info) {
        ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
        if (fail_fast) {
            int on = 1;
            ASSERT_EQ(fi_control(&x.dom->fid, FI_EVD_FAIL_FAST_SET, &on), 0);
        }
        ASSERT_NO_FATAL_FAILURE(open_cqs(x, FI_WAIT_FD, 256));
        ASSERT_NO_FATAL_FAILURE(open_endpoint(x, 0, &x));
        ASSERT_EQ(fi_enable(x.ep), 0);
    }

    // Starts a connection from rxe1 to the listener (nobody accepts yet).
    // getinfo is retried: right after a flap rxe1 may not resolve rxe0 yet.
    void start_client() {
        ASSERT_NO_FATAL_FAILURE(open_client(20));
        ASSERT_EQ(fi_connect(c.ep, c.info->dest_addr, nullptr, 0), 0);
    }

    // Listens, starts a client and waits for its FI_CONNREQ at the listener.
    void request_reaches_listener(struct fi_eq_cm_entry& ent) {
        ASSERT_NO_FATAL_FAILURE(listen());
        ASSERT_NO_FATAL_FAILURE(start_client());
        uint32_t ev = 0;
        ASSERT_EQ(eq_wait(peq, ev, ent), 0);
        ASSERT_EQ(ev, static_cast<uint32_t>(FI_CONNREQ));
    }

    // The request was refused while the link was down: the link comes back
    // and the client gets its one FI_ECONNREFUSED.
    void client_refused_once_the_link_returns() {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ASSERT_EQ(rxetest::link_up(), 0);
        auto up = clk::now();
        struct fi_eq_err_entry err {};
        ASSERT_TRUE(wait_error(c, err, 20000)) << "the client never got its rejection";
        EXPECT_EQ(err.err, FI_ECONNREFUSED) << fi_strerror(err.err);
        EXPECT_EQ(err.fid, &c.ep->fid);
        std::printf("# the client's FI_ECONNREFUSED %.0f ms after the link returned\n",
                    ms_since(up));
    }

    // rxe0 still takes connection requests: closes both sides, connects a new
    // pair to the listener and exchanges one message.
    void new_pair_connects() {
        close_side(c);
        close_side(s);
        ASSERT_NO_FATAL_FAILURE(open_client(20));
        ASSERT_NO_FATAL_FAILURE(handshake([](side&) {}))
            << "rxe0 no longer takes connection requests";
        ASSERT_NO_FATAL_FAILURE(exchange(c, s, 3));
    }

    // Progresses every EQ of the pair for `ms` and fails on any event.
    void no_event_for(int ms) {
        auto end = clk::now() + std::chrono::milliseconds(ms);
        while (clk::now() < end) {
            for (struct fid_eq* q : {peq, s.eq, c.eq}) {
                if (!q) continue;
                uint32_t ev = 0;
                uint8_t buf[256];
                ssize_t r = fi_eq_read(q, &ev, buf, sizeof buf, 0);
                EXPECT_EQ(r, -FI_EAGAIN) << "unexpected event " << ev << " on EQ " << q;
                if (r == -FI_EAVAIL) {
                    struct fi_eq_err_entry err {};
                    fi_eq_readerr(q, &err, 0);
                    ADD_FAILURE() << "error record " << fi_strerror(err.err) << " prov_errno "
                                  << err.prov_errno;
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }

    // Waits up to ms for the error record of x's EQ (pumping the others).
    bool wait_error(side& x, struct fi_eq_err_entry& err, int ms) {
        auto end = clk::now() + std::chrono::milliseconds(ms);
        while (clk::now() < end) {
            rxetest::pump_eqs(fab, {peq, s.eq, c.eq}, x.eq);
            uint32_t ev = 0;
            uint8_t buf[256];
            ssize_t r = fi_eq_read(x.eq, &ev, buf, sizeof buf, 0);
            if (r == -FI_EAVAIL) return fi_eq_readerr(x.eq, &err, 0) == sizeof err;
            if (r >= 0) {
                ADD_FAILURE() << "event " << ev << " where an error record was expected";
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        return false;
    }

    // One checked message from `from` to `to` over the connection.
    void exchange(side& from, side& to, unsigned seed) {
        std::vector<uint8_t> out(4096);
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + seed);
        rxetest::message_flows(from.dom, from.ep, from.tx, to.dom, to.ep, to.rx, out);
    }

    // A receive posted on the server, as every MSG application has one;
    // expect_receive_flushed() checks that it completed as flushed, with its
    // context, once the server's endpoint ended.
    std::vector<uint8_t> busy_buf = std::vector<uint8_t>(256);
    struct fid_mr* busy_mr = nullptr;
    int busy_ctx = 0;
    void post_server_receive() {
        ASSERT_EQ(fi_mr_reg(s.dom, busy_buf.data(), busy_buf.size(), FI_RECV, 0, 0, 0, &busy_mr,
                            nullptr),
                  0);
        ASSERT_EQ(fi_recv(s.ep, busy_buf.data(), busy_buf.size(), fi_mr_desc(busy_mr), 0,
                          &busy_ctx),
                  0);
    }
    void expect_receive_flushed() {
        struct fi_cq_data_entry e {};
        EXPECT_EQ(rxetest::cq_wait_one(s.rx, e, 5000), -FI_EAVAIL) << "posted receive not flushed";
        struct fi_cq_err_entry ce {};
        ASSERT_EQ(fi_cq_readerr(s.rx, &ce, 0), 1);
        EXPECT_EQ(ce.op_context, &busy_ctx);
        EXPECT_EQ(ce.err, FI_ECANCELED);
    }

    // Checks one fail-fast record: FI_ENETDOWN about x's endpoint and port.
    void expect_port_terminal(side& x, const struct fi_eq_err_entry& err) {
        EXPECT_EQ(err.fid, &x.ep->fid);
        EXPECT_EQ(err.context, &x);
        EXPECT_EQ(err.err, FI_ENETDOWN);
        EXPECT_EQ(err.prov_errno, IBV_EVENT_PORT_ERR);
        ASSERT_EQ(err.err_data_size, sizeof(struct fi_evd_async_err));
        struct fi_evd_async_err d;
        std::memcpy(&d, err.err_data, sizeof d);
        EXPECT_EQ(d.magic, FI_EVD_ASYNC_MAGIC);
        EXPECT_EQ(d.object, static_cast<uint32_t>(FI_EVD_ASYNC_PORT));
        EXPECT_EQ(d.port_num, 1u);
        EXPECT_NE(d.qp_num, 0u);
        EXPECT_EQ(d.terminal, 1u);
        EXPECT_STREQ(d.device, x.info->domain_attr->name);
        char buf[256];
        const char* s = fi_eq_strerror(x.eq, err.prov_errno, err.err_data, buf, sizeof buf);
        EXPECT_NE(std::strstr(s, "is down"), nullptr) << s;
    }
};

TEST_F(LinkRxe, FailFastControlSetsGetsAndRejectsBadValues) {
    struct fi_info* info = rxetest::server_info("0");
    ASSERT_NE(info, nullptr);
    evdtest::held<struct fid_fabric> f;
    evdtest::held<struct fid_domain> d;
    ASSERT_EQ(fi_fabric(info->fabric_attr, f.out(), nullptr), 0);
    ASSERT_EQ(fi_domain(f, info, d.out(), nullptr), 0);
    int v = -1;
    EXPECT_EQ(fi_control(&d->fid, FI_EVD_FAIL_FAST_GET, &v), 0);
    EXPECT_EQ(v, 0) << "off unless FI_EVD_FAIL_FAST says otherwise";
    v = 1;
    EXPECT_EQ(fi_control(&d->fid, FI_EVD_FAIL_FAST_SET, &v), 0);
    v = -1;
    EXPECT_EQ(fi_control(&d->fid, FI_EVD_FAIL_FAST_GET, &v), 0);
    EXPECT_EQ(v, 1);
    v = 2;
    EXPECT_EQ(fi_control(&d->fid, FI_EVD_FAIL_FAST_SET, &v), -FI_EINVAL);
    EXPECT_EQ(fi_control(&d->fid, FI_EVD_FAIL_FAST_SET, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_control(&d->fid, FI_EVD_FAIL_FAST_GET, nullptr), -FI_EINVAL);
    EXPECT_EQ(fi_control(&d->fid, 0x65764499, &v), -FI_ENOSYS);
    v = -1;
    EXPECT_EQ(fi_control(&d->fid, FI_EVD_FAIL_FAST_GET, &v), 0);
    EXPECT_EQ(v, 1) << "a rejected value leaves the setting alone";
    EXPECT_EQ(d.close(), 0);
    EXPECT_EQ(f.close(), 0);
    fi_freeinfo(info);
}

// Default: the flap is reported on domain EQs only (none here), no endpoint
// ends, and the idle connection carries data again once the link is back.
TEST_F(LinkRxe, IdleConnectionSurvivesAFlapByDefault) {
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_EQ(rxetest::link_down(), 0);
    ASSERT_NO_FATAL_FAILURE(no_event_for(2000));
    ASSERT_EQ(rxetest::link_up(), 0);
    ASSERT_NO_FATAL_FAILURE(exchange(c, s, 1));
    ASSERT_NO_FATAL_FAILURE(exchange(s, c, 2));
    ASSERT_NO_FATAL_FAILURE(no_event_for(200));
}

// An endpoint closed while its port is down (what ofi_rxm does when a
// connection fails) sends its DREQ when the port is back: the idle peer gets
// FI_SHUTDOWN. Without it the DREQ sent at close is lost and the peer keeps
// the dead connection forever.
TEST_F(LinkRxe, EndpointClosedWhileDownTellsItsPeerWhenTheLinkReturns) {
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_EQ(rxetest::link_down(), 0);
    ASSERT_EQ(fi_close(&s.ep->fid), 0);
    s.ep = nullptr;
    ASSERT_NO_FATAL_FAILURE(no_event_for(1000));  // nothing reaches the peer yet
    ASSERT_EQ(rxetest::link_up(), 0);
    auto up = clk::now();
    uint32_t ev = 0;
    struct fi_eq_cm_entry ent {};
    ASSERT_EQ(eq_wait(c.eq, ev, ent, 10000), 0) << "the peer never learned of the close";
    EXPECT_EQ(ev, static_cast<uint32_t>(FI_SHUTDOWN));
    EXPECT_EQ(ent.fid, &c.ep->fid);
    std::printf("# peer's FI_SHUTDOWN %.0f ms after the link returned\n", ms_since(up));
    ASSERT_NO_FATAL_FAILURE(no_event_for(300));  // exactly one terminal event
}

// A connection request refused (its endpoint closed unaccepted) while the
// listener's port is down: destroying the request's rdma_cm id makes the
// kernel's CM send a REJ. Sent from a port that is down, the REJ is lost, and
// on rxe its failed send also leaves rxe0's QP1 (which carries all connection
// management) unable to receive or send again (docs/link-failures.md). evd
// keeps such an id until the port is active: the client gets FI_ECONNREFUSED
// once the link is back, and rxe0 accepts the next connection.
TEST_F(LinkRxe, RequestRefusedWhileDownIsAnsweredWhenTheLinkReturns) {
    struct fi_eq_cm_entry ent {};
    ASSERT_NO_FATAL_FAILURE(request_reaches_listener(ent));
    ASSERT_NO_FATAL_FAILURE(open_side(s, ent.info));
    ASSERT_EQ(rxetest::link_down(), 0);
    EXPECT_EQ(fi_accept(s.ep, nullptr, 0), -FI_ENETDOWN);  // its REP would be lost the same way
    ASSERT_EQ(fi_close(&s.ep->fid), 0);
    s.ep = nullptr;
    ASSERT_NO_FATAL_FAILURE(client_refused_once_the_link_returns());
    ASSERT_NO_FATAL_FAILURE(new_pair_connects());
}

// fi_reject while the listener's port is down: the REJ waits for the port
// (without the application's data), so the client gets FI_ECONNREFUSED once
// the link is back and rxe0 takes the next connection.
TEST_F(LinkRxe, RejectWhileDownIsSentWhenTheLinkReturns) {
    struct fi_eq_cm_entry ent {};
    ASSERT_NO_FATAL_FAILURE(request_reaches_listener(ent));
    ASSERT_EQ(rxetest::link_down(), 0);
    EXPECT_EQ(fi_reject(pep, ent.info->handle, "no", 2), 0);
    fi_freeinfo(ent.info);
    ASSERT_NO_FATAL_FAILURE(client_refused_once_the_link_returns());
    ASSERT_NO_FATAL_FAILURE(new_pair_connects());
}

// fi_connect while the client's port is down (veth1 lost its carrier with
// veth0) ends within seconds with one error record and sends no request. Here
// the carrier loss flushed rxe1's neighbour entries, so address resolution
// fails (FI_EADDRNOTAVAIL); where the address still resolves, evd refuses to
// send the request from a port that is down (FI_ENETDOWN). Either way rxe0
// and rxe1 take the next connection once the link is back.
TEST_F(LinkRxe, ConnectWhileDownEndsAtOnceWithAnError) {
    ASSERT_NO_FATAL_FAILURE(listen());
    ASSERT_NO_FATAL_FAILURE(open_client());  // fi_getinfo finds no address on a port that is down
    ASSERT_EQ(rxetest::link_down(), 0);
    ASSERT_EQ(fi_connect(c.ep, c.info->dest_addr, nullptr, 0), 0);
    struct fi_eq_err_entry err {};
    auto t0 = clk::now();
    ASSERT_TRUE(wait_error(c, err, 10000)) << "fi_connect while down did not end";
    EXPECT_TRUE(err.err == FI_EADDRNOTAVAIL || err.err == FI_ENETDOWN) << fi_strerror(err.err);
    std::printf("# fi_connect while down: %s after %.0f ms\n", fi_strerror(err.err), ms_since(t0));
    EXPECT_EQ(err.fid, &c.ep->fid);
    ASSERT_EQ(rxetest::link_up(), 0);
    ASSERT_NO_FATAL_FAILURE(new_pair_connects());
}

// fi_shutdown while the port is down ends this side at once (its FI_SHUTDOWN)
// and sends no DREQ then (it would be lost, and on rxe its failed send
// disables rxe0's connection management); fi_close sends it once the link is
// back, so the peer gets FI_SHUTDOWN, and rxe0 takes the next connection.
TEST_F(LinkRxe, ShutdownWhileDownEndsThisSideAtOnceAndThePeerLater) {
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_EQ(rxetest::link_down(), 0);
    ASSERT_EQ(fi_shutdown(s.ep, 0), 0);
    uint32_t ev = 0;
    struct fi_eq_cm_entry ent {};
    ASSERT_EQ(eq_wait(s.eq, ev, ent, 1000), 0);
    EXPECT_EQ(ev, static_cast<uint32_t>(FI_SHUTDOWN));
    EXPECT_EQ(ent.fid, &s.ep->fid);
    ASSERT_EQ(fi_close(&s.ep->fid), 0);
    s.ep = nullptr;
    ASSERT_EQ(rxetest::link_up(), 0);
    auto up = clk::now();
    ASSERT_EQ(eq_wait(c.eq, ev, ent, 10000), 0) << "the peer never learned of the shutdown";
    EXPECT_EQ(ev, static_cast<uint32_t>(FI_SHUTDOWN));
    EXPECT_EQ(ent.fid, &c.ep->fid);
    std::printf("# peer's FI_SHUTDOWN %.0f ms after the link returned\n", ms_since(up));
    ASSERT_NO_FATAL_FAILURE(new_pair_connects());
}

// Fail-fast: the port going down ends the connected endpoint on it at once,
// with its one terminal record, and flushes its posted work; nothing follows
// it, not even once the link is back.
// When the port returns, each connected endpoint's progress probe (probe.h)
// completes on a connection that works: no event, nothing in the CQs, and
// both directions still carry data after the probe's deadline has passed.
TEST_F(LinkRxe, ProgressProbeLeavesAWorkingConnectionAlone) {
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_EQ(rxetest::link_down(), 0);
    ASSERT_NO_FATAL_FAILURE(no_event_for(1000));
    ASSERT_EQ(rxetest::link_up(), 0);
    // FI_EVD_PROBE_TIMEOUT (2 s) plus rxe's ack timeout (about 2.1 s), and margin
    ASSERT_NO_FATAL_FAILURE(no_event_for(7000));
    struct fi_cq_data_entry e {};
    EXPECT_EQ(fi_cq_read(s.tx, &e, 1), -FI_EAGAIN) << "the probe's completion reached the CQ";
    EXPECT_EQ(fi_cq_read(c.tx, &e, 1), -FI_EAGAIN) << "the probe's completion reached the CQ";
    EXPECT_EQ(fi_cq_read(s.rx, &e, 1), -FI_EAGAIN);
    EXPECT_EQ(fi_cq_read(c.rx, &e, 1), -FI_EAGAIN);
    ASSERT_NO_FATAL_FAILURE(exchange(c, s, 5));
    ASSERT_NO_FATAL_FAILURE(exchange(s, c, 6));
    ASSERT_NO_FATAL_FAILURE(no_event_for(200));
}

// A connection that carries nothing after its port returns (here every
// packet rxe0 sends is dropped; on rxe 6.1 a QP whose requester stopped
// looks the same) ends with FI_ETIMEDOUT at its probe's deadline, long
// before the transport's own retries would run out (7 of about 2.1 s), and
// its posted work completes as flushed.
TEST_F(LinkRxe, ConnectionWithoutProgressAfterTheLinkReturnsEnds) {
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_NO_FATAL_FAILURE(post_server_receive());
    ASSERT_EQ(rxetest::link_down(), 0);
    ASSERT_EQ(blackhole_veth0(true), 0);
    ASSERT_EQ(rxetest::link_up(), 0);
    auto up = clk::now();
    struct fi_eq_err_entry err {};
    const bool ended = wait_error(s, err, 12000);
    const double ms = ms_since(up);
    blackhole_veth0(false);
    ASSERT_TRUE(ended) << "rxe0's endpoint never ended";
    EXPECT_EQ(err.fid, &s.ep->fid);
    EXPECT_EQ(err.err, FI_ETIMEDOUT) << fi_strerror(err.err);
    EXPECT_GT(ms, 1500.0) << "ended before its probe could have completed";
    EXPECT_LT(ms, 10000.0);
    std::printf("# rxe0's endpoint ended (FI_ETIMEDOUT) %.0f ms after the link returned\n", ms);
    ASSERT_NO_FATAL_FAILURE(expect_receive_flushed());
    struct fi_cq_data_entry e {};
    EXPECT_EQ(fi_cq_read(s.tx, &e, 1), -FI_EAGAIN) << "the probe reached the CQ";
}

TEST_F(LinkRxe, FailFastEndsTheEndpointOnThePortAtOnce) {
    fail_fast = true;
    ASSERT_NO_FATAL_FAILURE(connect());
    ASSERT_NO_FATAL_FAILURE(post_server_receive());
    auto down = clk::now();
    ASSERT_EQ(rxetest::link_down(), 0);
    struct fi_eq_err_entry err {};
    ASSERT_TRUE(wait_error(s, err, 5000)) << "no terminal record on rxe0's endpoint";
    double ms = ms_since(down);
    ASSERT_NO_FATAL_FAILURE(expect_port_terminal(s, err));
    std::printf("# fail-fast: rxe0's endpoint ended %.0f ms after link down\n", ms);
    ASSERT_NO_FATAL_FAILURE(expect_receive_flushed());
    // The peer's port goes down with the link too (veth1 loses its carrier,
    // rxe1 raises PORT_ERR): the same record, for its own endpoint.
    ASSERT_TRUE(wait_error(c, err, 5000)) << "no terminal record on rxe1's endpoint";
    ASSERT_NO_FATAL_FAILURE(expect_port_terminal(c, err));
    std::printf("# fail-fast: rxe1's endpoint ended %.0f ms after link down\n", ms_since(down));
    ASSERT_EQ(rxetest::link_up(), 0);
    ASSERT_NO_FATAL_FAILURE(no_event_for(300));
}

}  // namespace
