// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The range of the provider's own wr_ids (wr_ids.h). Zeroed, never touched.
#include "cq/wr_ids.h"

namespace evd {

wr_id_space wr_ids;

}  // namespace evd
