#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# libfabric's fi_pingpong across two nodes of the multi-node bed, evd beside
# verbs: server on node A (0), client on node B (1), each on its own kernel
# and its own rxe device, 64 B and 64 KiB.
#
#   test/vm/run-nodes --nodes 2 -- bash test/nodes/pingpong.sh BUILD_DIR
#
# Node B prints "ok - ..."/"not ok - ..." per evd run (verbs: a comment
# only, it is the comparison) and a "PINGPONG" line with the round trip
# (usec/xfer) and bandwidth of each. EVD_PINGPONG_REPEAT=R (default 1) runs
# the whole set R times, providers interleaved, and ends with a
# "PINGPONG-MEDIAN" line per configuration (for speed on a quiet host).
set -u
build=$(cd "${1:?usage: pingpong.sh BUILD_DIR}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
nctl=$top/test/vm/node-ctl
: "${EVD_NODE:?run on a node of test/vm/run-nodes}"
export FI_PROVIDER_PATH=$build/.libs
# verbs;ofi_rxm's server, given no address, fails fi_enable (-FI_EINVAL)
# unless verbs is told which interface is its own
export FI_VERBS_IFACE=$EVD_NODE_NETDEV
A=198.51.100.1
runs=("evd msg" "evd;ofi_rxm rdm")
# verbs beside evd: a report, with EVD_VERBS_BESIDE=1 (test/bench/verbs-beside.sh)
[ "${EVD_VERBS_BESIDE:-0}" = 1 ] && runs=("evd msg" "verbs msg" "evd;ofi_rxm rdm" "verbs;ofi_rxm rdm")
sizes=(64 65536)
reps=${EVD_PINGPONG_REPEAT:-1}
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "not ok - EVD_PINGPONG_REPEAT must be a positive number, not '$reps'"; exit 1; }

n=0
if [ "$EVD_NODE" = 0 ]; then
    for _rep in $(seq "$reps"); do for r in "${runs[@]}"; do
        read -r prov ep <<<"$r"
        for s in "${sizes[@]}"; do
            n=$((n + 1))
            port=$((7600 + n))
            # -B: the server's port; each run its own, so no run waits on the
            # previous one's listener
            timeout 120 fi_pingpong -p "$prov" -e "$ep" -B "$port" -S "$s" -I 50 -c >"/tmp/srv.$n" 2>&1 &
            sleep 0.5
            "$nctl" post "srv-$n"
            wait $!
            "$nctl" post "srv-done-$n" "$(echo "rc=$?"; cat "/tmp/srv.$n")"
        done
    done; done
    exit 0
fi
[ "$EVD_NODE" = 1 ] || exit 0
fail=0
results=()
for _rep in $(seq "$reps"); do for r in "${runs[@]}"; do
    read -r prov ep <<<"$r"
    for s in "${sizes[@]}"; do
        n=$((n + 1))
        port=$((7600 + n))
        "$nctl" wait "srv-$n" 120 >/dev/null
        # the server's control socket may not listen yet (0.5 s head start
        # under emulation): fi_pingpong connects it once, so try again
        for try in 1 2 3; do
            out=$(timeout 120 fi_pingpong -p "$prov" -e "$ep" -P "$port" -S "$s" -I 50 -c "$A" 2>&1)
            rc=$?
            grep -q 'ctrl/connect\|failed to connect' <<<"$out" || break
            sleep 1
        done
        ctl_out=$EVD_NODE_CTL/flag-srv-done-$n
        "$nctl" wait "srv-done-$n" 150 >/dev/null
        line=$(awk '$1 ~ /^[0-9]/ && NF >= 8 { print; exit }' <<<"$out")
        srv_rc=$(sed -n '1s/^rc=//p' "$ctl_out" 2>/dev/null)
        if [ "$rc" = 0 ] && [ "$srv_rc" = 0 ] && [ -n "$line" ]; then
            echo "ok - fi_pingpong -p '$prov' -e $ep -S $s across two nodes"
            read -r _ _ _ _ _ mbps usec _ <<<"$line"
            echo "PINGPONG $prov $ep $s usec_per_xfer=$usec MBps=$mbps"
            results+=("$prov $ep $s $usec $mbps")
        elif [ "${prov%%;*}" = verbs ]; then
            # verbs is the comparison, not the subject: reported, not judged
            # (verbs;ofi_rxm's server fails fi_enable with -FI_EINVAL here)
            echo "# verbs (report only): fi_pingpong -p '$prov' -e $ep -S $s failed (client exit $rc, server ${srv_rc:-?}): server said: $(sed -n 2p "$ctl_out" 2>/dev/null)"
            echo "PINGPONG $prov $ep $s failed"
        else
            echo "not ok - fi_pingpong -p '$prov' -e $ep -S $s across two nodes (client exit $rc, server ${srv_rc:-?})"
            sed 's/^/#   /' <<<"$out"
            fail=1
        fi
    done
done; done
if [ "$reps" -gt 1 ] && [ "${#results[@]}" -gt 0 ]; then
    # per configuration: the median round trip (the lower one of an even
    # count) and the bandwidth of that run
    printf '%s\n' "${results[@]}" | sort -k1,3 -k4,4n | awk '
        { key = $1 " " $2 " " $3; n[key]++; u[key, n[key]] = $4; m[key, n[key]] = $5 }
        END { for (k in n) { c = n[k]; h = int((c + 1) / 2)
                  # u is sorted within a key; bandwidth taken from the same run
                  printf "PINGPONG-MEDIAN %s runs=%d usec_per_xfer=%s MBps=%s (min %s, max %s)\n",
                      k, c, u[k, h], m[k, h], u[k, 1], u[k, c] } }' | sort
fi
exit $fail
