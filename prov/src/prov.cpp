// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Provider entry: fi_prov_ini, tunables, cleanup.
#include <rdma/fi_ext_evd.h>
#include <cctype>
#include <limits>
#include <cstdio>

#include "dgram/ud_cm.h"
#include "evd.h"
#include "fabric.h"
#include "info/info.h"
#include "mr/mem_monitor.h"

namespace evd {

namespace {
params g_params;

// The FI_EVD_* tunables: one row each, the field it sets and the smallest
// value taken (a smaller one is refused with a warning and the default kept).
struct param_row {
    const char* name;  // FI_EVD_<NAME> in upper case
    const char* help;  // "(default: ...)" is appended
    size_t params::*size_field = nullptr;
    int params::*int_field = nullptr;
    bool params::*bool_field = nullptr;
    long min = 0;
    long max = std::numeric_limits<long>::max();
};

const param_row kParams[] = {
    {"eq_size", "Default EQ depth when fi_eq_attr.size is 0", &params::eq_size, nullptr,
     nullptr, 1},
    {"eq_max_write", "Largest fi_eq_write payload in bytes", &params::eq_max_write, nullptr,
     nullptr, 1},
    {"cm_timeout", "rdma_cm address and route resolution timeout in ms", nullptr,
     &params::cm_timeout_ms, nullptr, 1},
    {"cq_size", "Default CQ depth when fi_cq_attr.size is 0", &params::cq_size, nullptr, nullptr,
     1},
    {"inject_size", "Largest FI_INJECT payload; 0 uses the device's max_inline_data",
     &params::inject_size},
    {"tx_size",
     "tx_attr->size fi_getinfo reports when hints give none (the send queue depth an endpoint "
     "gets; hints may ask up to the device's max_qp_wr); 0 or above max_qp_wr uses max_qp_wr",
     &params::tx_size},
    {"rx_size",
     "rx_attr->size fi_getinfo reports when hints give none (receive queue depth; hints may ask "
     "up to max_qp_wr); 0 or above max_qp_wr uses max_qp_wr",
     &params::rx_size},
    {"fail_fast",
     "End every connected endpoint on a port at once when the port goes down "
     "(IBV_EVENT_PORT_ERR), with one FI_ENETDOWN terminal error each; per domain with "
     "fi_control(FI_EVD_FAIL_FAST_SET)",
     nullptr, nullptr, &params::fail_fast},
    {"flush_timeout",
     "How long fi_close of an endpoint waits, in ms, for the work still queued on its queue "
     "pair to complete as flushed in its CQ before the queue pair is destroyed",
     nullptr, &params::flush_timeout_ms},
    {"connect_timeout",
     "An endpoint not connected this many ms after it sent its connect request or its accept "
     "ends with FI_ETIMEDOUT; 0 leaves it to rdma_cm's own retries, which take a minute or more",
     nullptr, &params::connect_timeout_ms},
    {"probe_timeout",
     "When a port becomes active again, each connected endpoint on it posts a progress probe; "
     "one whose probe has not completed this many ms (plus its QP's local ack timeout) later "
     "ends with FI_ETIMEDOUT so the application can reconnect; 0 posts no probe",
     nullptr, &params::probe_timeout_ms},
    {"mr_cache",
     "Cache memory registrations: fi_mr_reg of memory already registered on the domain reuses "
     "the registration; unmapped, moved or discarded memory is dropped from the cache "
     "(userfaultfd)",
     nullptr, nullptr, &params::mr_cache},
    {"mr_cache_max_count", "Most registrations a domain's cache keeps; 0 disables the cache",
     &params::mr_cache_max_count},
    {"mr_cache_max_size",
     "Most bytes a domain's cache keeps registered; 0 means physical memory divided by twice "
     "the number of CPUs",
     &params::mr_cache_max_size},
    {"qp_pool_size",
     "Most queue pairs of closed endpoints a domain keeps for reuse (waiting out the peer's "
     "time-wait, then reset and idle); an endpoint with the same CQs, SRX and sizes takes one "
     "instead of creating a QP; 0 creates and destroys a QP per endpoint",
     &params::qp_pool_size},
    {"qp_pool_timewait",
     "A kept queue pair whose connection's RDMA_CM_EVENT_TIMEWAIT_EXIT has not come this many "
     "ms after its endpoint closed is destroyed instead of reused",
     nullptr, &params::qp_pool_timewait_ms},
    {"retry_count",
     "Transport retries (0-7) the connections this process requests ask for: how many times "
     "an unacknowledged send is sent again before it fails and its endpoint ends, so a peer "
     "that died is noticed; -1: 7, except 6 on Soft-RoCE (rxe), which takes 7 as 'retry "
     "forever' and would never notice",
     nullptr, &params::retry_count, nullptr, -1, 7},
    {"dgram",
     "Offer FI_EP_DGRAM endpoints (UD queue pairs) to hints that ask for FI_EP_DGRAM "
     "(fi_evd(7), DATAGRAM ENDPOINTS); 0 hides them, and with them evd;ofi_rxd",
     nullptr, nullptr, &params::dgram},
    {"resume_timeout",
     "Resumable connections (fi_evd(7), RESUMABLE CONNECTIONS): endpoints keep every "
     "operation until it completes, so that a connection whose queue pair fails can be "
     "joined again within this many ms; 0 turns it off; per domain with "
     "fi_control(FI_EVD_RESUME_TIMEOUT_SET)",
     nullptr, &params::resume_timeout_ms, nullptr, 0, FI_EVD_RESUME_TIMEOUT_MAX},
    {"resume_keepalive",
     "A resumable connection with nothing on its send queue posts a zero-length RDMA write "
     "this often (ms), so that a path that failed while it was idle, or a peer whose side "
     "failed alone, is found while there is still time to resume; -1: a tenth of the "
     "resume timeout; 0: never",
     nullptr, &params::resume_keepalive_ms, nullptr, -1, FI_EVD_RESUME_TIMEOUT_MAX},
};

void define_param(const param_row& r) {
    if (r.size_field)
        fi_param_define(&g_prov, r.name, FI_PARAM_SIZE_T, "%s (default: %zu)", r.help,
                        g_params.*r.size_field);
    else if (r.int_field)
        fi_param_define(&g_prov, r.name, FI_PARAM_INT, "%s (default: %d)", r.help,
                        g_params.*r.int_field);
    else
        fi_param_define(&g_prov, r.name, FI_PARAM_BOOL, "%s (default: %s)", r.help,
                        g_params.*r.bool_field ? "yes" : "no");
}

void read_param(const param_row& r) {
    long long v = 0;
    if (r.size_field) {
        size_t sz;
        if (fi_param_get_size_t(&g_prov, r.name, &sz) != FI_SUCCESS) return;
        v = static_cast<long long>(sz);
    } else {
        int i;
        int rc = r.int_field ? fi_param_get_int(&g_prov, r.name, &i)
                             : fi_param_get_bool(&g_prov, r.name, &i);
        if (rc != FI_SUCCESS) return;
        v = i;
    }
    if (v < r.min || v > r.max) {
        char env[32];
        size_t n = 0;
        for (const char* c = r.name; *c && n + 1 < sizeof env; ++c)
            env[n++] = static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
        env[n] = '\0';
        EVD_WARN(FI_LOG_CORE, "FI_EVD_%s=%lld is outside %ld..%ld: the default is kept\n", env,
                 v, r.min, r.max);
        return;
    }
    if (r.size_field)
        g_params.*r.size_field = static_cast<size_t>(v);
    else if (r.int_field)
        g_params.*r.int_field = static_cast<int>(v);
    else
        g_params.*r.bool_field = v != 0;
}

void read_params() {
    for (const param_row& r : kParams) define_param(r);
    for (const param_row& r : kParams) read_param(r);
}

void cleanup() noexcept {
    info_cleanup();
    ud_agent_shutdown();
    mem_monitor_shutdown();
}

}  // namespace

const params& get_params() { return g_params; }

int op_no_control(struct fid*, int, void*) { return -FI_ENOSYS; }

int fid_tostr(const struct fid* fid, char* buf, size_t len) {
    if (!buf || !len) return -FI_EINVAL;
    return std::snprintf(buf, len, "evd fid %p (class %zu)", static_cast<const void*>(fid),
                         fid ? fid->fclass : 0);
}

namespace {
int unopened_close(struct fid*) { return -FI_EINVAL; }
}  // namespace

struct fi_ops unopened_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = unopened_close,
    .bind = op_no_bind,
    .control = op_no_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};
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
