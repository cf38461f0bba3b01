// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "mr.h"

namespace evd {
struct fi_ops_mr mr_ops = {.size = sizeof(struct fi_ops_mr)};
}  // namespace evd
