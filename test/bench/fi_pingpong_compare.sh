#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Stock fi_pingpong (libfabric-bin) on evd and on verbs, alternating, same
# devices: server on rxe0, client on rxe1. Run inside the VM with --cross
# (fi_pingpong does not bind its client's source address; --cross routes an
# unbound client of 192.0.2.1 out of rxe1) and 2 vCPUs (server and client
# are two busy-polling processes: on one vCPU each round trip waits for a
# scheduler tick, 4 ms, whatever the provider):
#   test/vm/run-in-vm --cross --cpus 2 -- test/bench/fi_pingpong_compare.sh BUILD_DIR [ROUNDS] [ITERS]
# Prints one line per provider, round and size, then the medians:
#   provider size usec/xfer MB/s
set -u
build=${1:?usage: $0 BUILD_DIR [ROUNDS] [ITERS]}
rounds=${2:-3}
iters=${3:-1000}
export FI_PROVIDER_PATH=$(cd "$build" && pwd)/.libs
addr=${EVD_VM_ADDR0:-192.0.2.1}
port=47600
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
one() {  # provider size -> "usec MBps" or nothing
    local p=$1 s=$2 ok
    port=$((port + 1))
    timeout 300 fi_pingpong -p "$p" -e msg -d "${EVD_VM_DEV0:-rxe0}" -B $port -I "$iters" -S "$s" \
        >"$out/srv" 2>&1 &
    local spid=$!
    sleep 1
    timeout 300 fi_pingpong -p "$p" -e msg -d "${EVD_VM_DEV1:-rxe1}" -P $port -I "$iters" -S "$s" \
        "$addr" >"$out/cli" 2>&1
    ok=$?
    wait $spid
    [ $ok -eq 0 ] || { echo "fi_pingpong -p $p -S $s failed:" >&2; cat "$out/cli" >&2; return 1; }
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    awk '$1 ~ /^[0-9]/ && NF >= 8 {print $7, $6}' "$out/cli" | tail -1
}
fail=0
for ((r = 1; r <= rounds; r++)); do
    for s in 8 65536; do
        for p in evd verbs; do
            v=$(one "$p" "$s") || { fail=1; continue; }
            echo "$p $s $v" | tee -a "$out/all"
        done
    done
done
echo "median of $rounds round(s), $iters iterations:"
for s in 8 65536; do
    for p in evd verbs; do
        u=$(awk -v p="$p" -v s="$s" '$1 == p && $2 == s {print $3}' "$out/all" | sort -g)
        m=$(awk -v p="$p" -v s="$s" '$1 == p && $2 == s {print $4}' "$out/all" | sort -g)
        n=$(printf '%s\n' "$u" | grep -c .)
        [ "$n" -gt 0 ] || continue
        i=$(((n + 1) / 2))
        printf '%-6s %6d B: %10s usec/xfer %10s MB/s\n' "$p" "$s" \
            "$(printf '%s\n' "$u" | sed -n "${i}p")" "$(printf '%s\n' "$m" | sed -n "${i}p")"
    done
done
exit $fail
