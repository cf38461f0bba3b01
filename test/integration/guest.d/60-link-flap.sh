#!/usr/bin/env bash
# Link failures through ofi_rxm and MPI (fi_evd(7), LINK AND PORT FAILURES):
# a 4 s flap of veth0 under an RDM ping-pong (evd_rdm_flap) and under an
# Open MPI job (test/mpi/run-mpi-flap.sh), over "evd;ofi_rxm" by default and
# with FI_EVD_FAIL_FAST=1. The RDM lines count as tests (over default evd only
# survival and correctness: its recovery is reported, see below). The Open MPI job
# still hangs in some runs (issue 14, docs/link-failures.md): that a rank never
# dies of a signal and no byte is wrong counts as a test, whether it completed,
# reported the error or hung is a report ("# mpi flap: ...") until it does not
# hang. The same
# scenarios over libfabric's "verbs;ofi_rxm" follow as "# verbs: ..." comment
# lines, a side-by-side report that never fails. It runs last: after its
# flaps, a new rdma_cm connection between the pair can fail for a while (the
# demo's did, in CI), which no later suite should inherit.
set -u
export FI_PROVIDER_PATH="$BUILD/.libs" FI_UNIVERSE_SIZE=4
ulimit -l unlimited 2>/dev/null || true
flap() { timeout -k 5 90 "$BUILD/evd_rdm_flap" "$@"; }
# Default evd: a busy connection can still stall silently across the flap
# (issue 14), so recovery is reported; surviving with every payload and
# context right is the test.
flap -p "evd;ofi_rxm" --stall-report
rc=$?
[ "$rc" -gt 1 ] && echo "not ok - evd_rdm_flap evd;ofi_rxm: exit $rc (crashed or killed)"
FI_EVD_FAIL_FAST=1 flap -p "evd;ofi_rxm" | sed 's/evd;ofi_rxm/evd;ofi_rxm (FI_EVD_FAIL_FAST=1)/'
flap -p "verbs;ofi_rxm" --report 2>&1 | sed 's/^# /# verbs: /'
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    bash "$TOP/test/mpi/run-mpi-flap.sh" "evd;ofi_rxm" --hang-report
    FI_EVD_FAIL_FAST=1 bash "$TOP/test/mpi/run-mpi-flap.sh" "evd;ofi_rxm" --hang-report |
        sed 's/evd;ofi_rxm/evd;ofi_rxm (FI_EVD_FAIL_FAST=1)/'
    bash "$TOP/test/mpi/run-mpi-flap.sh" "verbs;ofi_rxm" --report 2>&1 | sed 's/^# /# verbs: /'
else
    echo "not ok - mpi flap: Open MPI not installed (mpicc/mpirun missing)"
fi
exit 0
