#!/usr/bin/env bash
# Open MPI over evd: test/mpi/run-mpi.sh runs mpi_check (checked ping-pong at
# 1 B..4 MiB, checked MPI_Allreduce, 8 B latency, 1 MiB bandwidth) with 2
# ranks, the cm PML and the ofi MTL restricted to "evd;ofi_rxm"; its lines
# count as tests. With EVD_VERBS_BESIDE=1 (test/bench/verbs-beside.sh) the
# same run over libfabric's own "verbs;ofi_rxm" follows as comment lines
# ("# verbs: ..."), a side-by-side report that never fails.
set -u
export FI_PROVIDER_PATH="$BUILD/.libs" EVD_MPI_PREBUILT="$BUILD/test/mpi"
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "not ok - mpi: Open MPI not installed (mpicc/mpirun missing)"
    exit 0
fi
bash "$TOP/test/mpi/run-mpi.sh" "evd;ofi_rxm"
[ "${EVD_VERBS_BESIDE:-0}" = 1 ] &&
    bash "$TOP/test/mpi/run-mpi.sh" "verbs;ofi_rxm" 2>&1 | sed -e 's/^# /# verbs: /' -e t -e 's/^/# verbs: /'
exit 0
