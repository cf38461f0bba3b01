#!/usr/bin/env bash
# Fault injection on rxe (inside the VM: test/vm/run-in-vm). Usage:
#   run.sh BUILD_DIR [SYMBOL[:N]]...
# BUILD_DIR is an ASan build (configure --enable-sanitizers=address,undefined,
# `make check TESTS=` done). Runs evd_fault_scenario once with no fault,
# counting the calls evd makes to each wrapped rdma-core and system entry
# (test/fault/interpose.cpp), then once per site SYMBOL#N, N from 1 to that
# count, with that one call failing: every call evd makes, or with
# EVD_FAULT_CAP=K at most K per symbol (the first and the last K/2). Each
# site is a fork of one process that has gone through libfabric's start-up
# (scenario.cpp, --serve; EVD_FAULT_COLD=1: a process of its own, five times
# the cost under TCG). A site passes when the scenario either completes or stops at an
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
cap=${EVD_FAULT_CAP:-0}   # 0: every call
# EVD_FAULT_LABEL: named in every line, so two passes (the resumable one,
# FI_EVD_RESUME_TIMEOUT set) tell their sites apart
label=${EVD_FAULT_LABEL:+ ($EVD_FAULT_LABEL)}
scenario=$build/evd_fault_scenario
lib=$build/.libs/libevd_fault.so
for f in "$scenario" "$lib"; do
    if [ ! -e "$f" ]; then
        echo "not ok - fault injection$label: $f is missing (make check TESTS=)"
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

# Every run ends with a line "K RC SECS" on the completion FIFO (fd 8): K
# the run's number (its files in $work/K: out, counts), RC its exit status,
# SECS its seconds. The runner reads these lines with bash's own read: under
# TCG every process the runner starts costs a tenth of a second, as much as
# a forked run of the scenario itself.
mkfifo "$work/done" "$work/req"
exec 8<>"$work/done"

# tenths SINCE: seconds since EPOCHREALTIME value SINCE, as "S.T"
tenths() {
    local now=${EPOCHREALTIME/./} t0=${1/./}
    local d=$(((now - t0) / 100000))
    echo "$((d / 10)).$((d % 10))"
}

# cold SPEC K: the scenario as a process of its own, with fault SPEC ("" none)
cold() {
    local d=$work/$2 t0=$EPOCHREALTIME rc
    mkdir -p "$d"
    timeout -k 5 90 env EVD_FAULT="$1" EVD_FAULT_COUNT="$d/counts" LD_PRELOAD="$lib" \
        "$scenario" >"$d/out" 2>&1
    rc=$?
    echo "$2 $rc $(tenths "$t0")" >&8
}

# The fork server (scenario.cpp, --serve): libfabric's start-up once, then a
# forked run a site; its call numbers go on from the server's, so SYMBOL:N
# is the same call as in a cold run. Used only when a run it serves without
# a fault counts every call a cold run counts (the waits excepted, whose
# number varies from run to run); EVD_FAULT_COLD=1: every site cold.
serving=0 server=
# served SPEC: SPEC goes to the server (it runs, and SYMBOL:N is not a call
# its own start-up made: such a site runs cold)
declare -A before=()
served() {
    [ "$serving" = 1 ] || return 1
    # gone (a write to its FIFO would end this script with SIGPIPE): cold
    kill -0 "$server" 2>/dev/null || return 1
    [ -z "$1" ] && return 0
    [ "${1##*:}" -gt "${before[${1%:*}]:-0}" ]
}
# start SPEC K: run K with fault SPEC, served or cold (in the background)
start() {
    if served "$1"; then
        echo "${1:--} $work/$2 $2" >&9
    else
        cold "$1" "$2" &
    fi
}
# finish: reads one completion into rcs[K] / secs[K]; false when none came
# within 200 s (every run is bounded at 95 s: the server is gone)
declare -A rcs=() secs=()
finish() {
    local k rc t
    read -r -t 200 -u 8 k rc t || return 1
    rcs[$k]=$rc secs[$k]=$t
    finished=$k
}
# out_facts K: from run K's files: saw (what the application saw), san (the
# first sanitizer reports), fired (the fault was injected)
out_facts() {
    local d=$work/$1 line a n=0
    local re='ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: .*Sanitizer'
    saw= san= fired=
    if [ -e "$d/out" ]; then
        while IFS= read -r line; do
            [[ -z $saw && $line == saw:* ]] && saw=${line#saw: }
            if [ "$n" -lt 3 ] && [[ $line =~ $re ]]; then
                san+="${san:+ }$line" n=$((n + 1))
            fi
        done <"$d/out"
    fi
    if [ -e "$d/counts" ]; then
        while read -r a _; do [ "$a" = fired ] && fired=1; done <"$d/counts"
    fi
    return 0
}

k_base=cold0 k_wbase=warm0
cold "" "$k_base"
finish && [ "$finished" = "$k_base" ] || rcs[$k_base]=137
out_facts "$k_base"
rc=${rcs[$k_base]}
if [ "$rc" -ne 0 ] || [ -n "$san" ] || [ ! -s "$work/$k_base/counts" ]; then
    echo "not ok - fault injection$label: the scenario without a fault (exit $rc)"
    tail -n 40 "$work/$k_base/out" | sed 's/^/#   /'
    exit 0
fi
echo "ok - fault injection$label: the scenario without a fault (saw: $saw)"
cp "$work/$k_base/counts" "$work/base"
echo "# calls from evd per wrapped symbol (no fault):"
sed 's/^/#   /' "$work/base"

waits='^(rdma_get_cm_event|epoll_wait|poll|ppoll) '
if [ -z "${EVD_FAULT_COLD:-}" ]; then
    env -u EVD_FAULT -u EVD_FAULT_COUNT LD_PRELOAD="$lib" "$scenario" --serve "$work/prefork" \
        <"$work/req" 3>&8 >"$work/serve.out" 2>&1 &
    server=$!
    exec 9>"$work/req"
    serving=1
    start "" "$k_wbase"
    finish && [ "$finished" = "$k_wbase" ] || rcs[$k_wbase]=137
    why=
    if ! kill -0 "$server" 2>/dev/null; then
        why="it ended at its start"
    elif [ "${rcs[$k_wbase]}" -ne 0 ]; then
        why="its run without a fault: exit ${rcs[$k_wbase]}"
    elif [ ! -e "$work/prefork" ]; then
        why="no start-up counts"
    elif ! diff <(grep -vE "$waits" "$work/base") <(grep -vE "$waits" "$work/$k_wbase/counts") >"$work/wdiff"; then
        why="its run without a fault counts differently: $(grep '^[<>]' "$work/wdiff" | head -4 | tr '\n' ' ')"
    fi
    if [ -n "$why" ]; then
        # (a failure: the sites still run, cold, at five times the cost)
        echo "not ok - fault injection$label: the fork server is not used, every site runs cold" \
            "($why; $(head -c 300 "$work/serve.out" | tr '\n' ' '))"
        serving=0
        exec 9>&-
    else
        pre=
        while read -r a n; do before[$a]=$n pre+="${pre:+, }$a $n"; done <"$work/prefork"
        echo "# fault injection: each site a fork of one process past libfabric's start-up" \
            "(calls evd made in that start-up, whose sites run cold: ${pre:-none})"
    fi
fi

# picks(COUNT): the call numbers faulted for a symbol called COUNT times: all
# of them, or the first and the last cap/2 when there are more than cap (the
# early calls are often probes, the late ones the objects the scenario keeps).
picks() {
    local n=$1
    if [ "$cap" -eq 0 ] || [ "$n" -le "$cap" ]; then
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
        [ "$cap" -gt 0 ] && [ "$n" -gt "$cap" ] && echo "# $sym: $n calls, the first $((cap / 2)) and the last $((cap - cap / 2)) faulted"
        for i in $(picks "$n"); do sites+=("$sym:$i"); done
    done <"$work/base"
fi

# report K: the ok / not ok line of site K
report() {
    local k=$1 site=${sites[$1]} rc=${rcs[$1]} t=${secs[$1]:-?} why=
    local name="${site%:*}#${site##*:}"
    out_facts "$k"
    if [ -z "$fired" ] && [ "$rc" -eq 0 ] && [ -z "$san" ]; then
        # call counts of waits vary from run to run: this call did not happen
        echo "# fault $name: not reached in this run ($t s)"
        unreached=$((unreached + 1))
        return
    fi
    exercised=$((exercised + 1))
    [ -n "$san" ] && why="sanitizer report: $san"
    [ -z "$why" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ] && why="exit $rc"
    [ -z "$why" ] && [ -z "$fired" ] && why="fault not reached, exit $rc"
    if [ -z "$why" ]; then
        echo "ok - fault$label $name: ${saw:-?} ($t s)"
        passed=$((passed + 1))
    else
        echo "not ok - fault$label $name: $why; saw: ${saw:-?} ($t s)"
        grep -v '^saw:' "$work/$k/out" 2>/dev/null | tail -n 30 | sed 's/^/#   /'
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
        start "${sites[next]}" "$next"
        next=$((next + 1)) running=$((running + 1))
    done
    if finish; then
        running=$((running - 1))
    else
        # no run ended within its bound: the server is gone; what it had
        # is lost, the rest run cold
        for ((k = done_upto; k < next; ++k)); do [ -n "${rcs[$k]:-}" ] || rcs[$k]=137; done
        running=0 serving=0
    fi
    # report every site, in order, whose run has ended
    while [ "$done_upto" -lt "$next" ] && [ -n "${rcs[$done_upto]:-}" ]; do
        report "$done_upto"
        done_upto=$((done_upto + 1))
    done
done
[ "$serving" = 1 ] && exec 9>&-
wait
echo "# fault injection$label: $exercised distinct sites exercised, $passed passed," \
    "$((exercised - passed)) failed ($unreached not reached, $([ "$cap" -eq 0 ] && echo "every call" || echo "cap $cap calls per symbol"))"
