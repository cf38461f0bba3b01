#!/usr/bin/env bash
# Fault injection on rxe (inside the VM: test/vm/run-in-vm). Usage:
#   run.sh BUILD_DIR [SYMBOL[:N]]...
# BUILD_DIR is an ASan build (configure --enable-sanitizers=address,undefined,
# `make check TESTS=` done). Runs evd_fault_scenario once with no fault,
# counting the calls evd makes to each wrapped rdma-core and system entry
# (test/fault/interpose.cpp), then once per site SYMBOL#N, N from 1 to that
# count (at most EVD_FAULT_CAP, default 8, per symbol:
# the first and the last 4), with that one call
# failing. A site passes when the scenario either completes or stops at an
# FI_E* return or an EQ/CQ error entry, closes every object with fi_close
# returning 0, waits no longer than its bound, and exits with no ASan, LSan or
# UBSan report. Prints "ok - fault SYMBOL#N: <what the application saw>" or
# "not ok - ..." per site, then the number of distinct sites exercised and
# passed. Arguments SYMBOL or SYMBOL:N run only those sites.
set -u
build=$(cd "${1:?usage: run.sh BUILD_DIR [SYMBOL[:N]]...}" && pwd)
shift
top=$(cd "$(dirname "$0")/../.." && pwd)
: "${EVD_VM_ADDR0:?not inside the evd VM (EVD_VM_ADDR0 unset)}"
cap=${EVD_FAULT_CAP:-8}
scenario=$build/evd_fault_scenario
lib=$build/.libs/libevd_fault.so
for f in "$scenario" "$lib"; do
    if [ ! -e "$f" ]; then
        echo "not ok - fault injection: $f is missing (make check TESTS=)"
        exit 0
    fi
done
export FI_PROVIDER_PATH="$build/.libs" FI_PROVIDER=evd
# connection-setup deadlines armed (their timer fd is one of the sites)
export FI_EVD_CONNECT_TIMEOUT=20000
ulimit -l unlimited 2>/dev/null || true
# The interposer is preloaded in front of the ASan runtime (on purpose: ASan's
# interceptors are then what it calls next).
export ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1:halt_on_error=1:abort_on_error=0
export LSAN_OPTIONS=suppressions=$top/test/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
work=$(mktemp -d /tmp/evd-fault.XXXXXX)
trap 'rm -rf "$work"' EXIT

# one SPEC DIR: runs the scenario with fault SPEC ("" for none): exit code in
# DIR/rc, its output in DIR/out, the interposer's counts in DIR/counts.
one() {
    mkdir -p "$2"
    rm -f "$2/counts"
    local t0=$EPOCHREALTIME
    timeout -k 5 90 env EVD_FAULT="$1" EVD_FAULT_COUNT="$2/counts" LD_PRELOAD="$lib" \
        "$scenario" >"$2/out" 2>&1
    local rc=$?
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }' >"$2/secs"
    echo $rc >"$2/rc.tmp" && mv -f "$2/rc.tmp" "$2/rc"
}
sanitizer_report() {  # sanitizer_report DIR
    grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: .*Sanitizer' "$1/out" | head -3
}

one "" "$work/base.d"
rc=$(cat "$work/base.d/rc")
if [ "$rc" -ne 0 ] || [ -n "$(sanitizer_report "$work/base.d")" ] || [ ! -s "$work/base.d/counts" ]; then
    echo "not ok - fault injection: the scenario without a fault (exit $rc)"
    tail -n 40 "$work/base.d/out" | sed 's/^/#   /'
    exit 0
fi
echo "ok - fault injection: the scenario without a fault ($(grep '^saw:' "$work/base.d/out"))"
cp "$work/base.d/counts" "$work/base"
echo "# calls from evd per wrapped symbol (no fault):"
sed 's/^/#   /' "$work/base"

# picks(COUNT): the call numbers faulted for a symbol called COUNT times: all
# of them, or the first and the last cap/2 when there are more than cap (the
# early calls are often probes, the late ones the objects the scenario keeps).
picks() {
    local n=$1
    if [ "$n" -le "$cap" ]; then
        seq 1 "$n"
    else
        seq 1 $((cap / 2))
        seq $((n - (cap - cap / 2) + 1)) "$n"
    fi
}
sites=()
if [ $# -gt 0 ]; then
    for a in "$@"; do
        case $a in
        *:*) sites+=("$a") ;;
        *) n=$(awk -v s="$a" '$1 == s {print $2}' "$work/base")
           for i in $(picks "${n:-0}"); do sites+=("$a:$i"); done ;;
        esac
    done
else
    while read -r sym n; do
        [ "$n" -gt "$cap" ] && echo "# $sym: $n calls, the first $((cap / 2)) and the last $((cap - cap / 2)) faulted"
        for i in $(picks "$n"); do sites+=("$sym:$i"); done
    done <"$work/base"
fi

# report SPEC DIR: the ok / not ok line of one site
report() {
    local site=$1 d=$2 name="${1%:*}#${1##*:}" rc saw san why= secs
    rc=$(cat "$d/rc")
    secs=$(cat "$d/secs" 2>/dev/null || echo "?")
    saw=$(grep -m1 '^saw:' "$d/out" | sed 's/^saw: //')
    san=$(sanitizer_report "$d")
    if ! grep -q '^fired ' "$d/counts" 2>/dev/null && [ "$rc" -eq 0 ] && [ -z "$san" ]; then
        # call counts of waits vary from run to run: this call did not happen
        echo "# fault $name: not reached in this run ($secs s)"
        unreached=$((unreached + 1))
        return
    fi
    exercised=$((exercised + 1))
    [ -n "$san" ] && why="sanitizer report: $san"
    [ -z "$why" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ] && why="exit $rc"
    [ -z "$why" ] && ! grep -q '^fired ' "$d/counts" 2>/dev/null && why="fault not reached, exit $rc"
    if [ -z "$why" ]; then
        echo "ok - fault $name: ${saw:-?} ($secs s)"
        passed=$((passed + 1))
    else
        echo "not ok - fault $name: $why; saw: ${saw:-?} ($secs s)"
        grep -v '^saw:' "$d/out" | tail -n 30 | sed 's/^/#   /'
    fi
}

# EVD_FAULT_JOBS scenarios at a time (default: the guest's CPUs): a new one
# starts as soon as any ends (a site that waits out a bound does not hold
# the others up); reported in order.
jobs=${EVD_FAULT_JOBS:-$(nproc 2>/dev/null || echo 1)}
exercised=0 passed=0 unreached=0
next=0 done_upto=0 running=0
while [ "$done_upto" -lt ${#sites[@]} ]; do
    while [ "$running" -lt "$jobs" ] && [ "$next" -lt ${#sites[@]} ]; do
        one "${sites[next]}" "$work/$next" &
        next=$((next + 1)) running=$((running + 1))
    done
    wait -n
    if [ $? -eq 127 ]; then   # (one() itself always ends with status 0)
        # no job left to wait for, yet sites without an exit status: a run
        # was killed before it wrote one
        for ((k = done_upto; k < next; ++k)); do
            [ -e "$work/$k/rc" ] || echo 137 >"$work/$k/rc"
        done
        running=0
    else
        running=$((running - 1))
    fi
    # report every site, in order, whose run has ended
    while [ "$done_upto" -lt "$next" ] && [ -e "$work/$done_upto/rc" ]; do
        report "${sites[done_upto]}" "$work/$done_upto"
        rm -rf "${work:?}/$done_upto"
        done_upto=$((done_upto + 1))
    done
done
wait
echo "# fault injection: $exercised distinct sites exercised, $passed passed," \
    "$((exercised - passed)) failed ($unreached not reached, cap $cap calls per symbol)"
