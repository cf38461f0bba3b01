// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The fabric object: opens without any device; parent of domains, EQs, wait sets.
#include "fabric.h"

#include "domain.h"
#include "eq/eq.h"
#include "eq/wait.h"
#include "msg/ep.h"

namespace evd {

namespace {

int fabric_close(struct fid* f) {
    return guard([&] {
        auto* fab = from_fid<fabric>(reinterpret_cast<struct fid_fabric*>(f));
        if (!fab) return -FI_EINVAL;
        if (fab->refs.busy()) {
            EVD_WARN(FI_LOG_FABRIC, "fi_close(fabric): %d objects still open on it\n",
                     fab->refs.n.load());
            return -FI_EBUSY;
        }
        return retire(fab, nullptr);
    });
}

// Ops tables (defined at the end of the file).
extern struct fi_ops fabric_fi_ops;
extern struct fi_ops_fabric fabric_ops;

}  // namespace

int fabric_open(struct fi_fabric_attr* attr, struct fid_fabric** out, void* context) {
    return guard([&] {
        if (!attr || !out) {
            EVD_WARN(FI_LOG_FABRIC, "fi_fabric: attr and fabric must not be NULL\n");
            return -FI_EINVAL;
        }
        auto fab = std::make_unique<fabric>();
        fid_init(*fab, FI_CLASS_FABRIC, context, &fabric_fi_ops, &fabric_ops);
        fab->fid.api_version = attr->api_version;
        if (attr->name) fab->name = attr->name;
        *out = &fab.release()->fid;  // the top of the tree: no parent to hold
        return 0;
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops fabric_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = fabric_close,
    .bind = op_no_bind,
    .control = op_no_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_fabric fabric_ops = {
    .size = sizeof(struct fi_ops_fabric),
    .domain = domain_open,
    .passive_ep = pep_open,
    .eq_open = eq_open,
    .wait_open = wait_open,
    .trywait = trywait,
    .domain2 = nullptr,
};

}  // namespace

}  // namespace evd
