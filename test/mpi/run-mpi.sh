#!/usr/bin/env bash
# Runs test/mpi/mpi_check.c under Open MPI over one libfabric provider, inside
# the Soft-RoCE VM (test/vm/run-in-vm):
#
#   run-mpi.sh PROVIDER          e.g. "evd;ofi_rxm" or "verbs;ofi_rxm"
#
# Compiles mpi_check.c with mpicc into a temporary directory, runs 2 ranks on
# this node with the cm PML and the ofi MTL as the only choice (MPI_Init fails
# rather than falling back to another transport), restricted to PROVIDER, and
# checks from Open MPI's own verbose output that every rank selected exactly
# PROVIDER. Prints TAP lines "ok - mpi: PROVIDER: NAME" / "not ok - ..." and
# comment lines "# mpi: ..."; exits 0 if every check passed, 1 otherwise.
# Works with Open MPI 4.1 (mpirun/orterun) and 5.0 (mpirun/prterun).
#
# Environment: FI_PROVIDER_PATH must let libfabric find the provider (for
# evd: BUILD/.libs). EVD_MPI_TIMEOUT (default 180) bounds the mpirun.
# EVD_MPI_ARGS: extra mpi_check arguments (e.g. "-s": fewer iterations).
set -u
prov=${1:?usage: run-mpi.sh PROVIDER (e.g. \"evd;ofi_rxm\")}
here=$(cd "$(dirname "$0")" && pwd)
label=$prov
tmo=${EVD_MPI_TIMEOUT:-180}
nranks=2

ok() { echo "ok - mpi: $label: $*"; }
notok() { echo "not ok - mpi: $label: $*"; }
note() { echo "# mpi: $label: $*"; }
indent() { sed 's/^/#   /'; }

if [ -z "${EVD_VM_ADDR0:-}" ]; then
    notok "run inside the evd VM (EVD_VM_ADDR0 unset)"
    exit 1
fi
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    notok "Open MPI not installed (no mpicc/mpirun)"
    exit 1
fi

version=$(mpirun --version 2>/dev/null | sed -n 's/.*(Open MPI) \([0-9][0-9.a-z]*\).*/\1/p' | head -n 1)
major=${version%%.*}
case "$major" in
4 | 5) ;;
*)
    notok "Open MPI 4.x or 5.x (mpirun --version says '${version:-nothing}')"
    exit 1
    ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/evd-mpi.XXXXXX") || exit 1
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    # Ranks left behind by a killed mpirun: only our own binary, by pid.
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/exe" 2>/dev/null)" = "$work/mpi_check" ] && kill -9 "${p#/proc/}" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

# --- what Open MPI needs in the VM -----------------------------------------
ulimit -l unlimited 2>/dev/null || true
if [ "$(ulimit -l)" != unlimited ]; then
    note "warning: ulimit -l is $(ulimit -l), registrations may fail"
fi
if ! [ -d /dev/shm ] || ! [ -w /dev/shm ]; then
    notok "/dev/shm is writable (Open MPI's shared-memory session files)"
    exit 1
fi
hostname=$(hostname 2>/dev/null)
if [ -z "$hostname" ] || [ "$hostname" = "(none)" ]; then
    notok "the VM has a hostname (Open MPI needs one)"
    exit 1
fi
export TMPDIR=$work                     # session directories, removed with $work
export FI_UNIVERSE_SIZE=${FI_UNIVERSE_SIZE:-4}   # ofi_rxm sizes its CQ/AV from it
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FI_PROVIDER                       # the MTL's include list chooses
core=${prov%%;*}                        # "evd;ofi_rxm" -> evd
if [ "$core" = evd ]; then
    # evd's own word that it carried the job: at info level it logs every
    # passive endpoint that listens ("listening (device rxeN)"), and ofi_rxm
    # opens one per rank. Warnings of every provider show up as well.
    export FI_LOG_LEVEL=info FI_LOG_PROV=evd
fi

# The rxe ports may still be coming back from an earlier test's link flap or
# device removal: wait (up to 30 s) until every rxe device that exists is ACTIVE.
for _ in $(seq 30); do
    links=$(rdma link show 2>/dev/null | grep ' rxe')
    if [ -n "$links" ] && ! grep -aqv 'state ACTIVE' <<<"$links"; then break; fi
    sleep 1
done
note "Open MPI $version, $(rdma link show 2>/dev/null | awk '/ rxe/{printf "%s %s %s; ", $2, $4, $NF}')FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-}"

# --- build -------------------------------------------------------------------
. "$here/mpi-prog.sh"
if ! mpi_prog mpi_check "$work/mpi_check" "$work/cc.log"; then
    notok "mpicc compiles mpi_check.c"
    indent <"$work/cc.log" | tail -n 30
    exit 1
fi
[ -s "$work/cc.log" ] && { note "mpicc said:"; indent <"$work/cc.log" | tail -n 30; }

# --- run -----------------------------------------------------------------------
# pml cm + mtl ofi: the only PML and MTL that may be selected, so MPI_Init
# aborts instead of silently using another transport; btl self: no BTL opens
# a device or a socket (cm does not use BTLs for MPI traffic anyway).
# mtl_ofi_provider_include: the OFI MTL takes the first fi_info whose provider
# name starts with PROVIDER. Verbosity 1 of the OFI MTL (4.x: mtl_ofi_verbose
# for the provider, mtl_base_verbose for the domain; 5.x: mtl_ofi_verbose for
# both) prints each rank's choice, checked below.
# mpi_yield_when_idle: the VM has 1 vCPU for 2 busy-polling ranks.
args=(-np "$nranks" --bind-to none
      --mca pml cm --mca mtl ofi --mca btl self
      --mca mtl_ofi_provider_include "$prov"
      --mca mtl_ofi_verbose 1 --mca mtl_base_verbose 1
      --mca mpi_yield_when_idle 1)
if [ "$major" = 4 ]; then
    args+=(--allow-run-as-root --oversubscribe)
else
    args+=(--allow-run-as-root --map-by :OVERSUBSCRIBE)
fi
start=$(date +%s.%N)
# shellcheck disable=SC2086  # EVD_MPI_ARGS: several words on purpose
# Each rank writes its standard error to a file of its own (rank-stderr.sh:
# mpirun's forwarding can split one rank's line with another's); $work/err is
# mpirun's own standard error followed by every rank's, lines whole.
mkdir -p "$work/ranks"
( cd "$work" && exec timeout -k 10 "$tmo" mpirun "${args[@]}" \
    sh "$here/rank-stderr.sh" "$work/ranks" "$work/mpi_check" -l "$label" ${EVD_MPI_ARGS:-} ) \
    >"$work/out" 2>"$work/err.mpirun"
rc=$?
cat "$work/err.mpirun" "$work"/ranks/rank.*.err >"$work/err" 2>/dev/null
secs=$(echo "$(date +%s.%N) $start" | awk '{printf "%.1f", $1 - $2}')
failed=0
# Open MPI 5's aggregated help messages leave NUL bytes in the stream, which
# would hide the start of the next line from the patterns below.
for f in out err; do tr -d '\000' <"$work/$f" >"$work/$f.txt" && mv "$work/$f.txt" "$work/$f"; done

# Which provider and domain each rank chose. 4.x: "mtl:ofi:prov: P" and
# "mtl:ofi:provider: DOMAIN"; 5.x: "mtl:ofi:provider: P" and
# "mtl:ofi:provider:domain: DOMAIN". A line is "[host:pid] file:line: text".
chosen=$(sed -n 's/^\[[^]]*:\([0-9]*\)\] .*mtl:ofi:prov\(ider\)\{0,1\}: \(.*\)$/\1 \3/p' "$work/err")
good_pids=$(awk -v p="$prov" '{ pid = $1; $1 = ""; sub(/^ /, ""); if ($0 == p) print pid }' <<<"$chosen" | sort -u)
all_pids=$(awk '{print $1}' <<<"$chosen" | sort -u | grep -ac .)
ngood=$(grep -ac . <<<"$good_pids")
domains=$(sed -n 's/^\[[^]]*:\([0-9]*\)\] .*mtl:ofi:provider\(:domain\)\{0,1\}: \([^;]*\)$/pid \1 \3/p' "$work/err" |
    grep -v " $prov\$" | sort -u | paste -sd, - | sed 's/,/, /g')
if [ "$ngood" -eq "$nranks" ]; then
    ok "every rank selected provider $prov (${domains:-domain unknown})"
else
    notok "every rank selected provider $prov ($ngood of $nranks did)"
    failed=1
    if [ -n "$chosen" ]; then
        echo "$chosen" | sed 's/^/#   pid /' | sort -u
    fi
fi
[ "$all_pids" -gt "$nranks" ] && note "warning: $all_pids processes reported a provider choice"
if [ "$core" = evd ]; then
    # libfabric:PID:TIME:LAYER:evd:ep_ctrl:FUNC():LINE<info> listening (device rxe0)
    listeners=$(sed -n 's/^libfabric:\([0-9]*\):[^:]*:[^:]*:evd:ep_ctrl:.*<info> listening (device \([^)]*\))$/\1 \2/p' "$work/err" | sort -u)
    nlisten=$(awk '{print $1}' <<<"$listeners" | sort -u | grep -ac .)
    if [ "$nlisten" -ge "$nranks" ]; then
        ok "evd's log shows a listening endpoint in every rank ($(awk '{print $2}' <<<"$listeners" | paste -sd' ' -))"
    else
        notok "evd's log shows a listening endpoint in every rank ($nlisten of $nranks)"
        failed=1
    fi
    warns=$(grep -a '^libfabric:.*<warn>' "$work/err")
    if [ -n "$warns" ]; then
        note "libfabric warnings during the run:"
        sed 's/^libfabric:[0-9]*:[0-9]*://' <<<"$warns" | sort | uniq -c | sort -rn | head -n 20 | sed 's/^ */#   /'
    fi
fi

# mpi_check's own lines (rank 0) and its per-rank details (stderr).
grep -aE '^(ok|not ok) - |^# mpi' "$work/out"
grep -aE '^# mpi' "$work/err"
nok=$(grep -ac '^ok - ' "$work/out")
nnot=$(grep -ac '^not ok - ' "$work/out")
[ "$nnot" -gt 0 ] && failed=1

if [ $rc -eq 0 ] && [ "$nok" -gt 0 ] && grep -aq '^# mpi: .*summary:' "$work/out"; then
    ok "mpirun exits 0 (${secs} s)"
else
    case $rc in
    124 | 137) why="killed after ${tmo} s" ;;
    0) why="exit 0 but no summary" ;;
    *) why="exit $rc" ;;
    esac
    notok "mpirun exits 0 ($why, ${secs} s, $nok checks passed, $nnot failed)"
    failed=1
fi
if [ $failed -ne 0 ]; then
    echo "#   --- mpirun stdout (tail) ---"
    grep -avE '^(ok|not ok) - |^# mpi' "$work/out" | tail -n 20 | indent
    echo "#   --- mpirun stderr (tail, without the provider list) ---"
    grep -avE 'not in include list|in exclude list|<info>' "$work/err" | tail -n 40 | indent
fi
exit $failed
