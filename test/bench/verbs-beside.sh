#!/usr/bin/env bash
# libfabric's verbs measured beside evd: the report the test command used to
# carry in its VM steps, where it judged nothing ("reported, not judged"),
# now a run of its own, by hand, whose results go to docs/ (docs/link-failures.md,
# docs/multi-node.md, docs/perf-mpi.md) when a comparison is claimed.
#
#   bash test/bench/verbs-beside.sh [BUILD_DIR] [PART...]
#
# BUILD_DIR: a plain build (default build/, as the test command makes it).
# PARTS (default all):
#   vm         in one rxe VM: fi_pingpong, Open MPI's checked job, the RDM
#              ping-pong and the MPI job across a 4 s flap of veth0, each over
#              evd and then over verbs (test/integration/guest.d)
#   nodes      on the two-node rxe bed: fi_pingpong, Open MPI (checked, flap,
#              peer death) and the failure matrix (flap, cut, kill, remove),
#              evd then verbs for each (test/nodes/suite.sh)
#   nodes-siw  the same on Soft-iWARP (no peer death, as in the test command)
# Every part sets EVD_VERBS_BESIDE=1, which the scripts read: evd's lines
# still say ok / not ok, verbs's are "# verbs ..." comments and TABLE rows.
# Output: test-results/verbs-beside/PART.log; the verbs lines and the tables
# are printed at the end. Takes about 40 minutes on the project's 2-core
# machine (the parts run one after the other).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$top/build}" && pwd) || exit 1
shift || true
parts=${*:-vm nodes nodes-siw}
out=$top/test-results/verbs-beside
mkdir -p "$out"
export EVD_VERBS_BESIDE=1
vm=$top/test/vm
for part in $parts; do
    log=$out/$part.log
    echo "=== $part (log $log)"
    t0=$SECONDS
    case $part in
    vm)
        EVD_VM_TIMEOUT=1800 "$vm/run-in-vm" -- bash -c '
            for x in 30-pingpong 40-mpi 60-link-flap; do
                echo "# $x.sh"
                BUILD="$1" TOP="$2" bash "$2/test/integration/guest.d/$x.sh"
            done' _ "$build" "$top" >"$log" 2>&1
        ;;
    nodes)
        EVD_VM_TIMEOUT=3500 "$vm/run-nodes" -- bash "$top/test/nodes/suite.sh" "$build" \
            pingpong mpi failures >"$log" 2>&1
        ;;
    nodes-siw)
        EVD_VM_TIMEOUT=3500 EVD_NODES_MPI_PARTS="checked flap" "$vm/run-nodes" --driver siw -- \
            bash "$top/test/nodes/suite.sh" "$build" pingpong mpi failures >"$log" 2>&1
        ;;
    *) echo "verbs-beside.sh: unknown part '$part' (vm, nodes, nodes-siw)" >&2; exit 2 ;;
    esac
    echo "--- $part: exit $?, $((SECONDS - t0)) s; evd: $(grep -c '^ok - ' "$log") ok, $(grep -c '^not ok - ' "$log") not ok"
done
echo
echo "# what verbs did, beside evd (the logs have the whole runs)"
for part in $parts; do
    grep -aE '^# verbs|^#   verbs|^TABLE|^PINGPONG' "$out/$part.log" 2>/dev/null | sed "s/^/$part: /"
done
