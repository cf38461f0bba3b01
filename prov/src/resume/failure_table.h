// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Which failures a resumable connection is to ride through (docs/resume.md;
// fi_evd(7), RESUMABLE CONNECTIONS prints every row): a transient one starts
// the drain and the attempts to join the peer again (session.h); one that
// ends ends the connection at once, as without resumption; an ignored event
// is not a failure of the connection (its QP goes on). DATA, one row per
// completion status, async event and rdma_cm event that can end a
// connected endpoint, in failure_table.cpp; covered by
// test/unit/resume_failure_table.cpp.
//
// The rule behind the rows: only a QP's own failure starts anything, so an
// event that leaves the QP working (a port down that RC's retries may
// outlive, an address or the subnet manager changing) is ignored; a QP that
// failed because of the path (its retries ran out) is transient, which
// joining again can outlive; one that failed because of what the peer or
// the application did (a bad key, a request too long, a closed peer) or
// because of the device ends, as a replay would only meet it again.
#pragma once

#include <cstddef>

namespace evd::resume {

enum class failure_source : unsigned char {
    completion,   // an ibv_wc_status of an error completion
    async_event,  // an ibv_event_type
    cm_event,     // an rdma_cm_event_type on a connected endpoint's id
};
const char* failure_source_name(failure_source s) noexcept;

// What a resumable connection does on it.
enum class failure_verdict : unsigned char {
    ignored,    // not a failure of the connection: its QP goes on (its own
                // failure, if one follows, decides)
    transient,  // the QP failed for the path's reason: drain, join again
    ends,       // the QP failed for a reason a replay would meet again: end
};
const char* failure_verdict_name(failure_verdict v) noexcept;

struct failure_row {
    failure_source source;
    int code;                 // the status or event value
    const char* name;         // "IBV_WC_RETRY_EXC_ERR"
    failure_verdict verdict;
    const char* why;          // what fi_evd(7) says
};
extern const failure_row failure_table[];
extern const size_t failure_table_len;

// The row of (source, code); nullptr when there is none.
const failure_row* failure_lookup(failure_source s, int code) noexcept;
// The verdict on (source, code). What the table does not name: an error
// completion ends (it is not known to pass); an async or rdma_cm event is
// ignored (none that breaks a QP is missing: test/unit/resume_failure_table.cpp).
failure_verdict failure_verdict_of(failure_source s, int code) noexcept;

}  // namespace evd::resume
