// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The life of a resumable connection (resume/session.h): each path of
// docs/resume.md's "States of a connection" step by step, then thousands
// of random event sequences checked against the rules every path keeps.
#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <random>

#include "resume/session.h"

namespace resume_session_test {

using evd::resume::attempt_outcome;
using evd::resume::give_up;
using evd::resume::session;
using evd::resume::session_state;
using evd::resume::session_step;
using evd::resume::side;

constexpr session::config kCfg{30000, 100, 2000};

TEST(ResumeSession, TheActiveSideRidesAFlapAndTriesAgainWhenThePortReturns) {
    session s(side::active, kCfg);
    session_step st = s.failed(1000, true);
    EXPECT_TRUE(st.qp_to_error);
    EXPECT_EQ(s.state(), session_state::draining);
    EXPECT_EQ(s.deadline(), 31000u);
    st = s.drained(1010);
    EXPECT_TRUE(st.connect) << "the outage may be over already: one try at once";
    EXPECT_EQ(s.generation(), 1u);
    EXPECT_FALSE(s.attempt_failed(1020, attempt_outcome::unreachable).end);
    EXPECT_EQ(s.state(), session_state::waiting);
    EXPECT_EQ(s.due(), 1120u) << "the first backoff";
    EXPECT_FALSE(s.tick(1050).connect) << "not due yet";
    st = s.port_active(1060);
    EXPECT_TRUE(st.connect) << "the port is back: no need to wait the backoff out";
    EXPECT_EQ(s.generation(), 2u);
    st = s.resumed(1100);
    EXPECT_TRUE(st.replay);
    EXPECT_EQ(s.state(), session_state::connected);
    EXPECT_EQ(s.due(), UINT64_MAX);
    EXPECT_EQ(s.attempts(), 2u);
    // once the new QP completed something the outage is over, and the next
    // one has a deadline of its own
    s.progress();
    s.failed(50000, true);
    EXPECT_EQ(s.deadline(), 80000u);
    EXPECT_EQ(s.attempts(), 0u);
}

// A path that lets the CM through and fails every new QP: the outage never
// ends with resumed() alone, so its deadline still ends it, and attempts
// after the first wait their backoff.
TEST(ResumeSession, AQpThatFailsAgainBeforeAnyProgressIsTheSameOutage) {
    session s(side::active, kCfg);
    s.failed(0, true);
    ASSERT_TRUE(s.drained(1).connect);
    ASSERT_TRUE(s.resumed(10).replay);
    s.failed(20, true);
    EXPECT_EQ(s.deadline(), 30000u) << "the same outage";
    EXPECT_FALSE(s.drained(21).connect) << "not at once: the backoff holds";
    EXPECT_EQ(s.due(), 121u);
    uint64_t now = 121;
    for (int i = 0; i < 1000 && s.state() != session_state::ended; ++i) {
        now = s.due();
        session_step st = s.tick(now);
        if (st.connect) {
            s.resumed(now);  // the CM gets through ...
            s.failed(now, true);  // ... and the QP fails at once
            s.drained(now);
        }
    }
    EXPECT_EQ(s.why(), give_up::deadline);
    EXPECT_EQ(now, 30000u);
}

TEST(ResumeSession, TheBackoffDoublesUpToItsLongest) {
    session s(side::active, kCfg);
    s.failed(0, true);
    s.drained(0);
    uint64_t now = 0;
    const uint64_t want[] = {100, 200, 400, 800, 1600, 2000, 2000};
    for (uint64_t w : want) {
        s.attempt_failed(now, attempt_outcome::unreachable);
        EXPECT_EQ(s.due() - now, w);
        now = s.due();
        EXPECT_TRUE(s.tick(now).connect);
    }
}

TEST(ResumeSession, TheDeadlineEndsTheOutageOnceAndNothingHappensAfter) {
    session s(side::active, kCfg);
    s.failed(0, true);
    s.drained(5);
    s.attempt_failed(10, attempt_outcome::unreachable);
    uint64_t now = 10;
    for (int i = 0; i < 1000 && s.state() != session_state::ended; ++i) {
        now = s.due();
        ASSERT_LE(now, 30000u);
        session_step st = s.tick(now);
        if (st.connect) s.attempt_failed(now, attempt_outcome::unreachable);
        if (st.end) {
            EXPECT_EQ(st.why, give_up::deadline);
            EXPECT_EQ(now, 30000u) << "at the deadline, not later";
        }
    }
    ASSERT_EQ(s.why(), give_up::deadline);
    for (session_step st : {s.tick(40000), s.port_active(40000), s.failed(40000, true),
                            s.drained(40000), s.resumed(40000), s.closed(), s.verdict_ends()})
        EXPECT_FALSE(st.end || st.connect || st.replay || st.qp_to_error || st.accept);
}

TEST(ResumeSession, ARefusalOrAPeerWithNoListenerEndsAtOnce) {
    for (auto [o, why] : {std::pair{attempt_outcome::refused, give_up::refused},
                          std::pair{attempt_outcome::no_listener, give_up::peer_gone}}) {
        session s(side::active, kCfg);
        s.failed(0, true);
        s.drained(1);
        session_step st = s.attempt_failed(2, o);
        EXPECT_TRUE(st.end);
        EXPECT_EQ(st.why, why) << "no waiting out the deadline";
    }
}

TEST(ResumeSession, WhatIsNotTransientTheVerdictAndTheApplicationEndIt) {
    session a(side::active, kCfg);
    session_step st = a.failed(0, false);
    EXPECT_TRUE(st.end && st.qp_to_error);
    EXPECT_EQ(st.why, give_up::not_transient);
    session b(side::active, kCfg);
    b.failed(0, true);
    b.drained(1);
    EXPECT_EQ(b.verdict_ends().why, give_up::verdict);
    session c(side::passive, kCfg);
    EXPECT_EQ(c.closed().why, give_up::closed);
    EXPECT_FALSE(c.closed().end) << "once";
}

TEST(ResumeSession, APassiveSideTakesARequestEvenBeforeItSawItsOwnQpFail) {
    session s(side::passive, kCfg);
    // an idle connection across a partition: the peer's request comes first
    session_step st = s.request(100, 1);
    EXPECT_TRUE(st.qp_to_error);
    EXPECT_FALSE(st.accept) << "drained first";
    EXPECT_EQ(s.state(), session_state::draining);
    st = s.drained(120);
    EXPECT_TRUE(st.accept);
    EXPECT_EQ(s.generation(), 1u);
    EXPECT_TRUE(s.resumed(130).replay);
    // a passive side never connects, and a stale request is nothing
    EXPECT_FALSE(s.request(200, 1).qp_to_error);
    s.failed(300, true);
    EXPECT_FALSE(s.drained(310).connect);
    EXPECT_FALSE(s.port_active(320).connect);
    EXPECT_EQ(s.state(), session_state::waiting);
    EXPECT_TRUE(s.request(330, 2).accept);
}

TEST(ResumeSession, APassiveSideEndsAtItsDeadlineAndAnswersEveryRequestItDoesNotTake) {
    session s(side::passive, kCfg);
    s.failed(0, true);
    s.drained(5);
    EXPECT_EQ(s.due(), 30000u);
    EXPECT_FALSE(s.tick(29999).end);
    // a stale request is answered no, and changes nothing
    session_step st = s.request(100, 0);
    EXPECT_TRUE(st.reject);
    EXPECT_EQ(st.reject_gen, 0u);
    EXPECT_EQ(s.state(), session_state::waiting);
    st = s.tick(30000);
    EXPECT_TRUE(st.end);
    EXPECT_EQ(st.why, give_up::deadline);
    st = s.request(30001, 1);
    EXPECT_TRUE(st.reject) << "after the end every request is answered no";

    // two requests while draining: the older one is answered no
    session t(side::passive, kCfg);
    t.failed(0, true);
    EXPECT_FALSE(t.request(1, 1).reject);
    st = t.request(2, 2);
    EXPECT_TRUE(st.reject);
    EXPECT_EQ(st.reject_gen, 1u);
    EXPECT_TRUE(t.request(3, 2).reject) << "the same generation again: stale";
    st = t.drained(4);
    EXPECT_TRUE(st.accept);
    EXPECT_EQ(t.generation(), 2u);
    // a request pending when the session ends is answered no with the end
    session u(side::passive, kCfg);
    u.request(0, 1);
    st = u.failed(1, false);
    EXPECT_TRUE(st.end && st.reject);
    EXPECT_EQ(st.reject_gen, 1u);
}

TEST(ResumeSession, ANewerRequestDuringAnAcceptDrainsThatAttemptFirst) {
    session s(side::passive, kCfg);
    s.failed(0, true);
    s.drained(1);
    ASSERT_TRUE(s.request(2, 1).accept);
    session_step st = s.request(3, 2);  // the peer gave up on generation 1
    EXPECT_TRUE(st.qp_to_error) << "the half-made QP holds receives: drained like any";
    EXPECT_FALSE(st.accept);
    EXPECT_EQ(s.deadline(), 30000u) << "the same outage, the same deadline";
    st = s.drained(4);
    EXPECT_TRUE(st.accept);
    EXPECT_EQ(s.generation(), 2u);
}

// Random event sequences: the rules that hold on every path.
TEST(ResumeSession, RandomSequencesKeepTheRules) {
    std::mt19937_64 rng(20261129);
    for (int run = 0; run < 4000; ++run) {
        const side sd = run % 2 ? side::active : side::passive;
        session s(sd, {static_cast<uint32_t>(1000 + rng() % 5000), 50, 800});
        uint64_t now = 0, outage_deadline = UINT64_MAX;
        uint32_t last_gen = 0;
        int ends = 0;
        for (int i = 0; i < 60; ++i) {
            now += rng() % 400;
            const session_state before = s.state();
            session_step st;
            switch (rng() % 10) {
            case 0: st = s.failed(now, rng() % 8 != 0); break;
            case 1: st = s.drained(now); break;
            case 2: st = s.port_active(now); break;
            case 3:  // the timer fires when it is due
                if (s.due() != UINT64_MAX) now = std::max(now, s.due());
                st = s.tick(now);
                if (now >= outage_deadline) {
                    ASSERT_TRUE(s.state() == session_state::ended ||
                                s.state() == session_state::connected)
                        << "the deadline passed and the outage goes on";
                }
                break;
            case 4: st = s.attempt_failed(now, static_cast<attempt_outcome>(rng() % 10 ? 0 : 1 + rng() % 2)); break;
            case 5: {  // newer, equal or older generations
                const uint32_t g = s.generation() + static_cast<uint32_t>(rng() % 4);
                const uint32_t gen = g > 0 ? g - 1 : 0;
                const uint32_t had = s.generation();
                st = s.request(now, gen);
                if (sd == side::passive && gen <= had) {
                    ASSERT_TRUE(st.reject) << "a stale request is answered no";
                    ASSERT_FALSE(st.accept);
                }
                break;
            }
            case 6: st = s.resumed(now); break;
            case 7: if (rng() % 20 == 0) st = s.verdict_ends(); break;
            case 8: if (rng() % 40 == 0) st = s.closed(); break;
            case 9: s.progress(); break;
            }
            if (before == session_state::connected && s.state() == session_state::draining)
                outage_deadline = s.deadline();
            ends += st.end;
            ASSERT_LE(ends, 1) << "one end";
            if (before == session_state::ended) {
                ASSERT_FALSE(st.end || st.connect || st.accept || st.replay || st.qp_to_error);
            }
            if (st.end) {
                ASSERT_EQ(s.state(), session_state::ended);
                ASSERT_NE(s.why(), give_up::none);
            }
            if (st.connect) {
                ASSERT_EQ(sd, side::active);
                ASSERT_EQ(s.state(), session_state::exchanging);
            }
            if (st.accept) {
                ASSERT_EQ(sd, side::passive);
                ASSERT_EQ(s.state(), session_state::exchanging);
            }
            if (st.connect || st.accept) {
                ASSERT_GT(s.generation(), last_gen) << "a generation is never used twice";
                last_gen = s.generation();
                ASSERT_LT(now, outage_deadline) << "no attempt after the deadline";
            }
            if (st.replay) {
                ASSERT_EQ(s.state(), session_state::connected);
            }
            if (s.state() != session_state::connected && s.state() != session_state::ended) {
                ASSERT_LE(s.due(), s.deadline());
                ASSERT_EQ(s.deadline(), outage_deadline) << "one deadline per outage";
            }
            if (s.state() == session_state::connected && s.deadline() == UINT64_MAX)
                outage_deadline = UINT64_MAX;  // progress: the outage is over
        }
    }
}

}  // namespace resume_session_test
