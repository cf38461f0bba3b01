// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The project VM's environment and the link flap of veth0 (the link under
// rxe0), without gtest: shared by the gtest suites (through rxe_util.h) and
// the stand-alone programs that flap the link (evd_rdm_flap, link_bench).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace rxetest {

inline const char* env_or(const char* name, const char* def) {
    const char* v = std::getenv(name);
    return v && *v ? v : def;
}

inline double secs(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// The shell commands of a flap (for programs that run them without
// system(), e.g. with posix_spawn from many threads).
inline std::string link_down_cmd() {
    return std::string("ip link set ") + env_or("EVD_VM_NETDEV0", "veth0") + " down";
}
inline std::string link_up_cmd() {
    std::string n0 = env_or("EVD_VM_NETDEV0", "veth0");
    return "ip link set " + n0 + " up && ip route replace table 100 " +
           env_or("EVD_VM_ADDR1", "192.0.2.2") + " dev " + n0 + " src " +
           env_or("EVD_VM_ADDR0", "192.0.2.1");
}

// `ip link set veth0 STATE` ("up" or "down"); 0 on success.
inline int link_set(const char* state) {
    std::string cmd = std::string("ip link set ") + env_or("EVD_VM_NETDEV0", "veth0") + " " + state;
    return std::system(cmd.c_str());
}
// veth0 down, as a cable pull would do it (rxe0 raises PORT_ERR; veth1 loses
// its carrier); 0 on success.
inline int link_down() { return link_set("down"); }
// veth0 up again, with the policy route the kernel flushed with the link
// (setup-rxe.sh's table 100); 0 on success. The ports may not be ACTIVE yet.
inline int link_set_up() { return std::system(link_up_cmd().c_str()); }

// A thread that flaps veth0 once: after warm_s seconds the link goes down
// (t_down, phase 1), after down_s more it comes back (t_up, phase 2). Under
// emulation exec takes most of a second: each time is taken when its command
// returned, so the link is down (up) by then.
inline std::thread start_flap(double warm_s, double down_s, std::atomic<int>& phase,
                              std::chrono::steady_clock::time_point& t_down,
                              std::chrono::steady_clock::time_point& t_up) {
    return std::thread([=, &phase, &t_down, &t_up] {
        std::this_thread::sleep_for(std::chrono::duration<double>(warm_s));
        if (link_down()) std::printf("# link down failed\n");
        t_down = std::chrono::steady_clock::now();
        phase.store(1);
        std::this_thread::sleep_for(std::chrono::duration<double>(down_s));
        if (link_set_up()) std::printf("# link up failed\n");
        t_up = std::chrono::steady_clock::now();
        phase.store(2);
    });
}

}  // namespace rxetest
