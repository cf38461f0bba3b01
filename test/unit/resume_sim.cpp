// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The resume accounting (prov/src/resume/) against a model of RC, on the
// host: two simulated endpoints joined by a wire that carries each side's
// requests in order, has the peer carry them out in order (a message takes
// the peer's oldest receive, a write stores, a read loads, an atomic adds),
// and carries the responses back in order, coalesced as acknowledgements
// are. Thousands of random schedules take operations and receives on both
// sides, move the wire, and fail the connection at any step: with requests
// carried out whose responses are lost, during a replay, and halfway
// through a resume exchange (one side resumed, then a second failure).
//
// After each schedule the connection heals and drains, and the test checks
// what docs/resume.md promises: every operation and every receive completed
// exactly once, in the order taken; every message of a side arrived at the
// peer exactly once, in order, with its payload; no atomic was applied
// twice; each read returned what in-order execution gives (and nothing the
// peer stored after consuming a later message); the peer's
// memory holds the last write. A schedule whose connection ended (an
// atomic in doubt) still completes everything exactly once, with only what
// was certainly carried out reported as successful.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "resume/rx_ledger.h"
#include "resume/tx_ledger.h"

namespace resume_sim_test {

using evd::resume::op_kind;
using evd::resume::rx_ledger;
using evd::resume::tx_ledger;
using evd::resume::tx_state;
using evd::resume::verdict;

constexpr uint32_t kCap = 8;  // send and receive queue depth
constexpr int kWords = 4;     // 8-byte words of each side's memory the peer writes
// Two more words each side's application stores to itself after it consumed
// a message of the peer: the peer reads them. A store carries the index of
// the message it followed, so a read can be checked against RC's order (a
// message after a read is carried out after it: the read must not see what
// the application did after that message).
constexpr int kLocalWords = 2;
constexpr uint64_t kStoreTag = 1ull << 63;

enum class status { none, ok, canceled };

// An operation the application took on one side.
struct sim_op {
    op_kind kind = op_kind::message;
    uint64_t value = 0;  // payload, value written, or addend
    int word = 0;        // target of a write or read
    uint64_t msgs_before = 0;  // this side's messages taken before it
    status st = status::none;
    int completions = 0;
    uint64_t result = 0;  // what a read loaded or an atomic fetched
    int applied = 0;      // times the peer carried it out (writes and atomics)
};

struct sim_recv {
    status st = status::none;
    int completions = 0;
    uint64_t data = 0;
};

struct request {
    uint64_t seq;
};
struct response {
    uint64_t seq;
    uint64_t value;
};

struct side {
    tx_ledger tx{kCap};
    rx_ledger rx{kCap};
    std::vector<sim_op> ops;           // by seq
    std::vector<sim_recv> recvs;       // by receive seq
    std::vector<uint64_t> retired;     // seqs in the order they left tx
    std::vector<uint64_t> rx_retired;  // receive seqs in the order they left rx
    std::vector<uint64_t> got;         // the peer's payloads, in the order consumed
    uint64_t mem[kWords + kLocalWords] = {};  // memory the peer writes and reads
    uint64_t msgs_taken = 0;
    uint64_t counter = 0;              // the word the peer's atomics add to
};

// How often each kind is taken: message, write, read, atomic, fetch_atomic.
struct mix {
    int w[5];
};

struct stats {
    uint64_t schedules = 0, failures = 0, resumes = 0, half_resumes = 0, ended = 0;
    uint64_t ops = 0, replayed_schedules = 0;
    uint64_t by_verdict[5] = {};
};

class sim {
  public:
    sim(uint64_t seed, mix m) : rng_(seed), mix_(m) {}

    // A random schedule of `steps` actions, then heal and drain.
    void run(int steps, stats& st) {
        for (int i = 0; i < steps && !ended_; ++i) step(st);
        if (!ended_ && down_) resume(st);
        drain(st);
        close_receives();
    }

    void check(uint64_t seed) const;
    bool ended() const { return ended_; }
    bool replayed() const { return replayed_; }
    const std::vector<std::string>& log() const { return log_; }

  private:
    uint64_t pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

    void note(const std::string& s) {
        log_.push_back(s);
        if (log_.size() > 80) log_.erase(log_.begin());
    }

    void step(stats& st) {
        const int i = static_cast<int>(pick(2));
        switch (pick(12)) {
        case 0: case 1: case 2: take_op(i, st); break;
        case 3: case 4: take_recv(i); break;
        case 5: case 6: case 7: deliver_request(i); break;
        case 8: case 9: deliver_responses(i); break;
        case 10:
            if (pick(3) == 0) fail(st);
            break;
        case 11:
            if (down_) {
                if (pick(4) == 0) half_resume(i, st);
                else resume(st);
            }
            break;
        }
    }

    op_kind random_kind() {
        int total = 0;
        for (int w : mix_.w) total += w;
        int x = static_cast<int>(pick(static_cast<uint64_t>(total)));
        for (int k = 0; k < 5; ++k) {
            if (x < mix_.w[k]) return static_cast<op_kind>(k);
            x -= mix_.w[k];
        }
        return op_kind::message;
    }

    void take_op(int i, stats& st) {
        side& s = s_[i];
        if (s.tx.full()) return;
        sim_op o;
        o.kind = random_kind();
        o.value = (static_cast<uint64_t>(i + 1) << 32) | ++values_;
        o.word = static_cast<int>(pick(o.kind == op_kind::read ? kWords + kLocalWords : kWords));
        o.msgs_before = s.msgs_taken;
        if (o.kind == op_kind::message) ++s.msgs_taken;
        const uint64_t seq = s.tx.add(o.kind, {static_cast<uint64_t>(o.word) * 8, 8});
        EXPECT_EQ(seq, s.ops.size());
        s.ops.push_back(o);
        ++st.ops;
        note("side " + std::to_string(i) + " takes " + evd::resume::op_kind_name(o.kind) + " " +
             std::to_string(seq));
        if (!down_) post_queued(i);
    }

    void take_recv(int i) {
        side& s = s_[i];
        if (s.rx.full()) return;
        const uint64_t seq = s.rx.add();
        EXPECT_EQ(seq, s.recvs.size());
        s.recvs.emplace_back();
        if (!down_) post_queued(i);
    }

    void post_queued(int i) {
        side& s = s_[i];
        uint64_t q;
        while (s.rx.next_queued(q)) s.rx.posted(q);
        while (s.tx.next_queued(q)) {
            s.tx.posted(q);
            wire_[i].push_back({q});
        }
    }

    // The peer carries out side i's oldest request; false when a message
    // finds no receive (RNR: it waits).
    bool deliver_request(int i) {
        if (down_ || wire_[i].empty()) return false;
        side& s = s_[i];
        side& p = s_[1 - i];
        const request r = wire_[i].front();
        sim_op& o = s.ops[r.seq];
        uint64_t value = 0;
        switch (o.kind) {
        case op_kind::message: {
            uint64_t rs;
            if (!p.rx.consume(&rs)) return false;
            sim_recv& rv = p.recvs[rs];
            rv.st = status::ok;
            ++rv.completions;
            rv.data = o.value;
            p.rx_retired.push_back(rs);
            p.got.push_back(o.value);
            // the peer's application acts on it: a store of its own
            if (pick(2)) p.mem[kWords + pick(kLocalWords)] = kStoreTag | (p.got.size() - 1);
            break;
        }
        case op_kind::write:
            p.mem[o.word] = o.value;
            ++o.applied;
            break;
        case op_kind::read:
            value = p.mem[o.word];
            break;
        case op_kind::atomic:
        case op_kind::fetch_atomic:
            value = p.counter;
            p.counter += o.value;
            ++o.applied;
            break;
        }
        note("peer of " + std::to_string(i) + " carries out " + std::to_string(r.seq));
        wire_[i].pop_front();
        back_[i].push_back({r.seq, value});
        return true;
    }

    // Some of side i's responses arrive; the last one completes everything
    // up to it (a coalesced acknowledgement).
    bool deliver_responses(int i) {
        if (down_ || back_[i].empty()) return false;
        side& s = s_[i];
        const uint64_t n = 1 + pick(back_[i].size());
        uint64_t last = 0;
        for (uint64_t k = 0; k < n; ++k) {
            const response r = back_[i].front();
            back_[i].pop_front();
            sim_op& o = s.ops[r.seq];
            if (o.kind == op_kind::read || o.kind == op_kind::fetch_atomic) o.result = r.value;
            last = r.seq;
        }
        const bool ok = s.tx.complete_through(last, [&](uint64_t seq, bool good) { retire(i, seq, good); });
        EXPECT_TRUE(ok) << "a completion of the current QP was refused: seq " << last;
        return true;
    }

    void retire(int i, uint64_t seq, bool ok) {
        sim_op& o = s_[i].ops[seq];
        o.st = ok ? status::ok : status::canceled;
        ++o.completions;
        s_[i].retired.push_back(seq);
    }

    // The link fails: whatever is on the wire is lost (requests not carried
    // out, responses of requests that were), both QPs flush.
    void fail(stats& st) {
        ++st.failures;
        note("failure");
        for (int i = 0; i < 2; ++i) {
            wire_[i].clear();
            back_[i].clear();
            s_[i].tx.qp_failed();
            s_[i].rx.qp_failed();
        }
        down_ = true;
    }

    bool decide(int i, stats& st) {
        uint64_t culprit = 0;
        const verdict v = s_[i].tx.peer_consumed(s_[1 - i].rx.consumed(), &culprit);
        ++st.by_verdict[static_cast<int>(v)];
        note("side " + std::to_string(i) + ": " + evd::resume::verdict_name(v));
        if (v == verdict::resume) {
            for (uint64_t q = s_[i].tx.head(); q < s_[i].tx.tail(); ++q)
                if (s_[i].tx.state(q) == tx_state::queued && s_[i].ops[q].completions == 0 &&
                    (s_[i].ops[q].applied || s_[i].ops[q].kind == op_kind::message))
                    replayed_ = true;
            return true;
        }
        EXPECT_TRUE(v == verdict::atomic_in_doubt || v == verdict::read_in_doubt)
            << "the accounting contradicts itself: " << evd::resume::verdict_name(v);
        return false;
    }

    // Both sides exchange their counts and go on a new QP pair.
    void resume(stats& st) {
        if (!decide(0, st) || !decide(1, st)) {
            end(st);
            return;
        }
        ++st.resumes;
        down_ = false;
        for (int i = 0; i < 2; ++i) {
            s_[i].tx.retire_done([&](uint64_t seq, bool ok) { retire(i, seq, ok); });
            post_queued(i);
        }
    }

    // Side i heard the peer's count and replayed; the exchange then broke
    // before the other side heard back: a second failure.
    void half_resume(int i, stats& st) {
        ++st.half_resumes;
        if (!decide(i, st)) {
            end(st);
            return;
        }
        s_[i].tx.retire_done([&](uint64_t seq, bool ok) { retire(i, seq, ok); });
        down_ = false;
        post_queued(i);
        fail(st);
    }

    void end(stats& st) {
        ++st.ended;
        ended_ = true;
        for (int i = 0; i < 2; ++i) {
            wire_[i].clear();
            back_[i].clear();
            s_[i].tx.cancel_all([&](uint64_t seq, bool ok) { retire(i, seq, ok); });
        }
    }

    // Heal: move the wire until nothing is outstanding, posting receives a
    // waiting message needs.
    void drain(stats& st) {
        for (int guard = 0; !ended_ && guard < 100000; ++guard) {
            bool moved = false;
            for (int i = 0; i < 2; ++i) {
                while (!wire_[i].empty()) {
                    if (deliver_request(i)) {
                        moved = true;
                        continue;
                    }
                    take_recv(1 - i);  // RNR: the peer posts a receive
                    moved = true;
                    break;
                }
                while (deliver_responses(i)) moved = true;
                if (s_[i].tx.outstanding() && wire_[i].empty() && back_[i].empty())
                    ADD_FAILURE() << "side " << i << " has " << s_[i].tx.outstanding()
                                  << " operations outstanding and nothing on the wire";
            }
            if (!moved) return;
        }
        ASSERT_TRUE(ended_) << "the drain did not end";
    }

    // The application closes: receives nobody consumed leave unconsumed.
    void close_receives() {
        for (int i = 0; i < 2; ++i)
            s_[i].rx.cancel_all([&](uint64_t seq) {
                s_[i].recvs[seq].st = status::canceled;
                ++s_[i].recvs[seq].completions;
                s_[i].rx_retired.push_back(seq);
            });
    }

    std::mt19937_64 rng_;
    mix mix_;
    side s_[2];
    std::deque<request> wire_[2];  // side i's requests, in order
    std::deque<response> back_[2];  // responses to side i, in order
    bool down_ = false;
    bool ended_ = false;
    bool replayed_ = false;
    uint64_t values_ = 0;
    std::vector<std::string> log_;
};

void sim::check(uint64_t seed) const {
    for (int i = 0; i < 2; ++i) {
        const side& s = s_[i];
        const side& p = s_[1 - i];
        SCOPED_TRACE("seed " + std::to_string(seed) + ", side " + std::to_string(i));
        // every operation left once, in the order taken
        ASSERT_EQ(s.retired.size(), s.ops.size());
        for (uint64_t k = 0; k < s.retired.size(); ++k) ASSERT_EQ(s.retired[k], k);
        std::vector<uint64_t> sent;  // this side's message payloads, in order
        uint64_t last_write[kWords] = {};
        uint64_t applied_sum = 0;
        for (uint64_t k = 0; k < s.ops.size(); ++k) {
            const sim_op& o = s.ops[k];
            ASSERT_EQ(o.completions, 1) << "operation " << k;
            if (!ended_) {
                ASSERT_EQ(o.st, status::ok) << "operation " << k;
            }
            switch (o.kind) {
            case op_kind::message:
                // reported successful only if the peer consumed it
                if (o.st == status::ok) {
                    ASSERT_LT(sent.size(), p.got.size()) << "message " << k;
                }
                sent.push_back(o.value);
                break;
            case op_kind::write:
                if (o.st == status::ok) {
                    ASSERT_GE(o.applied, 1) << "write " << k;
                }
                last_write[o.word] = o.value;
                break;
            case op_kind::read:
                // in-order execution: the last write of ours before it
                if (o.st == status::ok && o.word < kWords) {
                    ASSERT_EQ(o.result, last_write[o.word]) << "read " << k << " of word " << o.word;
                }
                if (o.st == status::ok && o.word >= kWords && (o.result & kStoreTag)) {
                    ASSERT_LT(o.result & ~kStoreTag, o.msgs_before)
                        << "read " << k << " saw a store the peer made after a later message";
                }
                break;
            case op_kind::atomic:
            case op_kind::fetch_atomic:
                ASSERT_LE(o.applied, 1) << "atomic " << k << " applied twice";
                if (o.st == status::ok) {
                    ASSERT_EQ(o.applied, 1) << "atomic " << k;
                }
                applied_sum += o.applied ? o.value : 0;
                break;
            }
        }
        ASSERT_EQ(p.counter, applied_sum) << "the peer's atomic word";
        // the peer got this side's messages once each, in order: all of them,
        // or, if the connection ended, a prefix
        ASSERT_LE(p.got.size(), sent.size());
        if (!ended_) {
            ASSERT_EQ(p.got.size(), sent.size());
        }
        for (uint64_t k = 0; k < p.got.size(); ++k) ASSERT_EQ(p.got[k], sent[k]) << "message " << k;
        if (!ended_) {
            for (int w = 0; w < kWords; ++w) ASSERT_EQ(p.mem[w], last_write[w]) << "word " << w;
        }
        // every receive left once, in the order posted; consumed ones hold the
        // peer's messages in order
        ASSERT_EQ(s.rx_retired.size(), s.recvs.size());
        uint64_t next_msg = 0;
        for (uint64_t k = 0; k < s.rx_retired.size(); ++k) {
            ASSERT_EQ(s.rx_retired[k], k);
            const sim_recv& r = s.recvs[k];
            ASSERT_EQ(r.completions, 1) << "receive " << k;
            if (r.st == status::ok) {
                ASSERT_LT(next_msg, s.got.size());
                ASSERT_EQ(r.data, s.got[next_msg++]) << "receive " << k;
            }
        }
        ASSERT_EQ(next_msg, s.got.size());
        ASSERT_EQ(s.rx.consumed(), s.got.size());
    }
}

void run_schedules(mix kinds, uint64_t first_seed, int count, stats& st) {
    for (int n = 0; n < count; ++n) {
        const uint64_t seed = first_seed + static_cast<uint64_t>(n);
        sim m(seed, kinds);
        m.run(300, st);
        ++st.schedules;
        if (m.replayed()) ++st.replayed_schedules;
        m.check(seed);
        if (::testing::Test::HasFailure()) {
            std::ostringstream o;
            for (const std::string& l : m.log()) o << "  " << l << "\n";
            FAIL() << "schedule " << seed << " failed; its last steps:\n" << o.str();
        }
    }
}

void print(const char* what, const stats& st) {
    auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
    std::printf("%s: schedules %llu, operations %llu, failures %llu, resumes %llu (%llu halfway), "
                "ended %llu (atomic in doubt %llu, read in doubt %llu)\n",
                what, u(st.schedules), u(st.ops), u(st.failures), u(st.resumes),
                u(st.half_resumes), u(st.ended),
                u(st.by_verdict[static_cast<int>(verdict::atomic_in_doubt)]),
                u(st.by_verdict[static_cast<int>(verdict::read_in_doubt)]));
}

// Messages and writes are never in doubt for good: every schedule resumes
// after every failure and ends with everything delivered exactly once.
TEST(ResumeSim, MessagesAndWritesAlwaysResumeExactlyOnce) {
    stats st;
    run_schedules({{6, 3, 0, 0, 0}}, 1, 2000, st);
    print("messages and writes", st);
    EXPECT_EQ(st.ended, 0u);
    EXPECT_GT(st.failures, 2000u);
    EXPECT_GT(st.resumes, 2000u);
    EXPECT_GT(st.half_resumes, 200u);
    EXPECT_GT(st.replayed_schedules, 1000u) << "schedules that sent a message or a write again: "
                                               "the rules were exercised";
}

// Reads replay unless the peer may have acted after them; what a completed
// read returned is what in-order execution gives.
TEST(ResumeSim, ReadsReplayOrEndTheConnectionNeverReturnWhatCouldNotBe) {
    stats st;
    run_schedules({{5, 3, 3, 0, 0}}, 100001, 2000, st);
    print("with reads", st);
    EXPECT_GT(st.resumes, 2000u);
    EXPECT_GT(st.by_verdict[static_cast<int>(verdict::read_in_doubt)], 0u);
    EXPECT_EQ(st.by_verdict[static_cast<int>(verdict::atomic_in_doubt)], 0u);
}

// With atomics, a failure while one is outstanding ends the connection;
// everything still completes exactly once and no atomic is applied twice.
TEST(ResumeSim, AtomicsAreNeverAppliedTwice) {
    stats st;
    run_schedules({{5, 2, 1, 1, 1}}, 200001, 2000, st);
    print("with atomics", st);
    EXPECT_GT(st.by_verdict[static_cast<int>(verdict::atomic_in_doubt)], 100u);
    EXPECT_GT(st.resumes, 1000u);
}

}  // namespace resume_sim_test
