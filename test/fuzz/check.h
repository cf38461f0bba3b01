// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// A fuzz target's invariant: when it breaks, say which, then abort
// (libFuzzer keeps the input that broke it).
#pragma once

#include <cstdio>
#include <cstdlib>

#define check(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                            \
        }                                                                            \
    } while (0)
