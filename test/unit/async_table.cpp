// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hardware async events: the translation table (one expectation per
// ibv_event_type, written out here independently of async.cpp), routing of
// synthetic events through async_dispatch to real evd EQs, the one-terminal-
// event rule, the FI_EVD_ASYNC_OPS extension, the man page staying in sync,
// and (AsyncThreads*) dispatch racing with unregistration and EQ readers.
#include "config.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "device/async.h"
#include "domain.h"
#include "eq/eq.h"
#include "fabric.h"
#include "internal_fabric.h"

// HAVE_DECL_IBV_EVENT_*: config.h (configure.ac's AC_CHECK_DECLS, always 0 or 1)

namespace {

using evd::async_out;

// What each event must become. kind: 'E' error always, 'N' notify when opted
// in (else nothing), 'A' notify always (armed), 'X' notify when opted in,
// else error. obj: q c s w p d. sentence: expected strerror for the synthetic
// objects below (qp_num 4660, cq handle 7, srq handle 9, wq_num 11, port 1,
// device "synth0").
struct expect {
    int type;
    const char* name;
    char obj;
    char kind;
    int err;
    bool terminal;
    const char* sentence;
};

const expect kExpect[] = {
    {IBV_EVENT_CQ_ERR, "IBV_EVENT_CQ_ERR", 'c', 'E', FI_EOVERRUN, false,
     "completion queue 7 of synth0 overran or failed; completions were lost (IBV_EVENT_CQ_ERR)"},
    {IBV_EVENT_QP_FATAL, "IBV_EVENT_QP_FATAL", 'q', 'E', FI_EIO, true,
     "queue pair 4660 of synth0 hit a fatal error and is in the error state (IBV_EVENT_QP_FATAL)"},
    {IBV_EVENT_QP_REQ_ERR, "IBV_EVENT_QP_REQ_ERR", 'q', 'E', FI_EREMOTEIO, true,
     "queue pair 4660 of synth0 received an invalid request from its peer and is in the error "
     "state (IBV_EVENT_QP_REQ_ERR)"},
    {IBV_EVENT_QP_ACCESS_ERR, "IBV_EVENT_QP_ACCESS_ERR", 'q', 'E', FI_EACCES, true,
     "queue pair 4660 of synth0 refused a request that violated memory access rights and is in "
     "the error state (IBV_EVENT_QP_ACCESS_ERR)"},
    {IBV_EVENT_COMM_EST, "IBV_EVENT_COMM_EST", 'q', 'N', 0, false,
     "queue pair 4660 of synth0 received its first message before the connection was reported "
     "established (IBV_EVENT_COMM_EST)"},
    {IBV_EVENT_SQ_DRAINED, "IBV_EVENT_SQ_DRAINED", 'q', 'X', FI_EOPBADSTATE, false,
     "the send queue of queue pair 4660 on synth0 has drained (IBV_EVENT_SQ_DRAINED)"},
    {IBV_EVENT_PATH_MIG, "IBV_EVENT_PATH_MIG", 'q', 'N', 0, false,
     "queue pair 4660 of synth0 migrated to its alternate path (IBV_EVENT_PATH_MIG)"},
    {IBV_EVENT_PATH_MIG_ERR, "IBV_EVENT_PATH_MIG_ERR", 'q', 'E', FI_EHOSTUNREACH, false,
     "queue pair 4660 of synth0 could not migrate to its alternate path (IBV_EVENT_PATH_MIG_ERR)"},
    {IBV_EVENT_DEVICE_FATAL, "IBV_EVENT_DEVICE_FATAL", 'd', 'E', FI_ENODEV, false,
     "device synth0 failed and can no longer be used (IBV_EVENT_DEVICE_FATAL)"},
    {IBV_EVENT_PORT_ACTIVE, "IBV_EVENT_PORT_ACTIVE", 'p', 'N', 0, false,
     "port 1 of synth0 is active (IBV_EVENT_PORT_ACTIVE)"},
    {IBV_EVENT_PORT_ERR, "IBV_EVENT_PORT_ERR", 'p', 'E', FI_ENETDOWN, false,
     "port 1 of synth0 is down (IBV_EVENT_PORT_ERR)"},
    {IBV_EVENT_LID_CHANGE, "IBV_EVENT_LID_CHANGE", 'p', 'N', 0, false,
     "the LID of port 1 of synth0 changed (IBV_EVENT_LID_CHANGE)"},
    {IBV_EVENT_PKEY_CHANGE, "IBV_EVENT_PKEY_CHANGE", 'p', 'N', 0, false,
     "the P_Key table of port 1 of synth0 changed (IBV_EVENT_PKEY_CHANGE)"},
    {IBV_EVENT_SM_CHANGE, "IBV_EVENT_SM_CHANGE", 'p', 'N', 0, false,
     "the subnet manager of port 1 of synth0 changed (IBV_EVENT_SM_CHANGE)"},
    {IBV_EVENT_SRQ_ERR, "IBV_EVENT_SRQ_ERR", 's', 'E', FI_EIO, false,
     "shared receive queue 9 of synth0 failed (IBV_EVENT_SRQ_ERR)"},
    {IBV_EVENT_SRQ_LIMIT_REACHED, "IBV_EVENT_SRQ_LIMIT_REACHED", 's', 'A', 0, false,
     "shared receive queue 9 of synth0 fell below its armed limit (IBV_EVENT_SRQ_LIMIT_REACHED)"},
    {IBV_EVENT_QP_LAST_WQE_REACHED, "IBV_EVENT_QP_LAST_WQE_REACHED", 'q', 'N', 0, false,
     "queue pair 4660 of synth0 will take no more receives from its shared receive queue "
     "(IBV_EVENT_QP_LAST_WQE_REACHED)"},
    {IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER", 'p', 'N', 0, false,
     "the subnet manager asks clients of port 1 of synth0 to register again "
     "(IBV_EVENT_CLIENT_REREGISTER)"},
#if HAVE_DECL_IBV_EVENT_GID_CHANGE
    {IBV_EVENT_GID_CHANGE, "IBV_EVENT_GID_CHANGE", 'p', 'N', 0, false,
     "the GID table of port 1 of synth0 changed (IBV_EVENT_GID_CHANGE)"},
#endif
#if HAVE_DECL_IBV_EVENT_WQ_FATAL
    {IBV_EVENT_WQ_FATAL, "IBV_EVENT_WQ_FATAL", 'w', 'E', FI_EIO, false,
     "work queue 11 of synth0 hit a fatal error (IBV_EVENT_WQ_FATAL)"},
#endif
};

uint32_t obj_code(char o) {
    switch (o) {
        case 'q': return FI_EVD_ASYNC_QP;
        case 'c': return FI_EVD_ASYNC_CQ;
        case 's': return FI_EVD_ASYNC_SRQ;
        case 'w': return FI_EVD_ASYNC_WQ;
        case 'p': return FI_EVD_ASYNC_PORT;
        default: return FI_EVD_ASYNC_DEVICE;
    }
}

// Synthetic rdma-core objects: only the identity fields evd reads are set.
struct synth {
    struct ibv_qp qp {};
    struct ibv_cq cq {};
    struct ibv_srq srq {};
    struct ibv_wq wq {};
    synth() {
        qp.qp_num = 4660;
        cq.handle = 7;
        srq.handle = 9;
        wq.wq_num = 11;
    }
    struct ibv_async_event event(int type, char obj) {
        struct ibv_async_event ev {};
        ev.event_type = static_cast<enum ibv_event_type>(type);
        switch (obj) {
            case 'q': ev.element.qp = &qp; break;
            case 'c': ev.element.cq = &cq; break;
            case 's': ev.element.srq = &srq; break;
            case 'w': ev.element.wq = &wq; break;
            case 'p': ev.element.port_num = 1; break;
            default: break;
        }
        return ev;
    }
};

// ---------------------------------------------------------------- the table
TEST(AsyncTable, OneRowPerEventTypeOfVerbsH) {
    auto t = evd::async_table();
    // The last enumerator verbs.h has decides the row count.
    int last = IBV_EVENT_CLIENT_REREGISTER;
#if HAVE_DECL_IBV_EVENT_GID_CHANGE
    last = IBV_EVENT_GID_CHANGE;
#endif
#if HAVE_DECL_IBV_EVENT_WQ_FATAL
    last = IBV_EVENT_WQ_FATAL;
#endif
    ASSERT_EQ(t.size(), static_cast<size_t>(last + 1));
    ASSERT_EQ(t.size(), std::size(kExpect));
    for (int type = 0; type <= last; ++type) {
        const evd::async_row* r = evd::async_row_for(type);
        ASSERT_NE(r, nullptr) << type;
        EXPECT_EQ(r->type, type);
        EXPECT_STREQ(r->name, kExpect[type].name);
        EXPECT_NE(r->why, nullptr);
    }
    EXPECT_EQ(evd::async_row_for(-1), nullptr);
    EXPECT_EQ(evd::async_row_for(last + 1), nullptr);
}

class AsyncRow : public ::testing::TestWithParam<expect> {};

TEST_P(AsyncRow, TranslatesAsDocumented) {
    const expect& x = GetParam();
    synth s;
    struct fid target {};
    int ctx = 0;
    for (bool wanted : {false, true}) {
        SCOPED_TRACE(std::string(x.name) + (wanted ? " opted in" : " not opted in"));
        evd::async_input in;
        in.device = "synth0";
        in.fid = &target;
        in.context = &ctx;
        in.notify_wanted = wanted;
        in.terminal = x.terminal;
        in.timestamp_ns = 123456789;
        in.seq = 42;
        auto ev = s.event(x.type, x.obj);
        evd::async_record r = evd::async_translate(ev, in);
        ASSERT_NE(r.row, nullptr);
        EXPECT_EQ(r.row->act == evd::async_act::terminal, x.terminal);

        async_out want = async_out::none;
        switch (x.kind) {
            case 'E': want = async_out::error; break;
            case 'N': want = wanted ? async_out::notify : async_out::none; break;
            case 'A': want = async_out::notify; break;
            case 'X': want = wanted ? async_out::notify : async_out::error; break;
        }
        ASSERT_EQ(r.out, want);

        // err_data is filled whatever the record kind.
        const auto& d = r.data;
        EXPECT_EQ(d.magic, FI_EVD_ASYNC_MAGIC);
        EXPECT_EQ(d.version, FI_EVD_ASYNC_VERSION);
        EXPECT_EQ(d.size, sizeof(struct fi_evd_async_err));
        EXPECT_EQ(d.event_type, x.type);
        EXPECT_EQ(d.object, obj_code(x.obj));
        EXPECT_STREQ(d.device, "synth0");
        EXPECT_EQ(d.port_num, x.obj == 'p' ? 1u : 0u);
        EXPECT_EQ(d.qp_num, x.obj == 'q' ? 4660u : 0u);
        EXPECT_EQ(d.cq_handle, x.obj == 'c' ? 7u : 0u);
        EXPECT_EQ(d.srq_handle, x.obj == 's' ? 9u : 0u);
        EXPECT_EQ(d.wq_num, x.obj == 'w' ? 11u : 0u);
        EXPECT_EQ(d.terminal, x.terminal ? 1u : 0u);
        EXPECT_EQ(d.fid, &target);
        EXPECT_EQ(d.timestamp_ns, 123456789u);
        EXPECT_EQ(d.seq, 42u);

        if (want == async_out::error) {
            EXPECT_EQ(r.err.fid, &target);
            EXPECT_EQ(r.err.context, &ctx);
            EXPECT_EQ(r.err.err, x.err);
            EXPECT_GT(r.err.err, 0);
            EXPECT_EQ(r.err.prov_errno, x.type);
        }
        if (want == async_out::notify) {
            EXPECT_EQ(r.notify.fid, &target);
            EXPECT_EQ(r.notify.context, &ctx);
            uint64_t data = r.notify.data;
            EXPECT_TRUE(FI_EVD_NOTIFY_IS_ASYNC(data));
            EXPECT_EQ(FI_EVD_NOTIFY_EVENT(data), x.type);
            EXPECT_EQ(FI_EVD_NOTIFY_PORT(data), x.obj == 'p' ? 1u : 0u);
            uint32_t num = x.obj == 'q' ? 4660 : x.obj == 's' ? 9 : x.obj == 'w' ? 11 : x.obj == 'c' ? 7 : 0;
            EXPECT_EQ(FI_EVD_NOTIFY_NUM(data), num);
        }

        char buf[512];
        const char* msg = evd::async_strerror(x.type, &r.data, buf, sizeof buf);
        ASSERT_EQ(msg, buf);
        EXPECT_STREQ(msg, x.sentence);
        // Truncation keeps a terminated prefix.
        char small[12];
        ASSERT_EQ(evd::async_strerror(x.type, &r.data, small, sizeof small), small);
        EXPECT_EQ(std::strlen(small), sizeof small - 1);
        EXPECT_EQ(std::string(x.sentence).rfind(small, 0), 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(AsyncEveryEventType, AsyncRow, ::testing::ValuesIn(kExpect),
                         [](const auto& info) { return std::string(info.param.name + 10); });

TEST(AsyncTable, StrerrorRejectsForeignErrData) {
    synth s;
    evd::async_input in;
    in.device = "synth0";
    auto r = evd::async_translate(s.event(IBV_EVENT_PORT_ERR, 'p'), in);
    char buf[128];
    EXPECT_EQ(evd::async_strerror(IBV_EVENT_PORT_ERR, nullptr, buf, sizeof buf), nullptr);
    // prov_errno must match the record's event.
    EXPECT_EQ(evd::async_strerror(IBV_EVENT_PORT_ACTIVE, &r.data, buf, sizeof buf), nullptr);
    auto bad = r.data;
    bad.magic ^= 1;
    EXPECT_EQ(evd::async_strerror(IBV_EVENT_PORT_ERR, &bad, buf, sizeof buf), nullptr);
    bad = r.data;
    bad.version = 99;
    EXPECT_EQ(evd::async_strerror(IBV_EVENT_PORT_ERR, &bad, buf, sizeof buf), nullptr);
    bad = r.data;
    bad.size = 8;
    EXPECT_EQ(evd::async_strerror(IBV_EVENT_PORT_ERR, &bad, buf, sizeof buf), nullptr);
    // An unterminated device name from the application is not overread.
    bad = r.data;
    std::memset(bad.device, 'x', sizeof bad.device);
    ASSERT_EQ(evd::async_strerror(IBV_EVENT_PORT_ERR, &bad, buf, sizeof buf), buf);
    EXPECT_EQ(std::string(buf).find("port 1 of xxxxxxxx"), 0u);
    // No buffer: the static sentence.
    EXPECT_NE(evd::async_strerror(IBV_EVENT_PORT_ERR, &r.data, nullptr, 0), nullptr);
    // Unknown event types translate to nothing.
    struct ibv_async_event ev {};
    const int future = 1000;  // a type newer than verbs.h: stored as the kernel would
    std::memcpy(&ev.event_type, &future, sizeof future);
    auto u = evd::async_translate(ev, in);
    EXPECT_EQ(u.row, nullptr);
    EXPECT_EQ(u.out, async_out::none);
}

// Every row is in fi_evd(7) with its err and record kind on its line.
TEST(AsyncTable, ManPageListsEveryRow) {
    std::ifstream f(std::string(EVD_SRCDIR) + "/man/parts/async.7");
    ASSERT_TRUE(f.good()) << "man/parts/async.7 missing";
    std::vector<std::string> lines;
    for (std::string l; std::getline(f, l);) lines.push_back(l);
    auto fi_name = [](int err) -> std::string {
        switch (err) {
            case FI_EOVERRUN: return "FI_EOVERRUN";
            case FI_EIO: return "FI_EIO";
            case FI_EREMOTEIO: return "FI_EREMOTEIO";
            case FI_EACCES: return "FI_EACCES";
            case FI_EOPBADSTATE: return "FI_EOPBADSTATE";
            case FI_EHOSTUNREACH: return "FI_EHOSTUNREACH";
            case FI_ENODEV: return "FI_ENODEV";
            case FI_ENETDOWN: return "FI_ENETDOWN";
            default: return "-";
        }
    };
    for (const auto& row : evd::async_table()) {
        std::string name = std::string(row.name + 10);  // without IBV_EVENT_
        bool found = false;
        for (const auto& l : lines) {
            // Table rows start with the event name followed by a tab.
            if (l.rfind(name + "\t", 0) != 0) continue;
            found = true;
            EXPECT_NE(l.find(fi_name(row.err)), std::string::npos) << l;
        }
        EXPECT_TRUE(found) << row.name << " is not in the fi_evd(7) async table";
    }
}

// ---------------------------------------------------------------- dispatch
// A real evd fabric + EQs, a synthetic device context and domains.
struct owner_state {
    std::atomic<bool> terminal{false};
    std::atomic<bool> closed{false};
    std::atomic<int> consequences{0};
    std::atomic<int> comm_est{0};
    std::atomic<int> after_close{0};
    evd::eq* q = nullptr;
};

evd::eq* route_owner(void* o) { return static_cast<owner_state*>(o)->q; }
bool claim_owner(void* o) { return !static_cast<owner_state*>(o)->terminal.exchange(true); }
void consequence_owner(void* o, const struct ibv_async_event& ev) {
    auto* s = static_cast<owner_state*>(o);
    if (s->closed.load()) s->after_close.fetch_add(1);
    s->consequences.fetch_add(1);
    if (ev.event_type == IBV_EVENT_COMM_EST) s->comm_est.fetch_add(1);
}

class AsyncDispatch : public evdtest::InternalFabric {
  protected:
    struct fid_eq* dom_eq = nullptr;
    struct fid_eq* ep_eq = nullptr;
    evd::devctx dev;
    evd::domain dom;
    int dom_ctx = 0;

    size_t eq_size = 64;
    struct fid_eq* open_eq() { return InternalFabric::open_eq(eq_size, FI_WAIT_UNSPEC, 0); }
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(InternalFabric::SetUp());
        dom_eq = open_eq();
        ep_eq = open_eq();
        ASSERT_NE(dom_eq, nullptr);
        ASSERT_NE(ep_eq, nullptr);
        dev.name = "synth0";
        dom.fid.fid.fclass = FI_CLASS_DOMAIN;
        dom.fid.fid.context = &dom_ctx;
        dom.dev = &dev;
        dom.port_num = 1;
        dom.eq_bound.store(evd::eq_from_fid(dom_eq));
        dev.domains.push_back(&dom);
    }
    void TearDown() override {
        if (ep_eq) fi_close(&ep_eq->fid);
        if (dom_eq) fi_close(&dom_eq->fid);
        InternalFabric::TearDown();
    }
    void add(std::unordered_map<const void*, evd::async_target> evd::devctx::*map, const void* key,
             struct fid* f, owner_state* s, bool terminal_hook = true) {
        evd::async_target t;
        t.fid = f;
        t.context = f->context;
        t.route = route_owner;
        t.owner = s;
        t.consequence = consequence_owner;
        t.claim_terminal = terminal_hook ? claim_owner : nullptr;
        evd::lock_guard lk(dev.reg_mu);
        (dev.*map)[key] = t;
    }
    void remove(std::unordered_map<const void*, evd::async_target> evd::devctx::*map,
                const void* key) {
        evd::lock_guard lk(dev.reg_mu);
        (dev.*map).erase(key);
    }
    // Reads one error record; fails the test when there is none.
    bool read_err(struct fid_eq* q, struct fi_eq_err_entry& e, struct fi_evd_async_err& d) {
        struct fi_eq_entry ent;
        uint32_t event;
        ssize_t r = fi_eq_read(q, &event, &ent, sizeof ent, 0);
        if (r != -FI_EAVAIL) {
            ADD_FAILURE() << "expected an error record, fi_eq_read said " << r;
            return false;
        }
        e = {};
        r = fi_eq_readerr(q, &e, 0);
        if (r != sizeof e) {
            ADD_FAILURE() << "fi_eq_readerr said " << r;
            return false;
        }
        if (e.err_data_size != sizeof d || !e.err_data) {
            ADD_FAILURE() << "err_data_size " << e.err_data_size;
            return false;
        }
        std::memcpy(&d, e.err_data, sizeof d);
        return true;
    }
    bool empty(struct fid_eq* q) {
        struct fi_eq_entry ent;
        uint32_t event;
        return fi_eq_read(q, &event, &ent, sizeof ent, FI_PEEK) == -FI_EAGAIN;
    }
    void dispatch(int type, const void* obj) {
        struct ibv_async_event ev {};
        ev.event_type = static_cast<enum ibv_event_type>(type);
        ev.element.qp = static_cast<struct ibv_qp*>(const_cast<void*>(obj));
        evd::async_dispatch(&dev, ev);
    }
    void dispatch_port(int type, int port) {
        struct ibv_async_event ev {};
        ev.event_type = static_cast<enum ibv_event_type>(type);
        ev.element.port_num = port;
        evd::async_dispatch(&dev, ev);
    }
};

TEST_F(AsyncDispatch, PortErrToDomainEqWithSentenceAndTimestamp) {
    uint64_t before = evd::async_now_ns();
    dispatch_port(IBV_EVENT_PORT_ERR, 1);
    uint64_t after = evd::async_now_ns();
    struct fi_eq_err_entry e;
    struct fi_evd_async_err d;
    ASSERT_TRUE(read_err(dom_eq, e, d));
    EXPECT_EQ(e.fid, &dom.fid.fid);
    EXPECT_EQ(e.context, &dom_ctx);
    EXPECT_EQ(e.err, FI_ENETDOWN);
    EXPECT_EQ(e.prov_errno, IBV_EVENT_PORT_ERR);
    EXPECT_EQ(d.port_num, 1u);
    EXPECT_STREQ(d.device, "synth0");
    EXPECT_GE(d.timestamp_ns, before);
    EXPECT_LE(d.timestamp_ns, after);
    EXPECT_EQ(d.seq, 1u);
    char buf[256];
    const char* s = fi_eq_strerror(dom_eq, e.prov_errno, e.err_data, buf, sizeof buf);
    ASSERT_NE(s, nullptr);
    EXPECT_STREQ(s, "port 1 of synth0 is down (IBV_EVENT_PORT_ERR)");
    EXPECT_TRUE(empty(dom_eq));
    EXPECT_EQ(dom.port_state.load(), IBV_PORT_DOWN);
    EXPECT_EQ(dev.delivered.load(), 1u);
    EXPECT_EQ(dev.undeliverable.load(), 0u);
}

TEST_F(AsyncDispatch, NotificationsAreOptIn) {
    // Not opted in: PORT_ACTIVE changes the snapshot but posts nothing.
    dispatch_port(IBV_EVENT_PORT_ERR, 1);
    struct fi_eq_err_entry e;
    struct fi_evd_async_err d;
    ASSERT_TRUE(read_err(dom_eq, e, d));
    dispatch_port(IBV_EVENT_PORT_ACTIVE, 1);
    EXPECT_TRUE(empty(dom_eq));
    EXPECT_EQ(dom.port_state.load(), IBV_PORT_ACTIVE);
    EXPECT_EQ(dev.async_suppressed.load(), 1u);
    EXPECT_EQ(dev.undeliverable.load(), 0u);

    // Opted in at fi_domain_bind: an FI_NOTIFY record with the documented data.
    dom.eq_flags = FI_EVD_NOTIFY_ASYNC;
    dispatch_port(IBV_EVENT_PORT_ACTIVE, 1);
    struct fi_eq_entry ent {};
    uint32_t event = 0;
    ASSERT_EQ(fi_eq_read(dom_eq, &event, &ent, sizeof ent, 0), (ssize_t)sizeof ent);
    EXPECT_EQ(event, (uint32_t)FI_NOTIFY);
    EXPECT_EQ(ent.fid, &dom.fid.fid);
    EXPECT_EQ(ent.context, &dom_ctx);
    EXPECT_TRUE(FI_EVD_NOTIFY_IS_ASYNC(ent.data));
    EXPECT_EQ(FI_EVD_NOTIFY_EVENT(ent.data), IBV_EVENT_PORT_ACTIVE);
    EXPECT_EQ(FI_EVD_NOTIFY_PORT(ent.data), 1u);

    // The snapshot through the extension ops.
    struct fi_evd_async_ops* ops = nullptr;
    ASSERT_EQ(evd::async_domain_ops_open(&dom.fid.fid, FI_EVD_ASYNC_OPS, 0,
                                         reinterpret_cast<void**>(&ops), nullptr),
              0);
    ASSERT_NE(ops, nullptr);
    EXPECT_EQ(ops->size, sizeof(struct fi_evd_async_ops));
    struct fi_evd_port_state st {};
    ASSERT_EQ(ops->port_state(&dom.fid, &st), 0);
    EXPECT_STREQ(st.device, "synth0");
    EXPECT_EQ(st.port_num, 1u);
    EXPECT_EQ(st.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(st.last_event, IBV_EVENT_PORT_ACTIVE);
    EXPECT_EQ(st.changes, 3u);
    EXPECT_GT(st.last_change_ns, 0u);
    struct fi_evd_async_counters c {};
    ASSERT_EQ(ops->counters(&dom.fid, &c), 0);
    EXPECT_EQ(c.events, 3u);
    EXPECT_EQ(c.delivered, 2u);
    EXPECT_EQ(c.suppressed, 1u);
    EXPECT_EQ(c.undeliverable, 0u);
    EXPECT_EQ(ops->port_state(&dom.fid, nullptr), -FI_EINVAL);
    EXPECT_EQ(ops->srq_arm(&dom.fid, nullptr, 4), -FI_EINVAL);
    EXPECT_EQ(evd::async_domain_ops_open(&dom.fid.fid, "other_ops", 0,
                                         reinterpret_cast<void**>(&ops), nullptr),
              -FI_ENOSYS);
    EXPECT_EQ(evd::async_domain_ops_open(&dom_eq->fid, FI_EVD_ASYNC_OPS, 0,
                                         reinterpret_cast<void**>(&ops), nullptr),
              -FI_EINVAL);
}

TEST_F(AsyncDispatch, NowhereToGoIsCountedNotDropped) {
    synth s;
    dispatch(IBV_EVENT_QP_FATAL, &s.qp);     // no endpoint owns it
    dispatch_port(IBV_EVENT_PORT_ERR, 2);    // no domain on port 2
    dom.eq_bound.store(nullptr);
    dispatch_port(IBV_EVENT_PORT_ERR, 1);    // the domain has no EQ
    struct ibv_async_event ev {};
    const int future = 77;
    std::memcpy(&ev.event_type, &future, sizeof future);
    evd::async_dispatch(&dev, ev);           // unknown type
    EXPECT_EQ(dev.undeliverable.load(), 4u);
    EXPECT_EQ(dev.delivered.load(), 0u);
    EXPECT_TRUE(empty(dom_eq));
}

TEST_F(AsyncDispatch, QpEventsGoToTheEndpointEqOnceTerminal) {
    synth s;
    struct fid ep_fid {};
    int ep_ctx = 0;
    ep_fid.fclass = FI_CLASS_EP;
    ep_fid.context = &ep_ctx;
    owner_state st;
    st.q = evd::eq_from_fid(ep_eq);
    add(&evd::devctx::qps, &s.qp, &ep_fid, &st);

    dispatch(IBV_EVENT_QP_ACCESS_ERR, &s.qp);
    struct fi_eq_err_entry e;
    struct fi_evd_async_err d;
    ASSERT_TRUE(read_err(ep_eq, e, d));
    EXPECT_EQ(e.fid, &ep_fid);
    EXPECT_EQ(e.context, &ep_ctx);
    EXPECT_EQ(e.err, FI_EACCES);
    EXPECT_EQ(e.prov_errno, IBV_EVENT_QP_ACCESS_ERR);
    EXPECT_EQ(d.qp_num, 4660u);
    EXPECT_EQ(d.terminal, 1u);
    EXPECT_TRUE(st.terminal.load());
    EXPECT_EQ(st.consequences.load(), 1);

    // A second fatal event: the endpoint already had its terminal event.
    dispatch(IBV_EVENT_QP_FATAL, &s.qp);
    EXPECT_TRUE(empty(ep_eq));
    EXPECT_EQ(st.consequences.load(), 2);
    // Nothing went to the domain's EQ.
    EXPECT_TRUE(empty(dom_eq));
    EXPECT_EQ(dev.undeliverable.load(), 0u);

    // COMM_EST: the consequence (rdma_notify) runs; no record without opt-in.
    dispatch(IBV_EVENT_COMM_EST, &s.qp);
    EXPECT_EQ(st.comm_est.load(), 1);
    EXPECT_TRUE(empty(ep_eq));

    // Non-terminal QP error after the terminal one is still reported.
    dispatch(IBV_EVENT_PATH_MIG_ERR, &s.qp);
    ASSERT_TRUE(read_err(ep_eq, e, d));
    EXPECT_EQ(e.err, FI_EHOSTUNREACH);
    EXPECT_EQ(d.terminal, 0u);

    // After unregistration (fi_close of the endpoint), nothing touches it.
    remove(&evd::devctx::qps, &s.qp);
    st.closed = true;
    dispatch(IBV_EVENT_QP_FATAL, &s.qp);
    EXPECT_EQ(st.after_close.load(), 0);
    EXPECT_EQ(dev.undeliverable.load(), 1u);
}

TEST_F(AsyncDispatch, EndpointBindingFlagsOptIn) {
    synth s;
    struct fid ep_fid {};
    owner_state st;
    st.q = evd::eq_from_fid(ep_eq);
    add(&evd::devctx::qps, &s.qp, &ep_fid, &st);
    {
        evd::lock_guard lk(dev.reg_mu);
        dev.qps[&s.qp].eq_flags = FI_EVD_NOTIFY_ASYNC;
    }
    dispatch(IBV_EVENT_COMM_EST, &s.qp);
    struct fi_eq_entry ent {};
    uint32_t event = 0;
    ASSERT_EQ(fi_eq_read(ep_eq, &event, &ent, sizeof ent, 0), (ssize_t)sizeof ent);
    EXPECT_EQ(event, (uint32_t)FI_NOTIFY);
    EXPECT_EQ(ent.fid, &ep_fid);
    EXPECT_EQ(FI_EVD_NOTIFY_EVENT(ent.data), IBV_EVENT_COMM_EST);
    EXPECT_EQ(FI_EVD_NOTIFY_NUM(ent.data), 4660u);
    EXPECT_EQ(st.comm_est.load(), 1);
    // SQ_DRAINED requested: a notification, not an error.
    dispatch(IBV_EVENT_SQ_DRAINED, &s.qp);
    ASSERT_EQ(fi_eq_read(ep_eq, &event, &ent, sizeof ent, 0), (ssize_t)sizeof ent);
    EXPECT_EQ(FI_EVD_NOTIFY_EVENT(ent.data), IBV_EVENT_SQ_DRAINED);
}

TEST_F(AsyncDispatch, CqAndSrqEventsGoToTheirFid) {
    synth s;
    struct fid cq_fid {}, srx_fid {};
    int cq_ctx = 0, srx_ctx = 0;
    cq_fid.context = &cq_ctx;
    srx_fid.context = &srx_ctx;
    owner_state cq_st, srx_st;
    cq_st.q = srx_st.q = evd::eq_from_fid(dom_eq);
    add(&evd::devctx::cqs, &s.cq, &cq_fid, &cq_st, false);
    add(&evd::devctx::srqs, &s.srq, &srx_fid, &srx_st, false);

    dispatch(IBV_EVENT_CQ_ERR, &s.cq);
    struct fi_eq_err_entry e;
    struct fi_evd_async_err d;
    ASSERT_TRUE(read_err(dom_eq, e, d));
    EXPECT_EQ(e.fid, &cq_fid);
    EXPECT_EQ(e.context, &cq_ctx);
    EXPECT_EQ(e.err, FI_EOVERRUN);
    EXPECT_EQ(d.cq_handle, 7u);

    // SRQ limit: delivered without the opt-in flag (arming is the request).
    dispatch(IBV_EVENT_SRQ_LIMIT_REACHED, &s.srq);
    struct fi_eq_entry ent {};
    uint32_t event = 0;
    ASSERT_EQ(fi_eq_read(dom_eq, &event, &ent, sizeof ent, 0), (ssize_t)sizeof ent);
    EXPECT_EQ(event, (uint32_t)FI_NOTIFY);
    EXPECT_EQ(ent.fid, &srx_fid);
    EXPECT_EQ(ent.context, &srx_ctx);
    EXPECT_EQ(FI_EVD_NOTIFY_EVENT(ent.data), IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(FI_EVD_NOTIFY_NUM(ent.data), 9u);

    dispatch(IBV_EVENT_SRQ_ERR, &s.srq);
    ASSERT_TRUE(read_err(dom_eq, e, d));
    EXPECT_EQ(e.fid, &srx_fid);
    EXPECT_EQ(e.err, FI_EIO);
    EXPECT_EQ(d.srq_handle, 9u);
}

TEST_F(AsyncDispatch, DeviceFatalEndsEveryEndpointExactlyOnce) {
    // A second domain on another port of the same device, with its own EQ.
    evd::domain dom2;
    int dom2_ctx = 0;
    dom2.fid.fid.fclass = FI_CLASS_DOMAIN;
    dom2.fid.fid.context = &dom2_ctx;
    dom2.dev = &dev;
    dom2.port_num = 2;
    dom2.eq_bound.store(evd::eq_from_fid(ep_eq));
    dev.domains.push_back(&dom2);

    synth s[3];
    struct fid f[3] {};
    owner_state st[3];
    for (int i = 0; i < 3; ++i) {
        s[i].qp.qp_num = 100 + i;
        st[i].q = evd::eq_from_fid(ep_eq);
        add(&evd::devctx::qps, &s[i].qp, &f[i], &st[i]);
    }
    st[2].terminal = true;  // already had FI_SHUTDOWN

    dispatch(IBV_EVENT_DEVICE_FATAL, nullptr);

    struct fi_eq_err_entry e;
    struct fi_evd_async_err d;
    ASSERT_TRUE(read_err(dom_eq, e, d));
    EXPECT_EQ(e.fid, &dom.fid.fid);
    EXPECT_EQ(e.err, FI_ENODEV);
    EXPECT_EQ(e.prov_errno, IBV_EVENT_DEVICE_FATAL);
    EXPECT_TRUE(empty(dom_eq));

    // ep_eq: dom2's record and one terminal record for endpoints 0 and 1.
    int seen_dom2 = 0, seen_ep[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(read_err(ep_eq, e, d));
        EXPECT_EQ(e.err, FI_ENODEV);
        if (e.fid == &dom2.fid.fid) {
            ++seen_dom2;
            continue;
        }
        for (int k = 0; k < 3; ++k)
            if (e.fid == &f[k]) {
                ++seen_ep[k];
                EXPECT_EQ(d.qp_num, 100u + k);
                EXPECT_EQ(d.terminal, 1u);
            }
    }
    EXPECT_TRUE(empty(ep_eq));
    EXPECT_EQ(seen_dom2, 1);
    EXPECT_EQ(seen_ep[0], 1);
    EXPECT_EQ(seen_ep[1], 1);
    EXPECT_EQ(seen_ep[2], 0);
    for (auto& x : st) EXPECT_EQ(x.consequences.load(), 1);  // every ep disabled
    dev.domains.pop_back();
}

// ---------------------------------------------------------------- threads
// Async events arrive while endpoints are closed (unregistered) and EQs are
// read from several threads. Checks: no consequence after unregistration,
// every posted record is read exactly once, one terminal record per endpoint
// incarnation at most.
class AsyncThreads : public AsyncDispatch {
  protected:
    AsyncThreads() { eq_size = 8192; }
};

TEST_F(AsyncThreads, DispatchWhileClosingAndReading) {
    constexpr int kEps = 16;
    constexpr int kRounds = 300;
    struct slot {
        synth s;
        struct fid f {};
        owner_state* st = nullptr;
        std::mutex mu;  // the "application" closing/reopening this endpoint
    };
    std::vector<slot> slots(kEps);
    std::vector<std::unique_ptr<owner_state>> graveyard;  // kept alive to detect use-after-close
    std::mutex gy_mu;
    for (int i = 0; i < kEps; ++i) {
        slots[i].s.qp.qp_num = 1000 + i;
        slots[i].st = new owner_state;
        slots[i].st->q = evd::eq_from_fid(ep_eq);
        add(&evd::devctx::qps, &slots[i].s.qp, &slots[i].f, slots[i].st);
    }
    dom.eq_flags = FI_EVD_NOTIFY_ASYNC;
    std::atomic<bool> done{false};
    std::atomic<uint64_t> read_records{0};

    auto reader = [&](struct fid_eq* q) {
        struct fi_eq_entry ent;
        struct fi_eq_err_entry err;
        uint32_t event;
        auto drain = [&] {
            for (;;) {
                ssize_t r = fi_eq_read(q, &event, &ent, sizeof ent, 0);
                if (r == (ssize_t)sizeof ent) {
                    read_records.fetch_add(1);
                } else if (r == -FI_EAVAIL) {
                    err = {};
                    if (fi_eq_readerr(q, &err, 0) == (ssize_t)sizeof err) read_records.fetch_add(1);
                } else {
                    break;
                }
            }
        };
        while (!done.load()) drain();
        drain();
    };
    auto dispatcher = [&](unsigned seed) {
        std::mt19937 rng(seed);
        static const int types[] = {IBV_EVENT_QP_FATAL, IBV_EVENT_COMM_EST, IBV_EVENT_PATH_MIG_ERR,
                                    IBV_EVENT_QP_ACCESS_ERR};
        for (int i = 0; i < kRounds * 4; ++i) {
            int k = rng() % kEps;
            if (rng() % 8 == 0)
                dispatch_port(rng() % 2 ? IBV_EVENT_PORT_ERR : IBV_EVENT_PORT_ACTIVE, 1);
            else
                dispatch(types[rng() % 4], &slots[k].s.qp);
        }
    };
    auto closer = [&](unsigned seed) {
        std::mt19937 rng(seed);
        for (int i = 0; i < kRounds; ++i) {
            slot& sl = slots[rng() % kEps];
            std::lock_guard<std::mutex> lk(sl.mu);
            // fi_close: unregister, then the object is dead.
            remove(&evd::devctx::qps, &sl.s.qp);
            sl.st->closed = true;
            {
                std::lock_guard<std::mutex> g(gy_mu);
                graveyard.emplace_back(sl.st);
            }
            // fi_endpoint + fi_enable again: a new incarnation.
            sl.st = new owner_state;
            sl.st->q = evd::eq_from_fid(ep_eq);
            add(&evd::devctx::qps, &sl.s.qp, &sl.f, sl.st);
        }
    };
    std::thread r1(reader, ep_eq), r2(reader, ep_eq), r3(reader, dom_eq);
    std::thread d1(dispatcher, 1), d2(dispatcher, 2);
    std::thread c1(closer, 3);
    d1.join();
    d2.join();
    c1.join();
    done = true;
    r1.join();
    r2.join();
    r3.join();

    uint64_t after_close = 0;
    for (auto& g : graveyard) after_close += g->after_close.load();
    for (auto& sl : slots) {
        after_close += sl.st->after_close.load();
        graveyard.emplace_back(sl.st);
    }
    EXPECT_EQ(after_close, 0u);
    // Every record posted was read exactly once (the EQs are large enough not
    // to overrun: at most 2 * 4 * kRounds records).
    EXPECT_EQ(read_records.load(), dev.delivered.load());
    EXPECT_EQ(dev.async_events.load(), 2u * 4 * kRounds);
    // Each event was posted, counted undeliverable (endpoint mid-close),
    // suppressed, or swallowed by the one-terminal rule: never more records
    // than events.
    EXPECT_LE(dev.delivered.load() + dev.undeliverable.load() + dev.async_suppressed.load(),
              dev.async_events.load());
    EXPECT_GT(dev.delivered.load(), 0u);
}

}  // namespace
