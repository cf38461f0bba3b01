// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Memory registration. Owned by the data-path implementation (mr.cpp).
#pragma once

#include "evd.h"

namespace evd {

extern struct fi_ops_mr mr_ops;  // the domain's fid_domain::mr table

}  // namespace evd
