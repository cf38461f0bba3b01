// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The life of one resumable connection, as docs/resume.md draws it
// ("States of a connection"): what the endpoint must do next when its QP
// fails, when the failed QP is drained, when its port is active again, when
// the backoff or the deadline is due, when an attempt to join the peer is
// answered, and when the exchange ends. The endpoint feeds it events and
// carries out the steps it returns; the ledgers (tx_ledger.h, rx_ledger.h)
// decide what is replayed, this decides when and whether.
//
// Pure: no clock (the caller passes monotonic milliseconds), no rdma-core
// call, no lock (the endpoint serialises calls), nothing allocated.
#pragma once

#include <cstdint>

namespace evd::resume {

enum class side : uint8_t {
    active,   // called fi_connect: it joins the peer again
    passive,  // accepted through a listener: it waits for the peer's request
};

enum class session_state : uint8_t {
    connected,   // running on its QP
    draining,    // its QP failed: moved to error, its completions being read
    waiting,     // drained; active: for the port or the backoff, passive: for a request
    exchanging,  // active: a resume request is out; passive: its accept is out
    ended,       // gave up (or closed): nothing more happens
};
const char* session_state_name(session_state s) noexcept;

// Why a session ended.
enum class give_up : uint8_t {
    none,
    deadline,       // not joined again within FI_EVD_RESUME_TIMEOUT
    refused,        // the peer refused the request (it knows no such connection)
    peer_gone,      // no listener at the peer's address: the process is gone
    verdict,        // the accounting found an operation it cannot decide (tx_ledger verdict)
    not_transient,  // the failure is not one to ride through
    closed,         // the application closed the endpoint
};
const char* give_up_name(give_up g) noexcept;

// How an attempt to join the peer failed (active side).
enum class attempt_outcome : uint8_t {
    unreachable,  // no answer, no route, port down: try again after the backoff
    refused,      // the peer answered with a refusal
    no_listener,  // nobody listens at the peer's address any more
};

// What the endpoint must do now; more than one may be set, in this order.
struct session_step {
    bool qp_to_error = false;  // move the current QP to the error state and drain it
    bool connect = false;      // active: a new id and QP, a resume request for generation()
    bool accept = false;       // passive: attach the request's QP, accept for generation()
    bool replay = false;       // the exchange is over: post what the ledgers queued
    bool end = false;          // the terminal record, every operation left cancelled
    give_up why = give_up::none;
    // Passive: refuse the request for this generation (its rdma_cm id must
    // be answered): stale, overtaken by a newer one, or come too late.
    bool reject = false;
    uint32_t reject_gen = 0;
};

class session {
  public:
    struct config {
        uint32_t deadline_ms;            // FI_EVD_RESUME_TIMEOUT
        uint32_t backoff_first_ms = 100; // the first wait after an attempt failed
        uint32_t backoff_max_ms = 2000;  // the longest wait between attempts
    };
    session(side s, config c) noexcept;

    // The current QP failed (an error completion, an async event, rdma_cm
    // saying the path is gone). transient: a cause to ride through.
    session_step failed(uint64_t now, bool transient) noexcept;
    // Every completion of the failed QP has been read.
    session_step drained(uint64_t now) noexcept;
    // The port is active again (PORT_ACTIVE): an active side waiting tries now.
    session_step port_active(uint64_t now) noexcept;
    // due() has come.
    session_step tick(uint64_t now) noexcept;
    // Active: the answer to the attempt for generation().
    session_step attempt_failed(uint64_t now, attempt_outcome o) noexcept;
    // Passive: a request for `generation` that the listener's token table
    // allowed (token_table::check). A connection that had not seen its QP
    // fail yet (an idle one across a partition) drains first.
    session_step request(uint64_t now, uint32_t generation) noexcept;
    // Both counts were heard and the ledgers' verdict is resume. The outage
    // stays open (its deadline and backoff hold) until progress().
    session_step resumed(uint64_t now) noexcept;
    // The new QP completed an operation: the outage is over. A failure
    // before this is the same outage going on, so a path that lets the CM
    // through and fails every QP still ends at the deadline.
    void progress() noexcept;
    // The ledgers' verdict ends the connection.
    session_step verdict_ends() noexcept;
    // The application closes the endpoint.
    session_step closed() noexcept;

    session_state state() const noexcept { return state_; }
    side which() const noexcept { return side_; }
    uint32_t generation() const noexcept { return gen_; }
    uint32_t attempts() const noexcept { return attempts_; }  // in this outage
    give_up why() const noexcept { return why_; }
    // When tick() is due: the deadline or the next attempt, whichever comes
    // first; UINT64_MAX when nothing is.
    uint64_t due() const noexcept;
    // When the deadline of the current outage is (UINT64_MAX when connected).
    uint64_t deadline() const noexcept { return deadline_; }

  private:
    session_step end(give_up g) noexcept;
    session_step try_now() noexcept;
    void open_outage(uint64_t now) noexcept;

    side side_;
    config cfg_;
    session_state state_ = session_state::connected;
    give_up why_ = give_up::none;
    uint32_t gen_ = 0;
    uint32_t attempts_ = 0;
    uint64_t deadline_ = UINT64_MAX;
    uint64_t next_try_ = UINT64_MAX;    // active, waiting: the next attempt
    uint32_t backoff_ = 0;              // the wait after the next failed attempt
    bool request_pending_ = false;      // passive: a request came before the drain ended
    uint32_t pending_gen_ = 0;
    bool outage_ = false;               // from a failure until progress() (or the end)
};

}  // namespace evd::resume
