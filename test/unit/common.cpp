// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "common.h"

#include <cstdlib>
#include <cstring>

namespace evdtest {

void use_build_tree_provider() {
    static bool done = [] {
        // Overridable so an installed evd can be tested with the same binary.
        setenv("FI_PROVIDER_PATH", EVD_PROVIDER_DIR, 0);
        return true;
    }();
    (void)done;
}

struct fid_fabric* open_fabric() {
    use_build_tree_provider();
    struct fi_fabric_attr attr {};
    attr.name = const_cast<char*>("evd");
    attr.prov_name = const_cast<char*>("evd");
    attr.api_version = FI_VERSION(1, 17);
    struct fid_fabric* fab = nullptr;
    if (fi_fabric(&attr, &fab, nullptr) != 0) return nullptr;
    return fab;
}

}  // namespace evdtest
