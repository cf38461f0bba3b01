// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The QP tracker of break_qp.cpp, for interpose.cpp (opaque pointers: the
// interposer cannot include the verbs header).
#pragma once

namespace evd_fault {
void qp_made(void* qp);  // evd made this QP
void qp_gone(void* qp);  // evd destroyed it
}  // namespace evd_fault
