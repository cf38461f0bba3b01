// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The fabric object (fi_fabric(3), fabric.cpp).
// A fabric opens without any RDMA device (EQs, wait sets need none).
#pragma once

#include <string>

#include "evd.h"

namespace evd {

struct fabric : object_head<struct fid_fabric, kind::fabric> {
    refcount refs;          // domains, EQs, wait sets opened on it
    std::string name;
};

// provider->fabric
int fabric_open(struct fi_fabric_attr* attr, struct fid_fabric** out, void* context);

}  // namespace evd
