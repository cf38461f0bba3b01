/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * fi_ext_evd.h: public extensions of the evd libfabric provider.
 *
 * Everything here is reached through standard libfabric calls
 * (fi_open_ops, fi_control, bind flags); no standard call changes meaning.
 * See fi_evd(7).
 */
#ifndef FI_EXT_EVD_H
#define FI_EXT_EVD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Section 1: event queue extensions (issue 3).                          */
/* ===================================================================== */
/* @@EQ-EXT@@ (owned by the EQ implementation) */

/* ===================================================================== */
/* Section 2: hardware async events (issue 5).                           */
/* ===================================================================== */
/* @@ASYNC-EXT@@ (owned by the async-event implementation) */

/* ===================================================================== */
/* Section 3: connection management (issue 4).                           */
/* ===================================================================== */
/* @@CM-EXT@@ (owned by the endpoint implementation) */

#ifdef __cplusplus
}
#endif
#endif /* FI_EXT_EVD_H */
