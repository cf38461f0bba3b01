#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Several multi-node suites on one bed, one after the other, so that the
# test command boots the nodes once for all of them:
#
#   test/vm/run-nodes [--nodes N] -- bash test/nodes/suite.sh BUILD_DIR PART...
#
# PART is pingpong (pingpong.sh), mpi (mpi.sh; EVD_NODES_MPI_PARTS as there)
# or failures[:SCENARIO,...] (failures.sh, all four scenarios or the ones
# named). Every node runs the same parts in the same order; each suite
# already pairs its nodes through its own flags in the control directory,
# and no two suites share a flag name.
#
# A node that a suite kills or reboots (mpi's peer death, failures' kill)
# boots again into this script: it resumes at the part it was in (each
# node's current part is kept in the control directory), which is what each
# suite expects of a rebooted node (mpi.sh serves its launcher again,
# failures.sh resumes its server loop). Parts that ran before are not run
# again. Exits with the first failing part's status (every part still runs).
# Order: mpi before failures (mpi.sh's peer-death run counts node A's boots
# from 0, and failures' kill scenario reboots A).
set -u
build=${1:?usage: suite.sh BUILD_DIR PART...}
shift
[ $# -gt 0 ] || { echo "usage: suite.sh BUILD_DIR PART..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
: "${EVD_NODE:?run on a node of test/vm/run-nodes}" "${EVD_NODE_CTL:?}"
state=$EVD_NODE_CTL/suite-part-$EVD_NODE
first=0
[ -f "$state" ] && first=$(cat "$state")
rc=0
i=0
for part in "$@"; do
    if [ "$i" -lt "$first" ]; then
        i=$((i + 1))
        continue
    fi
    echo "$i" >"$state.tmp" && mv -f "$state.tmp" "$state"
    echo "# suite.sh: part $part (node $EVD_NODE, boot ${EVD_NODE_BOOT:-0})"
    case $part in
    pingpong) bash "$here/pingpong.sh" "$build" ;;
    mpi) bash "$here/mpi.sh" "$build" ;;
    failures) bash "$here/failures.sh" "$build" ;;
    failures:*) bash "$here/failures.sh" "$build" "$(tr , ' ' <<<"${part#failures:}")" ;;
    *) echo "not ok - suite.sh: unknown part '$part'"; false ;;
    esac
    r=$?
    [ "$rc" = 0 ] && rc=$r
    i=$((i + 1))
done
echo "$i" >"$state.tmp" && mv -f "$state.tmp" "$state"
exit "$rc"
