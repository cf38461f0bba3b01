// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Provider entry: fi_prov_ini, tunables, cleanup.
#include "evd.h"
#include "fabric.h"
#include "info.h"

namespace evd {

namespace {
params g_params;

void read_params() {
    fi_param_define(&g_prov, "eq_size", FI_PARAM_SIZE_T,
                    "Default EQ depth when fi_eq_attr.size is 0 (default: %zu)", g_params.eq_size);
    fi_param_define(&g_prov, "eq_max_write", FI_PARAM_SIZE_T,
                    "Largest fi_eq_write payload in bytes (default: %zu)", g_params.eq_max_write);
    fi_param_define(&g_prov, "cm_timeout", FI_PARAM_INT,
                    "rdma_cm address and route resolution timeout in ms (default: %d)",
                    g_params.cm_timeout_ms);
    fi_param_define(&g_prov, "cq_size", FI_PARAM_SIZE_T,
                    "Default CQ depth when fi_cq_attr.size is 0 (default: %zu)", g_params.cq_size);
    fi_param_define(&g_prov, "inject_size", FI_PARAM_SIZE_T,
                    "Largest FI_INJECT payload; 0 uses the device's max_inline_data (default: 0)");

    fi_param_define(&g_prov, "tx_size", FI_PARAM_SIZE_T,
                    "tx_attr->size fi_getinfo reports when hints give none (the send queue "
                    "depth an endpoint gets; hints may ask up to the device's max_qp_wr); "
                    "0 or above max_qp_wr uses max_qp_wr (default: %zu)", g_params.tx_size);
    fi_param_define(&g_prov, "rx_size", FI_PARAM_SIZE_T,
                    "rx_attr->size fi_getinfo reports when hints give none (receive queue "
                    "depth; hints may ask up to max_qp_wr); 0 or above max_qp_wr uses "
                    "max_qp_wr (default: %zu)", g_params.rx_size);
    fi_param_define(&g_prov, "fail_fast", FI_PARAM_BOOL,
                    "End every connected endpoint on a port at once when the port goes down "
                    "(IBV_EVENT_PORT_ERR), with one FI_ENETDOWN terminal error each; per "
                    "domain with fi_control(FI_EVD_FAIL_FAST_SET) (default: no)");

    fi_param_define(&g_prov, "flush_timeout", FI_PARAM_INT,
                    "How long fi_close of an endpoint waits, in ms, for the work still queued "
                    "on its queue pair to complete as flushed in its CQ before the queue pair "
                    "is destroyed (default: %d)", g_params.flush_timeout_ms);

    fi_param_define(&g_prov, "connect_timeout", FI_PARAM_INT,
                    "An endpoint not connected this many ms after it sent its connect request "
                    "or its accept ends with FI_ETIMEDOUT; 0 leaves it to rdma_cm's own "
                    "retries, which take a minute or more (default: %d)", g_params.connect_timeout_ms);

    fi_param_define(&g_prov, "probe_timeout", FI_PARAM_INT,
                    "When a port becomes active again, each connected endpoint on it posts a "
                    "progress probe; one whose probe has not completed this many ms (plus its "
                    "QP's local ack timeout) later ends with FI_ETIMEDOUT so the application "
                    "can reconnect; 0 posts no probe (default: %d)", g_params.probe_timeout_ms);

    size_t sz;
    int i;
    if (fi_param_get_size_t(&g_prov, "eq_size", &sz) == FI_SUCCESS && sz > 0) g_params.eq_size = sz;
    if (fi_param_get_size_t(&g_prov, "eq_max_write", &sz) == FI_SUCCESS && sz > 0)
        g_params.eq_max_write = sz;
    if (fi_param_get_int(&g_prov, "cm_timeout", &i) == FI_SUCCESS && i > 0) g_params.cm_timeout_ms = i;
    if (fi_param_get_size_t(&g_prov, "cq_size", &sz) == FI_SUCCESS && sz > 0) g_params.cq_size = sz;
    if (fi_param_get_size_t(&g_prov, "inject_size", &sz) == FI_SUCCESS) g_params.inject_size = sz;
    if (fi_param_get_size_t(&g_prov, "tx_size", &sz) == FI_SUCCESS) g_params.tx_size = sz;
    if (fi_param_get_size_t(&g_prov, "rx_size", &sz) == FI_SUCCESS) g_params.rx_size = sz;
    if (fi_param_get_bool(&g_prov, "fail_fast", &i) == FI_SUCCESS) g_params.fail_fast = i != 0;
    if (fi_param_get_int(&g_prov, "connect_timeout", &i) == FI_SUCCESS && i >= 0)
        g_params.connect_timeout_ms = i;
    if (fi_param_get_int(&g_prov, "flush_timeout", &i) == FI_SUCCESS && i >= 0)
        g_params.flush_timeout_ms = i;
    if (fi_param_get_int(&g_prov, "probe_timeout", &i) == FI_SUCCESS && i >= 0)
        g_params.probe_timeout_ms = i;
}

void cleanup() noexcept { info_cleanup(); }

}  // namespace

const params& get_params() { return g_params; }

int op_no_control(struct fid*, int, void*) { return -FI_ENOSYS; }
int op_no_bind(struct fid*, struct fid*, uint64_t) { return -FI_ENOSYS; }
int op_no_ops_open(struct fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }

struct fi_provider g_prov = {
    .version = kProvVersion,
    .fi_version = kFiVersion,
    .context = {},
    .name = kProvName,
    .getinfo = getinfo,
    .fabric = fabric_open,
    .cleanup = cleanup,
};

}  // namespace evd

extern "C" FI_EXT_INI {
    evd::read_params();
    return &evd::g_prov;
}
