// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The terminal record of a resumable endpoint that could not be joined
// again (rdma/fi_ext_evd.h, struct fi_evd_resume_err): what its err_data
// holds, and the sentence fi_eq_strerror gives for it. Pure.
#pragma once

#include <rdma/fi_ext_evd.h>

#include <cstddef>
#include <cstdint>

#include "resume/failure_table.h"
#include "resume/session.h"

namespace evd::resume {

// What ended the outage, for the record. `why` is a session's give_up (not
// none or closed: a closed endpoint gets no record); `cause` the first
// failure of the outage; `refusal` the peer's resume_refusal when it refused.
struct outage {
    give_up why = give_up::deadline;
    uint32_t attempts = 0;
    uint64_t ms = 0;
    failure_source cause_source = failure_source::completion;
    int cause_code = 0;
    uint32_t refusal = 0;
    uint32_t generation = 0;
};

// The record's prov_errno: FI_EVD_PERR(FI_EVD_PERR_RESUME, reason).
int resume_prov_errno(give_up why) noexcept;
// Its err_data.
struct fi_evd_resume_err resume_err_make(const outage& o) noexcept;
// fi_eq_strerror's sentence for a record of class FI_EVD_PERR_RESUME (err_data
// a fi_evd_resume_err, or null: then from prov_errno alone), written into
// buf (len bytes); nullptr when prov_errno is of another class.
const char* resume_err_text(int prov_errno, const void* err_data, char* buf, size_t len) noexcept;

}  // namespace evd::resume
