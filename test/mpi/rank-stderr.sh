#!/bin/sh
# rank-stderr.sh DIR PROGRAM [ARGS...]: runs PROGRAM (an MPI rank) with its
# standard error written straight to DIR/rank.HOST.PID.err, a file of its
# own (HOST: ranks on different nodes can have the same pid, and DIR is
# shared by the nodes).
#
# mpirun forwards every rank's standard error through one stream and cuts it
# where its reads happen to end, so a line of one rank can be split by a line
# of another (seen with Open MPI 5 and FI_LOG_LEVEL=info: "... is not accepted
# ([evd-vm:00212] mtl:ofi: ..."). Each rank's verbose lines, which the tests
# read to learn which provider that rank chose, stay whole in a file of their
# own. exec keeps the pid, so PID is the rank's pid as Open MPI prints it.
dir=$1
shift
exec "$@" 2>"$dir/rank.$(uname -n).$$.err"
