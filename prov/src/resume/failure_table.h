// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Which failures a resumable connection rides through (docs/resume.md;
// fi_evd(7), RESUMABLE CONNECTIONS prints every row): a transient one starts
// the drain and the attempts to join the peer again (session.h); any other
// ends the connection at once, as without resumption. DATA, one row per
// completion status, async event and rdma_cm event that can end a
// connected endpoint, in failure_table.cpp; covered by
// test/unit/resume_failure_table.cpp.
//
// The rule behind the rows: transient is what the path does (a link, a
// port, a switch, an address, the fabric's manager), which joining again
// can outlive; not transient is what the peer or the application did (a
// bad key, a request too long, a closed peer) or the device itself, which a
// replay would only meet again.
#pragma once

#include <cstddef>

namespace evd::resume {

enum class failure_source : unsigned char {
    completion,   // an ibv_wc_status of an error completion
    async_event,  // an ibv_event_type
    cm_event,     // an rdma_cm_event_type on a connected endpoint's id
};
const char* failure_source_name(failure_source s) noexcept;

struct failure_row {
    failure_source source;
    int code;           // the status or event value
    const char* name;   // "IBV_WC_RETRY_EXC_ERR"
    bool transient;     // ridden through by a resumable connection
    const char* why;    // what fi_evd(7) says
};
extern const failure_row failure_table[];
extern const size_t failure_table_len;

// The row of (source, code); nullptr when there is none (not a failure of
// a connected endpoint).
const failure_row* failure_lookup(failure_source s, int code) noexcept;
// Whether a resumable connection rides through it; false for anything the
// table does not know.
bool failure_transient(failure_source s, int code) noexcept;

}  // namespace evd::resume
