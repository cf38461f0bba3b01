#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# MPI latency, bandwidth and device registrations, evd;ofi_rxm beside
# verbs;ofi_rxm in one run (Open MPI's cm PML and ofi MTL, 2 ranks), inside
# the Soft-RoCE VM with 2 vCPUs:
#
#   test/vm/run-in-vm --cpus 2 -- test/bench/mpi_compare.sh BUILD_DIR [ROUNDS] [-q]
#
# Each round runs test/bench/mpi_bench.c once per provider, evd first in odd
# rounds and verbs first in even ones. Before the rounds each provider runs
# once uncounted (mpi_bench -q), so that whatever the first runs after the
# guest boots pay (Open MPI's components are read over the guest's 9p root)
# falls on no counted round. The registrations are the ibv_reg_mr calls the
# provider under ofi_rxm made (the fault interposer's counts,
# test/fault/interpose.cpp: libevd-fi.so's for evd, libfabric.so's for
# verbs), summed over both ranks. Prints every round:
#   round provider size lat_us bw_MBps
#   round provider registrations N
# then the per-size medians side by side, each with its spread (the lowest
# and highest round), and for bandwidth the ratio evd / verbs of each
# round's pair (the two runs of a round are back to back, so the host's
# drift falls on both): its median, its spread, and a verdict per size,
# "below" when even the highest round's ratio is under 0.95 (evd below
# 0.95x verbs beyond the spread), "level" otherwise. Nine rounds or more
# for a verdict worth reading (docs/perf-mpi.md).
set -u
build=$(cd "${1:?usage: mpi_compare.sh BUILD_DIR [ROUNDS] [-q]}" && pwd)
rounds=${2:-3}
quick=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
: "${EVD_VM_ADDR0:?run inside the evd VM}"
lib=$build/.libs/libevd_fault.so
[ -e "$lib" ] || { echo "mpi_compare: $lib missing (make check TESTS=)"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/evd-mpibench.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_bench" "$here/mpi_bench.c" || exit 1
ulimit -l unlimited 2>/dev/null || true
export TMPDIR=$work FI_UNIVERSE_SIZE=${FI_UNIVERSE_SIZE:-4} FI_PROVIDER_PATH=$build/.libs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FI_PROVIDER
major=$(mpirun --version 2>/dev/null | sed -n 's/.*(Open MPI) \([0-9]*\).*/\1/p' | head -n 1)
over=(--map-by :OVERSUBSCRIBE)
[ "$major" = 4 ] && over=(--oversubscribe)
out=$work/all
: >"$out"
# run PROV [ARGS]: mpi_bench over PROV under the counting interposer
run() {
    local prov=$1 from=libevd-fi.so
    shift
    [ "${prov%%;*}" = verbs ] && from=libfabric.so
    rm -f "$work"/count.*
    timeout -k 10 600 mpirun -np 2 --bind-to none --allow-run-as-root "${over[@]}" \
        --mca pml cm --mca mtl ofi --mca btl self --mca mtl_ofi_provider_include "$prov" \
        --mca mpi_yield_when_idle 1 \
        -x LD_PRELOAD="$lib" -x EVD_FAULT_FROM="$from" -x EVD_FAULT_COUNT="$work/count.%p" \
        "$work/mpi_bench" "$@" >"$work/run" 2>"$work/err"
}
for prov in "evd;ofi_rxm" "verbs;ofi_rxm"; do
    run "$prov" -q || echo "# warm-up $prov: mpirun failed"
done
for r in $(seq "$rounds"); do
    # the order flips every round: neither provider always runs first after boot
    order=("evd;ofi_rxm" "verbs;ofi_rxm")
    [ $((r % 2)) = 0 ] && order=("verbs;ofi_rxm" "evd;ofi_rxm")
    for prov in "${order[@]}"; do
        # shellcheck disable=SC2086  # $quick: nothing or -q
        if ! run "$prov" $quick; then
            echo "# round $r $prov: mpirun failed"
            tail -n 20 "$work/err" | sed 's/^/#   /'
            continue
        fi
        grep -v '^#' "$work/run" | awk -v r="$r" -v p="$prov" '{print r, p, $0}' | tee -a "$out"
        grep '^#' "$work/run"
        # the interposer's file of each process: mpirun's and the ranks'
        regs=$(cat "$work"/count.* 2>/dev/null | awk '$1 ~ /^ibv_reg_mr/ {n += $2} END {print n + 0}')
        echo "$r $prov registrations $regs" | tee -a "$out"
    done
done
echo "# medians over $rounds rounds [lowest-highest]: size  evd lat_us  verbs lat_us  evd MB/s  verbs MB/s  bw evd/verbs per round: median [lowest-highest] verdict"
awk '$3 != "registrations" {k = $3 " " $2; lat[k] = lat[k] " " $4; bw[k] = bw[k] " " $5; sizes[$3] = 1
                            b[$1 " " $2 " " $3] = $5; rnd[$1] = 1}
     function sorted(s, a,   n, i, j, t) { n = split(s, a, " ")
         for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
         return n }
     function med(s,   a, n) { n = sorted(s, a); return n ? a[int((n + 1) / 2)] : "-" }
     function lo(s,   a, n) { n = sorted(s, a); return n ? a[1] : "-" }
     function hi(s,   a, n) { n = sorted(s, a); return n ? a[n] : "-" }
     function both(s) { return sprintf("%s [%s-%s]", med(s), lo(s), hi(s)) }
     END { for (s in sizes) {
             r = ""
             for (k in rnd) { e = b[k " evd;ofi_rxm " s]; v = b[k " verbs;ofi_rxm " s]
                              if (e != "" && v + 0 > 0) r = r " " sprintf("%.3f", e / v) }
             verdict = r == "" ? "-" : (hi(r) + 0 < 0.95 ? "below" : "level")
             printf "# %10d  %s  %s  %s  %s  %s %s\n", s, both(lat[s " evd;ofi_rxm"]), both(lat[s " verbs;ofi_rxm"]),
                    both(bw[s " evd;ofi_rxm"]), both(bw[s " verbs;ofi_rxm"]), r == "" ? "-" : both(r), verdict } }' "$out" | sort -k2 -n
awk '$3 == "registrations" {printf "# registrations per run, %s: %s\n", $2, $4}' "$out"
