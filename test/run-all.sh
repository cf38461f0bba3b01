#!/usr/bin/env bash
# The project's test command: installs what is missing, builds evd three ways
# (plain, ASan+UBSan, TSan), runs the unit tests of each, fuzzes the parsers
# of untrusted bytes (clang, libFuzzer), then the integration tests on
# Soft-RoCE and Soft-iWARP inside the project's VMs (one VM, two and four
# nodes), the sanitizer soaks and fault injection there, the Debian
# packages, and all of it again in the other Debian release's userland
# (libfabric 1.17 / 2.1). Its last line is "N passed, N failed" (what CI
# reads). Exit status 0 only when nothing failed.
#
# Steps run side by side where they can (test/README.md, "Time budget"):
# the VM steps spend most of their time waiting on the guests' timers, so
# they run beside each other and beside the builds, which run at a lower
# priority (nice) so that no guest waits for a compiler. Each step names the
# steps it needs, an estimate of the CPU it uses (percent of one core; the
# steps running at once stay within EVD_CPU_CAP, default 100 x cores) and
# the memory its VMs take; steps that change the same userland's packages
# never overlap. Every step's output goes to test-results/STEP.log; a table
# of every step's time closes the run, against the budget (EVD_BUDGET_S,
# default 2700 s: 45 minutes).
#
#   bash test/run-all.sh                     everything
#   EVD_QUICK=1 bash test/run-all.sh         the developer's loop (about 4 minutes):
#                                            build, unit tiers, man page; no VM,
#                                            sanitizers, fuzzing, packages or other Debian
#   EVD_SKIP_VM=1 / EVD_SKIP_SAN=1 / EVD_SKIP_FUZZ=1 / EVD_SKIP_ALT=1 / EVD_SKIP_PKG=1
#                                            leave out that tier (EVD_SKIP_D13 is
#                                            EVD_SKIP_ALT's old name); CI sets none
#   EVD_ONLY="step step..."                  only these steps (and nothing they need:
#                                            run the builds first)
#   EVD_FUZZ_SECONDS=N                       fuzzing time per target (default 10)
#   EVD_SOAK_SECONDS=N                       length of each sanitizer soak (default 120)
#   EVD_SERIAL=1                             one step at a time (for timing one step)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
results="$top/test-results"
rm -rf "$results"
mkdir -p "$results/.state"
jobs=$(nproc 2>/dev/null || echo 2)
export top jobs
cpu_cap=${EVD_CPU_CAP:-$((100 * jobs))}
mem_total=$(awk '/^MemTotal:/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null)
mem_total=${mem_total:-8}
mem_cap=${EVD_MEM_CAP:-$(( mem_total - 4 > 4 ? mem_total - 4 : 4 ))}
budget=${EVD_BUDGET_S:-2700}
if [ -n "${EVD_QUICK:-}" ]; then
    EVD_SKIP_VM=1 EVD_SKIP_SAN=1 EVD_SKIP_FUZZ=1 EVD_SKIP_ALT=1 EVD_SKIP_PKG=1
fi
: "${EVD_SKIP_ALT:=${EVD_SKIP_D13:-}}"

# ------------------------------------------------------------ the plan
# plan NAME CPU MEM_GIB NEEDS LOCK NICE TIMEOUT_S CMD...: one step.
#   NEEDS  steps that must have passed first ("" none); a step whose need
#          failed is not run, and counts as one failure
#   LOCK   "" or a name: steps with the same lock never overlap
#          (hostroot: this machine's packages and plugin directory;
#          altroot: the other Debian's)
#   NICE   1: a build or another CPU-bound host step that no timer waits on,
#          run at nice 10; at most one such step runs at a time
names=()
declare -A P_CPU P_MEM P_NEEDS P_LOCK P_NICE P_TMO P_CMD
plan() {
    local n=$1
    if [ -n "${EVD_ONLY:-}" ] && [[ " $EVD_ONLY " != *" $n "* ]]; then return; fi
    names+=("$n")
    P_CPU[$n]=$2 P_MEM[$n]=$3 P_NEEDS[$n]=$4 P_LOCK[$n]=$5 P_NICE[$n]=$6 P_TMO[$n]=$7
    shift 7
    P_CMD[$n]=$(printf '%q ' "$@")
}

# build DIR TARGETS [configure args]: one build tree; counts as one test
# (passes when it builds). TARGETS: "all" (everything, tests and benchmarks)
# or the make targets the tree's steps run.
build() {
    local dir=$1 targets=$2
    shift 2
    mkdir -p "$dir"
    (
        set -e
        cd "$dir"
        [ -f Makefile ] || "$top/configure" -q "$@"
        if [ "$targets" = all ]; then
            make -j"$jobs" >/dev/null
            make -j"$jobs" check TESTS= >/dev/null
            make -j"$jobs" bench >/dev/null
            make mpi-programs >/dev/null
        else
            # shellcheck disable=SC2086
            make -j"$jobs" $targets >/dev/null
        fi
        echo "ok - build $(basename "$dir") ($targets)"
    )
}
export -f build

host_release=$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID%%.*}")
case "$host_release" in
13) alt_suite=bookworm alt=d12 ;;
*) alt_suite=trixie alt=d13 ;;
esac
altroot_of() { bash "$top/test/vm/make-root.sh" --path "$alt_suite"; }
altroot=$(altroot_of)
vm=$top/test/vm
san_env_asan=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
    LSAN_OPTIONS=suppressions=$top/test/lsan.supp:print_suppressions=0
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
san_env_tsan=(TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1)
soak=${EVD_SOAK_SECONDS:-120}

#     name               cpu mem needs                    lock     nice tmo
plan install-deps        100 0   ""                       hostroot 0 1800 \
    bash -c "bash '$top/test/install-deps.sh' && echo 'ok - install-deps'"
plan autoreconf          50  0   install-deps             ""       0 600 \
    bash -c "cd '$top' && autoreconf -fi && echo 'ok - autoreconf'"
# ---- unit tier: the plain build (everything, -Werror), its unit tests
plan build               200 2   autoreconf               ""       1 1800 \
    build "$top/build" all --enable-werror
# the other Debian's userland (a chroot, made once, then reused)
if [ -z "${EVD_SKIP_ALT:-}" ]; then
    plan $alt-root       100 0   install-deps             altroot  1 1200 \
        bash -c "bash '$vm/make-root.sh' $alt_suite >/dev/null && echo 'ok - $alt_suite userland'"
fi
# siw.ko for the VM kernel from Debian's linux-source (cached)
if [ -z "${EVD_SKIP_VM:-}" ]; then
    plan siw-build       100 0   install-deps             hostroot 0 1200 \
        bash -c "bash '$vm/build-siw.sh' >/dev/null && echo 'ok - siw.ko for the VM kernel'"
fi
plan man-page            25  0   ""                       ""       0 60 \
    bash "$top/man/assemble.sh" --check

# ---- VM tier, plain build. One VM with rxe0/rxe1 on a veth pair: every
# integration suite, the device-removal suites, fi_pingpong, Open MPI, the
# demo, the link flaps (test/integration/run-in-guest.sh).
if [ -z "${EVD_SKIP_VM:-}" ]; then
    plan vm-integration  45  4   build                    ""       0 3000 \
        env EVD_VM_TIMEOUT=2900 "$vm/run-in-vm" -- bash "$top/test/integration/run-in-guest.sh" "$top/build"
    # Two nodes, each its own VM and kernel with rxe on its own NIC, joined by
    # run-nodes' switch (test/vm/README.md, "Multi-node bed"), one boot for
    # three suites: fi_pingpong across them; Open MPI with a rank on each
    # node, checked, a job across a 4 s link flap of one node (must
    # complete) and one whose peer node dies while the survivor waits to
    # receive from it (with heartbeats going, it must get an MPI error and
    # exit); on resumable connections (FI_EVD_RESUME_TIMEOUT) the same job
    # across a 30 s partition and a 30 s link-down of one node (must
    # complete) and across the peer's death (the survivor still gets its
    # error); then the failure matrix (link flap, silent partition, node
    # death and reboot, the death and reboot again on resumable
    # connections, device removal). evd only: verbs beside it is
    # test/bench/verbs-beside.sh.
    plan nodes           120 4   build                    ""       0 2400 \
        env EVD_VM_TIMEOUT=2300 EVD_NODES_MPI_NP=2 \
        EVD_NODES_MPI_PARTS="checked flap partition link-down death death-resume" "$vm/run-nodes" -- \
        bash "$top/test/nodes/suite.sh" "$top/build" pingpong mpi failures
    # Four nodes: Open MPI with 4 ranks, one a node, checked (its allreduce
    # spans four machines); the 4-rank job across a 30 s partition of node A
    # on resumable connections (must complete: its broadcast crosses A),
    # and across a 30 s link-down of node A (must complete);
    # then node A killed under traffic from B, C and D at once (each must
    # see exactly one terminal record per endpoint and reconnect to the
    # rebooted A; the resumable run of it is the two-node bed's).
    plan nodes-4         150 8   build                    ""       0 1500 \
        env EVD_VM_TIMEOUT=1400 EVD_NODES_MPI_PARTS="checked partition link-down" EVD_NODES_MPI_NP=4 \
        EVD_NODES_MPI_FLAP_NP=4 EVD_NODES_RESUME_KILL=0 "$vm/run-nodes" --nodes 4 -- \
        bash "$top/test/nodes/suite.sh" "$top/build" mpi failures:kill
    # The same suites on Soft-iWARP (siw0/siw1 on the veth pair, siw0 on each
    # node): getinfo, CM, data path, async events, removal (fi_evd(7), IWARP);
    # then fi_pingpong, MPI (no peer-death run on siw: an iWARP send completes
    # locally, so the survivor only waits; measured in docs/multi-node.md)
    # and the failure matrix across nodes.
    plan siw-vm-integration 25 4 "build siw-build"        ""       0 3000 \
        env EVD_VM_TIMEOUT=2900 EVD_GUEST_EXTRAS=0 "$vm/run-in-vm" --driver siw -- \
        bash "$top/test/integration/run-in-guest.sh" "$top/build"
    plan nodes-siw       110  4   "build siw-build"        ""       0 2400 \
        env EVD_VM_TIMEOUT=2300 EVD_NODES_MPI_PARTS="checked flap" EVD_NODES_MPI_NP=2 "$vm/run-nodes" --driver siw -- \
        bash "$top/test/nodes/suite.sh" "$top/build" pingpong mpi failures
fi

# ---- sanitizers: each build compiles only what it runs (make
# asan-programs / tsan-programs), the provider at -O1, the tests at -O0
if [ -z "${EVD_SKIP_SAN:-}" ]; then
    plan build-asan      200 2   autoreconf               ""       1 2400 \
        build "$top/build-asan" asan-programs --enable-sanitizers=address,undefined
    plan build-tsan      200 2   autoreconf               ""       1 2400 \
        build "$top/build-tsan" tsan-programs --enable-sanitizers=thread
    plan unit-api-asan   100 0   build-asan               ""       0 900 \
        env "${san_env_asan[@]}" "$top/build-asan/evd_unit_api"
    plan unit-internal-asan 100 0 build-asan              ""       0 900 \
        env "${san_env_asan[@]}" "$top/build-asan/evd_unit_internal"
    # the threaded suites (naming convention: *Thread* in the suite name)
    plan unit-api-tsan   100 0   build-tsan               ""       0 900 \
        env "${san_env_tsan[@]}" "$top/build-tsan/evd_unit_api" --gtest_filter='*Thread*'
    plan unit-internal-tsan 100 0 build-tsan              ""       0 900 \
        env "${san_env_tsan[@]}" "$top/build-tsan/evd_unit_internal" --gtest_filter='*Thread*'
    if [ -z "${EVD_SKIP_VM:-}" ]; then
        # The churn soak (test/integration/soak_rxe.cpp: threads connecting,
        # checking data and disconnecting, a link flap, rxe0 removed and
        # re-created) for EVD_SOAK_SECONDS, then the datagram suite, under
        # TSan with its deadlock detector and under ASan+UBSan
        plan soak-tsan   100 4   build-tsan               ""       0 900 \
            env EVD_VM_TIMEOUT=840 "$vm/run-in-vm" -- \
            bash "$top/test/integration/soak-in-guest.sh" "$top/build-tsan" "$soak"
        plan soak-asan   95 4   build-asan               ""       0 900 \
            env EVD_VM_TIMEOUT=840 "$vm/run-in-vm" -- \
            bash "$top/test/integration/soak-in-guest.sh" "$top/build-asan" "$soak"
        # fault injection (test/fault/run.sh): the ASan build's lifecycle
        # scenario once per failing rdma-core or system call, every call evd
        # makes (EVD_FAULT_CAP=K: K a symbol), each run a fork of one warm
        # process, two at a time on two vCPUs; then once more on a resumable
        # connection (FI_EVD_RESUME_TIMEOUT: the ledgers, the offer and the
        # token, the armed outage and keepalive, and an outage under a send
        # that the connection rides through: the drain, the resume attempt's
        # calls on both sides, the replay; a deadline long enough that no
        # timer fires inside the scenario, so every run counts the same)
        plan vm-fault    120 4   build-asan               ""       0 1200 \
            env EVD_VM_TIMEOUT=1100 EVD_VM_CPUS=2 "$vm/run-in-vm" -- \
            env EVD_FAULT_CAP="${EVD_FAULT_CAP:-0}" bash -c \
            'bash "$1/test/fault/run.sh" "$1/build-asan"; FI_EVD_RESUME_TIMEOUT=600000 EVD_FAULT_LABEL=resumable bash "$1/test/fault/run.sh" "$1/build-asan"' \
            _ "$top"
    fi
fi

# ---- host unit tiers and what the plain build installs
plan unit-api            100 0   build                    ""       0 600 "$top/build/evd_unit_api"
plan unit-internal       100 0   build                    ""       0 600 "$top/build/evd_unit_internal"
# lock rules: clang's thread-safety analysis of prov/src (docs/locking.md)
plan thread-safety       100 0   build                    ""       1 600 \
    env EVD_TSA_JOBS=1 make -s -C "$top/build" thread-safety
plan fi-info-lists-evd   25  0   build                    ""       0 120 \
    bash -c "FI_PROVIDER_PATH='$top/build/.libs' fi_info -l | grep -q '^evd:' && echo 'ok - fi_info -l lists evd'"
# `make install` puts the plugin where stock libfabric finds it with no
# variable (then uninstalls, leaving the machine as it was).
plan install-check       50  0   build                    hostroot 0 300 \
    bash -c "cd '$top/build' && make install >/dev/null && \
    (unset FI_PROVIDER_PATH; fi_info -l | grep -q '^evd:') && echo 'ok - installed evd is found by libfabric with no FI_PROVIDER_PATH'; \
    rc=\$?; make uninstall >/dev/null; exit \$rc"

# ---- fuzzing: libFuzzer over every parser of untrusted bytes (test/fuzz):
# each target replays its committed corpus, then fuzzes EVD_FUZZ_SECONDS
# (the long campaigns are run by hand: test/README.md)
if [ -z "${EVD_SKIP_FUZZ:-}" ]; then
    plan fuzz            200 2   autoreconf               ""       1 1800 \
        bash "$top/test/fuzz/run.sh" "${EVD_FUZZ_SECONDS:-10}"
fi

# ---- Debian packages (debian/): built, installed, found by stock libfabric,
# purged; then installed where the VM boots: no FI_PROVIDER_PATH, MPI passes
if [ -z "${EVD_SKIP_PKG:-}" ]; then
    plan package         200 0   autoreconf               hostroot 1 900 \
        env EVD_DEB_OUT="$results/debs-host" bash "$top/test/package/check-deb.sh"
    if [ -z "${EVD_SKIP_VM:-}" ]; then
        plan package-vm  50  4   package                  hostroot 0 1200 \
            bash "$top/test/package/vm-installed.sh" "$results/debs-host"
    fi
fi

# ---- the other Debian (libfabric 1.17 / 2.1): the same source built in the
# other release's userland (chroot, its g++ and libfabric headers, -Werror),
# its unit tiers, its packages, and the VM tier booted with that userland as
# the guest root, so evd is proven on both libfabrics from either host: a
# Debian 12 host adds Debian 13 (libfabric 2.1, Open MPI 5.0), a Debian 13
# host adds Debian 12 (libfabric 1.17, Open MPI 4.1). Steps are named after
# the release they test (d13-*, d12-*).
if [ -z "${EVD_SKIP_ALT:-}" ]; then
    plan $alt-build      200 2   "$alt-root autoreconf"   ""       1 1800 \
        bash "$vm/in-root.sh" "$altroot" "$top" bash -c "
            set -e; mkdir -p build-$alt; cd build-$alt
            [ -f Makefile ] || ../configure -q --enable-werror
            make -j$jobs >/dev/null; make -j$jobs evd_unit_api evd_unit_internal evd_integration evd_rdm_flap op_cost uffd_shim.so >/dev/null; make mpi-programs >/dev/null
            echo 'ok - build build-$alt (libfabric '\$(pkg-config --modversion libfabric)', -Werror)'"
    plan $alt-unit-api   100 0   $alt-build               ""       0 600 \
        bash "$vm/in-root.sh" "$altroot" "$top/build-$alt" ./evd_unit_api
    plan $alt-unit-internal 100 0 $alt-build              ""       0 600 \
        bash "$vm/in-root.sh" "$altroot" "$top/build-$alt" ./evd_unit_internal
    if [ -z "${EVD_SKIP_VM:-}" ]; then
        # every integration suite and guest check on this userland's
        # libfabric and Open MPI
        plan $alt-vm-integration 45 4 $alt-build          ""       0 3000 \
            env EVD_VM_TIMEOUT=2900 "$vm/run-in-vm" --root "$altroot" -- \
            bash "$top/test/integration/run-in-guest.sh" "$top/build-$alt"
        # the two-node bed with this userland on both nodes: an Open MPI job
        # whose peer node dies while the survivor waits to receive from it,
        # and the job across a 30 s partition on resumable connections over
        # this libfabric's ofi_rxm (must complete) (the checked job and the link flap on this Open MPI run in
        # $alt-vm-integration's guest checks; across nodes, on the host's)
        plan $alt-nodes-mpi 100 4  $alt-build             ""       0 1200 \
            env EVD_VM_TIMEOUT=1100 EVD_NODES_MPI_PARTS="death partition" "$vm/run-nodes" --root "$altroot" -- \
            bash "$top/test/nodes/suite.sh" "$top/build-$alt" mpi
    fi
    if [ -z "${EVD_SKIP_PKG:-}" ]; then
        plan $alt-package 200 0  $alt-root                altroot  1 900 \
            bash "$vm/in-root.sh" "$altroot" "$top" \
            env EVD_DEB_OUT="$results/debs-$alt" bash test/package/check-deb.sh
        if [ -z "${EVD_SKIP_VM:-}" ]; then
            plan $alt-package-vm 50 4 $alt-package        altroot  0 1200 \
                bash "$top/test/package/vm-installed.sh" "$results/debs-$alt" "$altroot"
        fi
    fi
fi

# ------------------------------------------------------------ the runner
total_pass=0
total_fail=0
t_run=$SECONDS
declare -A S_STATE S_PID S_T0 S_T1 S_PASS S_FAIL S_RC S_CPU_USED
for n in "${names[@]}"; do S_STATE[$n]=pending; done
pid_step=()
cpu_used=0 mem_used=0 nice_busy=0
declare -A lock_busy

# the step's own process: its command under a timeout, its exit status and
# the CPU time it and its children took
run_one() {
    local n=$1 log=$results/$1.log
    local -a pre=()
    [ "${P_NICE[$n]}" = 1 ] && pre=(nice -n 10)
    "${pre[@]}" timeout --kill-after=30 "${P_TMO[$n]}" bash -c "${P_CMD[$n]}" >"$log" 2>&1 </dev/null
    local rc=$?
    [ $rc -eq 124 ] && echo "$n: timed out after ${P_TMO[$n]}s" >>"$log"
    times >"$results/.state/$n.times.all"   # (in this shell: a pipe would time the pipe)
    tail -n 1 "$results/.state/$n.times.all" >"$results/.state/$n.times"
    echo "$rc" >"$results/.state/$n.rc"
}
running_list() {
    local n out=
    for n in "${names[@]}"; do [ "${S_STATE[$n]}" = running ] && out+="${out:+, }$n"; done
    echo "${out:-nothing}"
}
start_step() {
    local n=$1
    echo "=== $n (at $((SECONDS - t_run)) s; beside: $(running_list))"
    S_STATE[$n]=running
    S_T0[$n]=$SECONDS
    if [ "${P_NICE[$n]}" = 1 ]; then nice_busy=1; else cpu_used=$((cpu_used + P_CPU[$n])); fi
    mem_used=$((mem_used + P_MEM[$n]))
    [ -n "${P_LOCK[$n]}" ] && lock_busy[${P_LOCK[$n]}]=$n
    run_one "$n" &
    S_PID[$n]=$!
    pid_step[$!]=$n
}
# secs_of "1m2.5s": whole seconds
secs_of() { awk -v t="$1" 'BEGIN { m = 0; if (t ~ /m/) { split(t, a, "m"); m = a[1]; t = a[2] } sub(/s$/, "", t); printf "%d", m * 60 + t + 0.5 }'; }
finish_step() {
    local n=$1 rc log=$results/$1.log counts p f u s
    rc=$(cat "$results/.state/$n.rc" 2>/dev/null || echo 125)
    S_STATE[$n]=done
    S_T1[$n]=$SECONDS
    S_RC[$n]=$rc
    read -r u s <"$results/.state/$n.times" 2>/dev/null || { u=0s; s=0s; }
    S_CPU_USED[$n]=$(( $(secs_of "$u") + $(secs_of "$s") ))
    if [ "${P_NICE[$n]}" = 1 ]; then nice_busy=0; else cpu_used=$((cpu_used - P_CPU[$n])); fi
    mem_used=$((mem_used - P_MEM[$n]))
    [ -n "${P_LOCK[$n]}" ] && unset "lock_busy[${P_LOCK[$n]}]"
    counts=$(python3 "$top/test/count-gtest.py" "$log" "$rc" "$n" 2>>"$log")
    read -r p f <<<"$counts"
    S_PASS[$n]=${p:-0} S_FAIL[$n]=${f:-1}
    total_pass=$((total_pass + S_PASS[$n]))
    total_fail=$((total_fail + S_FAIL[$n]))
    echo "--- $n: ${S_PASS[$n]} passed, ${S_FAIL[$n]} failed (exit $rc, $((S_T1[$n] - S_T0[$n])) s, CPU ${S_CPU_USED[$n]} s, log $log)"
    if [ "${S_FAIL[$n]}" -gt 0 ]; then
        grep -E '^\[  FAILED  \]|^not ok|ERROR: (Address|Leak|Thread)Sanitizer|runtime error:|WARNING: ThreadSanitizer|timed out' "$log" | head -40
        echo "    ... last lines of $log:"
        tail -n 40 "$log" | sed 's/^/    /'
    fi
}
skip_step() {  # NAME NEED: NEED failed, so NAME is not run: one failure
    local n=$1
    S_STATE[$n]=done S_T0[$n]=$SECONDS S_T1[$n]=$SECONDS S_RC[$n]=- S_PASS[$n]=0 S_FAIL[$n]=1 S_CPU_USED[$n]=0
    total_fail=$((total_fail + 1))
    echo "not ok - $n: not run, $2 failed" >"$results/$n.log"
    echo "--- $n: 0 passed, 1 failed (not run: $2 failed)"
}
# ready NAME: 0 to start now, 1 to wait for a need or a lock, 2 when a need
# failed (need in $why), 3 to wait for CPU or memory. $held: the CPU kept
# for the first step of the order that waits for CPU (a later step may only
# start beside it, so a long step is not passed over again and again).
ready() {
    local n=$1 d
    why=
    for d in ${P_NEEDS[$n]}; do
        [ -n "${S_STATE[$d]:-}" ] || continue   # left out of this run
        [ "${S_STATE[$d]}" = done ] || return 1
        if [ "${S_RC[$d]}" != 0 ] || [ "${S_FAIL[$d]}" != 0 ]; then why=$d; return 2; fi
    done
    [ -n "${P_LOCK[$n]}" ] && [ -n "${lock_busy[${P_LOCK[$n]}]:-}" ] && return 1
    if [ -n "${EVD_SERIAL:-}" ]; then
        [ "$(running_list)" = nothing ]; return
    elif [ "${P_NICE[$n]}" = 1 ]; then
        # the builds take whatever CPU the other steps leave, one at a time
        [ "$nice_busy" = 0 ] || return 1
    else
        # nothing else running: any step may start; otherwise it must fit,
        # beside the half core a running build is owed (at nice 10 it
        # would get next to nothing beside busy guests)
        [ "$cpu_used" -eq 0 ] && [ "$mem_used" -eq 0 ] && [ "$nice_busy" = 0 ] && return 0
        local keep=$held
        [ "${P_MEM[$n]}" = 0 ] && keep=0   # a host step: seconds of work, not held back
        [ $((cpu_used + P_CPU[$n] + 50 * nice_busy + keep)) -le "$cpu_cap" ] || return 3
    fi
    [ $((mem_used + P_MEM[$n])) -le "$mem_cap" ] || return 3
    return 0
}
# The order steps are considered in: what others need and the longest VM
# steps first, so that the long poles start as early as they can.
prio="install-deps autoreconf man-page build siw-build unit-api unit-internal fi-info-lists-evd
    install-check build-asan unit-api-asan unit-internal-asan vm-fault nodes vm-integration
    $alt-root $alt-build $alt-unit-api $alt-unit-internal $alt-vm-integration nodes-siw nodes-4
    siw-vm-integration soak-asan build-tsan unit-api-tsan unit-internal-tsan soak-tsan
    $alt-nodes-mpi package package-vm $alt-package $alt-package-vm thread-safety fuzz"
ordered=()
for p in $prio; do [ -n "${P_CMD[$p]:-}" ] && ordered+=("$p"); done
for n in "${names[@]}"; do [[ " ${ordered[*]} " == *" $n "* ]] || ordered+=("$n"); done
names=("${ordered[@]}")
# On an interrupt: each step's timeout (in a process group of its own) and
# what runs under it, then the steps' own shells.
trap 'trap - INT TERM; for p in $(jobs -p); do pkill -TERM -P "$p"; done; kill $(jobs -p) 2>/dev/null
      echo "test command interrupted"; exit 130' INT TERM

echo "# test command: ${#names[@]} steps, $jobs cores (CPU cap $cpu_cap %, VM memory cap $mem_cap GiB), budget $budget s"
# soon NAME: every need of NAME has passed or is running (NAME will be ready
# once those end)
soon() {
    local d
    for d in ${P_NEEDS[$1]}; do
        case ${S_STATE[$d]:-} in running | "") ;; done) [ "${S_RC[$d]}" = 0 ] || return 1 ;; *) return 1 ;; esac
    done
}
while :; do
    left=0
    reserved=
    held=0
    for n in "${names[@]}"; do
        [ "${S_STATE[$n]}" = pending ] || continue
        left=$((left + 1))
        # the build slot is kept for the first build in the order whose
        # needs are under way, not given to a later one meanwhile
        if [ "${P_NICE[$n]}" = 1 ] && [ -n "$reserved" ]; then continue; fi
        ready "$n"
        case $? in
        0) start_step "$n" ;;
        2) skip_step "$n" "$why"; left=$((left - 1)) ;;
        1) [ "${P_NICE[$n]}" = 1 ] && soon "$n" && reserved=$n ;;
        3) if [ "${P_NICE[$n]}" = 1 ]; then reserved=$n; elif [ "$held" = 0 ]; then held=${P_CPU[$n]}; fi ;;
        esac
    done
    nrun=0
    for n in "${names[@]}"; do [ "${S_STATE[$n]}" = running ] && nrun=$((nrun + 1)); done
    [ "$nrun" -eq 0 ] && [ "$left" -eq 0 ] && break
    if [ "$nrun" -eq 0 ]; then
        for n in "${names[@]}"; do [ "${S_STATE[$n]}" = pending ] && skip_step "$n" "the plan (no step could start)"; done
        break
    fi
    done_pid=
    wait -n -p done_pid
    n=${pid_step[${done_pid:-0}]:-}
    if [ -n "$n" ]; then
        finish_step "$n"
    else
        # bash keeps no status for a step's shell that a signal ended: end
        # every running step whose shell is gone (no rc file: counted as 125)
        for n in "${names[@]}"; do
            [ "${S_STATE[$n]}" = running ] && ! kill -0 "${S_PID[$n]}" 2>/dev/null && finish_step "$n"
        done
    fi
done

# ------------------------------------------------------------ the summary
t_total=$((SECONDS - t_run))
sum=0
for n in "${names[@]}"; do sum=$((sum + S_T1[$n] - S_T0[$n])); done
echo
echo "Time: every step, in the order it started (start and end: seconds into the run;"
echo "share: of the $sum s that all steps took together, $t_total s of wall time)"
printf '%-22s %6s %6s %6s %6s %6s  %s\n' step start end secs share cpu_s result
for n in $(for n in "${names[@]}"; do echo "${S_T0[$n]} $n"; done | sort -n | awk '{ print $2 }'); do
    d=$((S_T1[$n] - S_T0[$n]))
    printf '%-22s %6d %6d %6d %5d%% %6d  %s passed, %s failed\n' "$n" $((S_T0[$n] - t_run)) \
        $((S_T1[$n] - t_run)) "$d" $((sum > 0 ? (100 * d + sum / 2) / sum : 0)) "${S_CPU_USED[$n]}" \
        "${S_PASS[$n]}" "${S_FAIL[$n]}"
done
if [ "$t_total" -le "$budget" ]; then
    verdict="within the budget of $budget s ($((100 * t_total / budget))%)"
else
    verdict="OVER the budget of $budget s by $((t_total - budget)) s"
fi
echo "total: $t_total s ($((t_total / 60)) min $((t_total % 60)) s) of wall time, $verdict"
echo "results in $results"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
