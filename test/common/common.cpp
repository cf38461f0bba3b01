// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "common.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

pid_t current_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

bool thread_sleeping(pid_t tid) {
    std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
    char buf[512] = "";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return false;
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "tid (comm) S ...": the state follows the last ')' (comm may hold one).
    const char* p = std::strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'S';
}

}  // namespace evdtest
