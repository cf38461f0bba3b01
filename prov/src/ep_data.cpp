// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "ep.h"
