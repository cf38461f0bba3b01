#!/usr/bin/env bash
# The project's test command: installs what is missing, builds evd three ways
# (plain, ASan+UBSan, TSan), runs the unit tests of each, fuzzes the parsers
# of untrusted bytes (clang, libFuzzer), then the integration tests on
# Soft-RoCE inside the project's VM, and fault injection there (test/fault:
# the ASan build, one failing rdma-core or system call per run). Its last line is
# "N passed, N failed" (what CI reads). Exit status 0 only when nothing failed.
#
#   bash test/run-all.sh            everything
#   EVD_SKIP_VM=1 bash test/run-all.sh      no VM tier (quick local loop; CI never sets it)
#   EVD_SKIP_SAN=1 bash test/run-all.sh     no sanitizer builds and so no fault injection
#                                           (quick local loop)
#   EVD_SKIP_FUZZ=1 / EVD_FUZZ_SECONDS=N     no fuzzing / N seconds per fuzz target
#   EVD_SOAK_SECONDS=N                      length of each sanitizer soak in the VM (default 120)
#   EVD_SKIP_ALT=1 bash test/run-all.sh     no pass in the other Debian release's userland (quick
#                                           local loop; EVD_SKIP_D13=1 is the old name)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
results="$top/test-results"
rm -rf "$results"
mkdir -p "$results"
jobs=$(nproc 2>/dev/null || echo 2)
total_pass=0
total_fail=0

# step NAME TIMEOUT_S CMD...: runs one step, counts its tests, shows failures.
step() {
    local name=$1 tmo=$2
    shift 2
    local log="$results/$name.log"
    local t0=$SECONDS
    echo "=== $name"
    timeout --kill-after=30 "$tmo" "$@" >"$log" 2>&1 </dev/null
    local rc=$?
    [ $rc -eq 124 ] && echo "$name: timed out after ${tmo}s" >>"$log"
    local counts p f
    counts=$(python3 "$top/test/count-gtest.py" "$log" "$rc" "$name" 2>>"$log")
    read -r p f <<<"$counts"
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    echo "--- $name: $p passed, $f failed (exit $rc, $((SECONDS - t0)) s, log $log)"
    if [ "$f" -gt 0 ]; then
        grep -E '^\[  FAILED  \]|^not ok|ERROR: (Address|Leak|Thread)Sanitizer|runtime error:|WARNING: ThreadSanitizer|timed out' "$log" | head -40
        echo "    ... last lines of $log:"
        tail -n 40 "$log" | sed 's/^/    /'
    fi
    return 0
}

# build DIR [configure args]: one build tree; counts as one test (passes when it builds).
build() {
    local dir=$1
    shift
    mkdir -p "$dir"
    (
        set -e
        cd "$dir"
        [ -f Makefile ] || "$top/configure" -q "$@"
        make -j"$jobs" >/dev/null
        make -j"$jobs" check TESTS= >/dev/null
        make -j"$jobs" bench >/dev/null
        echo "ok - build $(basename "$dir")"
    )
}
export -f build
export top jobs

step install-deps 1800 bash -c "bash '$top/test/install-deps.sh' && echo 'ok - install-deps'"
step autoreconf 600 bash -c "cd '$top' && autoreconf -fi && echo 'ok - autoreconf'"

# ------------------------------------------------------------ unit tier
step build 1800 bash -c 'build "$@"' _ "$top/build" --enable-werror
step unit-api 600 "$top/build/evd_unit_api"
step unit-internal 600 "$top/build/evd_unit_internal"
# the plugin is visible to stock libfabric tools
step man-page 60 bash "$top/man/assemble.sh" --check
# `make install` puts the plugin where stock libfabric finds it with no
# variable (then uninstalls, leaving the machine as it was).
step install-check 300 bash -c "cd '$top/build' && make install >/dev/null && \
    (unset FI_PROVIDER_PATH; fi_info -l | grep -q '^evd:') && echo 'ok - installed evd is found by libfabric with no FI_PROVIDER_PATH'; \
    rc=\$?; make uninstall >/dev/null; exit \$rc"
# Debian packages (debian/): built, installed, found by stock libfabric, purged.
step package 900 env EVD_DEB_OUT="$results/debs-host" bash "$top/test/package/check-deb.sh"
step fi-info-lists-evd 120 bash -c "FI_PROVIDER_PATH='$top/build/.libs' fi_info -l | grep -q '^evd:' && echo 'ok - fi_info -l lists evd'"

if [ -z "${EVD_SKIP_SAN:-}" ]; then
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
    export LSAN_OPTIONS=suppressions=$top/test/lsan.supp:print_suppressions=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    step build-asan 2400 bash -c 'build "$@"' _ "$top/build-asan" --enable-sanitizers=address,undefined
    step unit-api-asan 900 "$top/build-asan/evd_unit_api"
    step unit-internal-asan 900 "$top/build-asan/evd_unit_internal"
    unset ASAN_OPTIONS LSAN_OPTIONS
    export TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1
    step build-tsan 2400 bash -c 'build "$@"' _ "$top/build-tsan" --enable-sanitizers=thread
    # the threaded suites (naming convention: *Thread* in the suite name)
    step unit-api-tsan 900 "$top/build-tsan/evd_unit_api" --gtest_filter='*Thread*'
    step unit-internal-tsan 900 "$top/build-tsan/evd_unit_internal" --gtest_filter='*Thread*'
    unset TSAN_OPTIONS UBSAN_OPTIONS
fi

# ------------------------------------------------------------ fuzzing
# libFuzzer over every parser of untrusted bytes (test/fuzz), a minute each.
if [ -z "${EVD_SKIP_FUZZ:-}" ]; then
    step fuzz 1800 bash "$top/test/fuzz/run.sh" "${EVD_FUZZ_SECONDS:-60}"
fi

# ------------------------------------------------------------ VM tier (rxe)
if [ -z "${EVD_SKIP_VM:-}" ]; then
    step vm-integration 3000 env EVD_VM_TIMEOUT=2900 "$top/test/vm/run-in-vm" -- bash "$top/test/integration/run-in-guest.sh" "$top/build"
    # The same suites on Soft-iWARP (siw0/siw1 on the veth pair; siw.ko built
    # for the VM's kernel from Debian's linux-source, cached): getinfo, CM,
    # data path, async events, removal (fi_evd(7), IWARP); fi_pingpong and MPI
    # run on siw across the nodes below
    step siw-build 1200 bash -c "bash '$top/test/vm/build-siw.sh' && echo 'ok - siw.ko for the VM kernel'"
    step siw-vm-integration 3000 env EVD_VM_TIMEOUT=2900 EVD_GUEST_EXTRAS=0 "$top/test/vm/run-in-vm" --driver siw -- \
        bash "$top/test/integration/run-in-guest.sh" "$top/build"
    # The churn soak (test/integration/soak_rxe.cpp: threads connecting,
    # checking data and disconnecting, a link flap, rxe0 removed and
    # re-created), EVD_SOAK_SECONDS (default 120) under TSan with its deadlock
    # detector and under ASan+UBSan; about 3 minutes each with the VM boot.
    if [ -z "${EVD_SKIP_SAN:-}" ]; then
        for san in tsan asan; do
            step soak-$san 900 env EVD_VM_TIMEOUT=840 "$top/test/vm/run-in-vm" -- \
                bash "$top/test/integration/soak-in-guest.sh" "$top/build-$san" "${EVD_SOAK_SECONDS:-120}"
        done
        # fault injection (test/fault/run.sh): the ASan build's lifecycle scenario
        # once per failing rdma-core or system call, two at a time on two vCPUs;
        # the first 2 and last 2 calls of each symbol (EVD_FAULT_CAP=4) keep it
        # at a few minutes (run.sh's own default, 8, takes about twice as long)
        step vm-fault 1200 env EVD_VM_TIMEOUT=1100 EVD_VM_CPUS=2 "$top/test/vm/run-in-vm" -- \
            env EVD_FAULT_CAP="${EVD_FAULT_CAP:-4}" bash "$top/test/fault/run.sh" "$top/build-asan"
    fi
    # Two nodes, each its own VM and kernel with rxe on its own NIC, joined by
    # run-nodes' switch (test/vm/README.md, "Multi-node bed"): fi_pingpong
    # across them, the failure matrix (link flap, silent partition, node
    # death and reboot, device removal) and Open MPI, evd beside verbs.
    step nodes-pingpong 900 env EVD_VM_TIMEOUT=800 "$top/test/vm/run-nodes" -- \
        bash "$top/test/nodes/pingpong.sh" "$top/build"
    step nodes-failures 1800 env EVD_VM_TIMEOUT=1600 "$top/test/vm/run-nodes" -- \
        bash "$top/test/nodes/failures.sh" "$top/build"
    # Open MPI with ranks on both nodes (2 and 4), checked data, evd;ofi_rxm
    # (verbs;ofi_rxm reported beside it); then a job across a 4 s link flap of
    # one node (must complete) and one whose peer node dies while the survivor
    # waits to receive from it (with heartbeats going, it must get an MPI error
    # and exit)
    step nodes-mpi 1200 env EVD_VM_TIMEOUT=1100 "$top/test/vm/run-nodes" -- \
        bash "$top/test/nodes/mpi.sh" "$top/build"
    # Four nodes: Open MPI with 4 and 8 ranks spread over all four, then node
    # A killed under traffic from B, C and D at once (each must see exactly
    # one terminal record per endpoint and reconnect to the rebooted A);
    # evd only, verbs is measured beside it in the two-node steps. The
    # rebooted A goes straight to the failure suite.
    step nodes-4 1500 env EVD_VM_TIMEOUT=1400 EVD_NODES_MPI_PARTS=checked EVD_NODES_VERBS=0 "$top/test/vm/run-nodes" --nodes 4 -- \
        bash -c '{ [ "$EVD_NODE_BOOT" != 0 ] || bash "$1/test/nodes/mpi.sh" "$1/build"; } && bash "$1/test/nodes/failures.sh" "$1/build" kill' _ "$top"
    # The same suites on Soft-iWARP, siw0 on each node (siw-build above).
    step nodes-siw-pingpong 900 env EVD_VM_TIMEOUT=800 "$top/test/vm/run-nodes" --driver siw -- \
        bash "$top/test/nodes/pingpong.sh" "$top/build"
    step nodes-siw-failures 1800 env EVD_VM_TIMEOUT=1600 "$top/test/vm/run-nodes" --driver siw -- \
        bash "$top/test/nodes/failures.sh" "$top/build"
    # (no peer-death run on siw: an iWARP send completes locally, so the
    # survivor only waits; measured once in docs/multi-node.md)
    step nodes-siw-mpi 1200 env EVD_VM_TIMEOUT=1100 EVD_NODES_MPI_PARTS="checked flap" "$top/test/vm/run-nodes" --driver siw -- \
        bash "$top/test/nodes/mpi.sh" "$top/build"
    # evd installed from its package: found with no variable, MPI passes
    step package-vm 1200 bash "$top/test/package/vm-installed.sh" "$results/debs-host"
fi

# ----------------------------------- the other Debian (libfabric 1.17 / 2.1)
# The same source built in the other Debian release's userland (chroot, its
# g++ and libfabric headers, -Werror), its unit tiers, its packages, and the
# VM tier booted with that userland as the guest root, so evd is proven on
# both libfabrics from either host: a Debian 12 host adds Debian 13
# (libfabric 2.1), a Debian 13 host adds Debian 12 (libfabric 1.17).
# Steps are named after the release they test (d13-*, d12-*).
host_release=$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID%%.*}")
case "$host_release" in
13) alt_suite=bookworm alt=d12 ;;
*) alt_suite=trixie alt=d13 ;;
esac
if [ -z "${EVD_SKIP_ALT:-${EVD_SKIP_D13:-}}" ]; then
    step $alt-root 1200 bash -c "bash '$top/test/vm/make-root.sh' $alt_suite && echo 'ok - $alt_suite userland'"
    if altroot=$(bash "$top/test/vm/make-root.sh" $alt_suite 2>/dev/null); then
        step $alt-build 1800 bash "$top/test/vm/in-root.sh" "$altroot" "$top" bash -c "
            set -e; mkdir -p build-$alt; cd build-$alt
            [ -f Makefile ] || ../configure -q --enable-werror
            make -j$jobs >/dev/null; make -j$jobs check TESTS= >/dev/null; make -j$jobs bench >/dev/null
            echo 'ok - build build-$alt (libfabric '\$(pkg-config --modversion libfabric)', -Werror)'"
        step $alt-unit-api 600 bash "$top/test/vm/in-root.sh" "$altroot" "$top/build-$alt" ./evd_unit_api
        step $alt-unit-internal 600 bash "$top/test/vm/in-root.sh" "$altroot" "$top/build-$alt" ./evd_unit_internal
        step $alt-package 900 bash "$top/test/vm/in-root.sh" "$altroot" "$top" \
            env EVD_DEB_OUT="$results/debs-$alt" bash test/package/check-deb.sh
        if [ -z "${EVD_SKIP_VM:-}" ]; then
            step $alt-vm-integration 3000 env EVD_VM_TIMEOUT=2900 "$top/test/vm/run-in-vm" --root "$altroot" -- \
                bash "$top/test/integration/run-in-guest.sh" "$top/build-$alt"
            # the two-node bed with this userland on both nodes: Open MPI
            # (5.0 on Debian 13, 4.1 on Debian 12) across the nodes, checked,
            # through a link flap and through the peer node's death; evd only
            # (verbs is measured beside it in nodes-mpi; on this userland by
            # hand, docs/multi-node.md)
            step $alt-nodes-mpi 1200 env EVD_VM_TIMEOUT=1100 EVD_NODES_VERBS=0 "$top/test/vm/run-nodes" --root "$altroot" -- \
                bash "$top/test/nodes/mpi.sh" "$top/build-$alt"
            # evd installed from its package: found with no variable, MPI passes
            step $alt-package-vm 1200 bash "$top/test/package/vm-installed.sh" "$results/debs-$alt" "$altroot"
        fi
    fi
fi

echo
echo "results in $results"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
