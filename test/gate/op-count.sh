#!/usr/bin/env bash
# The count gate: fails when evd's own cost of a data-path operation grows
# past test/gate/op-count-baseline, so the data path cannot quietly get
# heavier. Counts, not times: instructions by callgrind (exact for the same
# binaries and inputs, whatever else the host does), allocations from the
# same profile, system calls of the posting thread by strace.
#
# Runs inside the Soft-RoCE VM (test/integration/guest.d/25-op-count.sh):
#   test/gate/op-count.sh BUILD_DIR
#   EVD_GATE_ITERS=N         iterations of each loop (default 100)
#   EVD_GATE_PRINT=1         also print the measured figures as baseline lines
#   EVD_GATE_BASELINE=FILE   judge against FILE instead
#
# One run of test/bench/op_cost.cpp -o all under callgrind: every loop
# (send, inject, write, read, registration-cache hit, sends in batches of
# 16 with FI_MORE, reads of 16 and of 64 completions at once, an
# fi_eq_read) in one process. test/gate/callgrind-split.awk splits its
# profile by loop and counted call and by whose code ran; the gated figure
# is the provider's: everything but op_cost's own instructions and
# rdma-core's (libibverbs and the rxe driver, the floor any provider pays
# for the same work request). Pinned so that a rerun counts the same: no
# ASLR (setarch -R), an empty environment but for what the run needs,
# LD_BIND_NOW (no lazy binding inside a loop), resumable endpoints off.
set -u
build=$(cd "${1:?usage: op-count.sh BUILD_DIR}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
n=${EVD_GATE_ITERS:-100}
batch=16
baseline=${EVD_GATE_BASELINE:-$top/test/gate/op-count-baseline}
: "${EVD_VM_ADDR0:?not inside the evd VM (EVD_VM_ADDR0 unset)}"

fail() { echo "not ok - op-count: $*"; exit 0; }
for t in valgrind strace setarch; do
    command -v "$t" >/dev/null || fail "$t is not installed (test/install-deps.sh, test/vm/make-root.sh)"
done
[ -x "$build/op_cost" ] && [ -f "$build/uffd_shim.so" ] || fail "$build has no op_cost or uffd_shim.so (make bench)"
fab=$(fi_info --version 2>/dev/null | awk '/^libfabric:/ { split($2, v, "."); print v[1] "." v[2] }')
[ -n "$fab" ] || fail "fi_info --version names no libfabric"
ulimit -l unlimited 2>/dev/null || true
cd /tmp || exit 1

pinned=(env -i PATH="$PATH" FI_PROVIDER_PATH="$build/.libs" EVD_VM_ADDR0="$EVD_VM_ADDR0"
        EVD_VM_ADDR1="$EVD_VM_ADDR1" FI_EVD_RESUME_TIMEOUT=0 LD_BIND_NOW=1)
args=(-p evd -o all -b "$batch" -n "$n" -w 3000)
prof=/tmp/op-count.cg
# valgrind has no userfaultfd: the cache's monitor gets a stand-in
# (test/bench/uffd_shim.c) or the hit would be a miss
counted() {
    rm -f "$prof"
    "${pinned[@]}" LD_PRELOAD="$build/uffd_shim.so" setarch -R valgrind --tool=callgrind \
        --separate-callers=40 --toggle-collect='*::cost_*' --callgrind-out-file="$prof" \
        "$build/op_cost" "${args[@]}" 2>&1 | grep -v '^=='
}
# every counted read must find its completion at once (op_cost spins,
# uncounted, before each): an empty read would be counted too
out=$(counted)
if echo "$out" | grep -q ' [1-9][0-9]* empty reads'; then
    echo "# op-count: a read found nothing (busy guest); counting once more"
    out=$(counted)
fi
echo "$out" | sed 's/^/# /'
[ -s "$prof" ] && echo "$out" | grep -q 'eq reads' || fail "op_cost did not run every loop under callgrind"
echo "$out" | grep -q ' [1-9][0-9]* empty reads' && fail "a counted read found nothing, twice"

# measured: "PHASE MEASURE FIGURE", per operation (batch.*: per send)
measured=$(awk -f "$top/test/gate/callgrind-split.awk" "$prof" | awk -v n="$n" -v b="$batch" '
    { d = $1 ~ /^batch\./ ? n * b : n
      printf "%s instructions %.0f\n", $1, $3 / d
      printf "%s allocations %.2f\n", $1, $9 / d }' | sort)
# system calls of the thread that posts, per loop iteration: strace -f
# between op_cost's getppid() markers, that thread's lines only
rm -f /tmp/op-count.st
"${pinned[@]}" strace -f -o /tmp/op-count.st "$build/op_cost" "${args[@]}" >/dev/null 2>&1 ||
    fail "op_cost failed under strace"
measured+=$'\n'$(awk -v n="$n" '
    BEGIN { k = split("send inject write read mr_hit batch burst16 burst64 eq", name, " ") }
    /getppid\(/ { m++; main = $1; next }
    m % 2 == 1 && $1 == main && !/resumed>|exited with|\+\+\+/ { c[(m + 1) / 2]++ }
    END { for (i = 1; i <= k; i++) printf "%s.loop syscalls %.2f\n", name[i], c[i] / n }' /tmp/op-count.st | sort)

echo "# op-count: libfabric $fab, $n iterations a loop (batch: per send); provider instructions, allocations and system calls"
echo "$measured" | sed 's/^/#   /'
if [ "${EVD_GATE_PRINT:-0}" = 1 ]; then
    echo "# baseline lines for this run ($(date -u +%F)):"
    echo "$measured" | awk -v f="$fab" -v d="$(date -u +%F)" '{ printf "#   %s %s %s %s %s\n", f, $1, $2, $3, d }'
fi

echo "$measured" | grep -q '^? ' && echo "not ok - op-count: instructions outside any counted call (raise --separate-callers)"
# each baseline figure of this libfabric: instructions may grow by 2% and 2
# (a library update moves a memcpy by a few); allocations and system calls
# not at all
awk -v f="$fab" -v file="$baseline" '
    NR == FNR { if ($0 !~ /^#/ && $1 == f) { lim[$2 " " $3] = $4; set[$2 " " $3] = $5 }; next }
    { k = $1 " " $2; got[k] = 1
      if (!(k in lim)) { printf "not ok - op-count: %s %s %s has no baseline for libfabric %s (add it to %s)\n", $1, $2, $3, f, file; next }
      allow = $2 == "instructions" ? lim[k] * 1.02 + 2 : lim[k] + 0.005
      if ($3 + 0 <= allow)
          printf "ok - op-count: %s %s %s (baseline %s, %s)\n", $1, $2, $3, lim[k], set[k]
      else
          printf "not ok - op-count: %s %s %s, over the baseline %s set %s\n", $1, $2, $3, lim[k], set[k] }
    END { for (k in lim) if (!(k in got)) printf "not ok - op-count: %s was not measured (libfabric %s)\n", k, f }
' "$baseline" - <<<"$measured"
