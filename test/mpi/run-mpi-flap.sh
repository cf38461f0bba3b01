#!/usr/bin/env bash
# An Open MPI job over one libfabric provider across a link flap, inside the
# Soft-RoCE VM:
#
#   run-mpi-flap.sh PROVIDER [--report|--hang-report]      e.g. "evd;ofi_rxm"
#
# Runs test/mpi/mpi_flap.c (2 ranks exchanging checked messages for
# EVD_FLAP_RUN seconds, default 40) with the cm PML and the ofi MTL
# restricted to PROVIDER, takes veth0 (the link under rxe0, where rank 0
# listens) down EVD_FLAP_AFTER seconds after the job's first round trip
# (default 3; the flap must hit a running job, not its MPI_Init, however
# long the machine's load makes the start: at most EVD_FLAP_START seconds,
# default 150) for EVD_FLAP_DOWN seconds (default 4), then restores it and
# its route. The job
# passes when it never dies of a signal and never hangs: it completes, or
# MPI reports the error and the job exits within 60 s of the link going
# down. Prints "ok - mpi flap: ..." / "not ok - ..." (with --report only
# "# mpi flap: ..." lines, for providers evd is compared with; with
# --hang-report a rank dying of a signal or a wrong byte is still a test line,
# and whether the job completed, reported the error or hung is a "# " line).
# EVD_FLAP_MUST_COMPLETE=1 (resumable connections, FI_EVD_RESUME_TIMEOUT):
# the job passes only when it completes; an MPI error is then a failure.
set -u
prov=${1:?usage: run-mpi-flap.sh PROVIDER [--report|--hang-report]}
mode=${2:-}
report=
[ -n "$mode" ] && report=1
here=$(cd "$(dirname "$0")" && pwd)
run_s=${EVD_FLAP_RUN:-30} after_s=${EVD_FLAP_AFTER:-3} down_s=${EVD_FLAP_DOWN:-4}
start_s=${EVD_FLAP_START:-150}
n0=${EVD_VM_NETDEV0:-veth0}
say() {  # say ok|not-ok TEXT
    if [ -n "$report" ]; then echo "# mpi flap: $prov: $2"
    elif [ "$1" = ok ]; then echo "ok - mpi flap: $prov: $2"
    else echo "not ok - mpi flap: $prov: $2"; fi
}
work=$(mktemp -d "${TMPDIR:-/tmp}/evd-mpiflap.XXXXXX") || exit 1
# EVD_FLAP_KEEP=DIR keeps the job's stdout/stderr there (out, err) for a post-mortem.
keep=${EVD_FLAP_KEEP:-}
trap 'ip link set "$n0" up 2>/dev/null; [ -n "$keep" ] && cp "$work"/out "$work"/err "$keep"/ 2>/dev/null; rm -rf "$work"' EXIT
ulimit -l unlimited 2>/dev/null || true
export TMPDIR=$work FI_UNIVERSE_SIZE=${FI_UNIVERSE_SIZE:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FI_PROVIDER
. "$here/mpi-prog.sh"
if ! mpi_prog mpi_flap "$work/mpi_flap" "$work/cc.log"; then
    say not-ok "mpicc compiles mpi_flap.c"
    sed 's/^/#   /' "$work/cc.log" | tail -n 20
    exit 1
fi
major=$(mpirun --version 2>/dev/null | sed -n 's/.*(Open MPI) \([0-9]*\)\..*/\1/p' | head -n 1)
args=(-np 2 --bind-to none --mca pml cm --mca mtl ofi --mca btl self
      --mca mtl_ofi_provider_include "$prov" --mca mpi_yield_when_idle 1 --allow-run-as-root)
if [ "$major" = 4 ]; then args+=(--oversubscribe); else args+=(--map-by :OVERSUBSCRIBE); fi

start=$(date +%s.%N)
( cd "$work" && exec timeout -k 10 $((start_s + after_s + 90)) mpirun "${args[@]}" "$work/mpi_flap" "$run_s" ) \
    >"$work/out" 2>"$work/err" &
job=$!
# the first round trip (mpi_flap prints it at once), or the job ended first
waited=0
while ! grep -aq '^# mpi_flap: first round trip' "$work/out" 2>/dev/null &&
      kill -0 "$job" 2>/dev/null && [ "$waited" -lt $((start_s * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
done
if ! grep -aq '^# mpi_flap: first round trip' "$work/out" 2>/dev/null; then
    kill "$job" 2>/dev/null
    wait "$job" 2>/dev/null
    say not-ok "the job made a first round trip before the flap (none within ${start_s} s of mpirun; the link was not touched)"
    sed 's/^/#   /' "$work/err" | tail -n 15
    exit 0
fi
sleep "$after_s"
ip link set "$n0" down
down=$(date +%s.%N)
sleep "$down_s"
ip link set "$n0" up && ip route replace table 100 "${EVD_VM_ADDR1:-192.0.2.2}" dev "$n0" src "${EVD_VM_ADDR0:-192.0.2.1}"
# 30 s after the link returned, a job still running is most likely hung:
# keep the rdma_cm ids and QPs of that moment (a connection that never got
# established shows as an id in CONNECT with no request id at the listener;
# docs/link-failures.md)
( sleep 30; kill -0 "$job" 2>/dev/null || exit 0
  { rdma res show cm_id; rdma res show qp; } >"$work/snap" 2>&1 ) &
snapper=$!
wait "$job"
rc=$?
kill "$snapper" 2>/dev/null
wait "$snapper" 2>/dev/null
end=$(date +%s.%N)
for f in out err; do tr -d '\000' <"$work/$f" >"$work/$f.txt" && mv "$work/$f.txt" "$work/$f"; done
since_down=$(awk -v a="$end" -v b="$down" 'BEGIN{printf "%.1f", a - b}')
total=$(awk -v a="$end" -v b="$start" 'BEGIN{printf "%.1f", a - b}')
outcome=$(grep -a '^mpi_flap: ' "$work/out" | head -n 1)
grep -a '^# mpi_flap' "$work/out" | sed "s/^# mpi_flap:/# mpi flap: $prov:/"
# what Open MPI 4 and 5 print when a rank dies of a signal (not the "terminated
# by signals sent by prterun" of Open MPI 5 after an MPI_Abort, nor the TERM
# and KILL of the timeout below)
signal=$(grep -aiE 'exited on signal (4|6|7|8|11)|segmentation fault|core dumped|bus error' \
    "$work/out" "$work/err" | head -n 3)
hung=
{ [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && hung=1  # timeout: TERM, then KILL
crashed=
{ [ -n "$signal" ] || { [ "$rc" -gt 128 ] && [ -z "$hung" ]; }; } && crashed=1
bad=
grep -aq '^mpi_flap: bad data' "$work/out" && bad=1
echo "# mpi flap: $prov: mpirun exit $rc after ${total} s, ${since_down} s after link down; ${outcome:-no outcome line}"
if [ "$mode" = --hang-report ]; then
    if [ -n "$crashed$bad" ]; then
        echo "not ok - mpi flap: $prov: no rank dies of a signal, no byte is wrong (exit $rc${bad:+, bad data})"
        sed 's/^/#   /' <<<"$signal"
        tail -n 20 "$work/err" | sed 's/^/#   /'
        exit 1
    fi
    echo "ok - mpi flap: $prov: no rank dies of a signal, no byte is wrong"
fi
if [ -n "$hung" ] && [ -s "$work/snap" ]; then
    echo "# mpi flap: $prov: rdma_cm ids and QPs 30 s after link up:"
    grep -v 'comm \[ib_core\]' "$work/snap" | sed 's/^/#   /'
fi
if [ -n "$crashed$hung" ]; then
    say not-ok "no rank dies of a signal and the job does not hang (exit $rc)"
    sed 's/^/#   /' <<<"$signal"
    tail -n 20 "$work/err" | sed 's/^/#   /'
    exit 1
fi
if [ -n "$bad" ]; then
    say not-ok "every byte checked"
    exit 1
fi
if [ "$rc" = 0 ] && [ "$outcome" = "mpi_flap: completed" ]; then
    say ok "the job completed across the flap (${total} s)"
elif [ "${EVD_FLAP_MUST_COMPLETE:-0}" = 1 ]; then
    say not-ok "the job completes across the flap (exit $rc, ${outcome:-no outcome line}, ${since_down} s after link down)"
    tail -n 20 "$work/err" | sed 's/^/#   /'
    exit 1
elif { [ -n "$outcome" ] || [ "$rc" = 3 ]; } && awk -v s="$since_down" 'BEGIN{exit !(s <= 60)}'; then
    # mpi_flap exits 3 only through MPI_Abort after an MPI call failed; the
    # abort can overtake the forwarding of the line it printed first.
    say ok "MPI reported the failure and the job exited ${since_down} s after link down (${outcome:-exit 3: an MPI call failed, its line lost in the abort})"
else
    say not-ok "the job completes, or reports the error and exits within 60 s of link down (exit $rc, ${since_down} s)"
    tail -n 20 "$work/err" | sed 's/^/#   /'
    exit 1
fi
exit 0
