#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (test/vm/run-in-vm): every integration check
# against real rxe devices. Usage: run-in-guest.sh BUILD_DIR
# Prints gtest output and "ok - NAME" / "not ok - NAME" lines that
# test/count-gtest.py counts.
set -u
build=$(cd "${1:?usage: run-in-guest.sh BUILD_DIR}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
export FI_PROVIDER_PATH="$build/.libs"
: "${EVD_VM_ADDR0:?not inside the evd VM (EVD_VM_ADDR0 unset)}"

check() {  # check NAME CMD...: one shell-level test
    local name=$1
    shift
    local out
    if out=$("$@" 2>&1); then
        echo "ok - $name"
    else
        echo "not ok - $name"
        echo "$out" | tail -n 30 | sed 's/^/#   /'
    fi
}

echo "# guest: $(uname -r), devices: $(ibv_devices 2>/dev/null | awk 'NR>2{print $1}' | tr '\n' ' ')"

# fi_info (stock libfabric tool) sees evd and both rxe devices.
check "fi_info -p evd lists $EVD_VM_DEV0 and $EVD_VM_DEV1" bash -c \
    "out=\$(fi_info -p evd); echo \"\$out\"; echo \"\$out\" | grep -q 'domain: $EVD_VM_DEV0' && echo \"\$out\" | grep -q 'domain: $EVD_VM_DEV1'"
check "fi_info -p evd -s $EVD_VM_ADDR1 (source address) selects $EVD_VM_DEV1" bash -c \
    "out=\$(fi_info -p evd -s $EVD_VM_ADDR1); echo \"\$out\"; echo \"\$out\" | grep -q 'domain: $EVD_VM_DEV1' && ! echo \"\$out\" | grep -q 'domain: $EVD_VM_DEV0'"
check "fi_info -p evd -n $EVD_VM_ADDR0 selects $EVD_VM_DEV0" bash -c \
    "out=\$(fi_info -p evd -n $EVD_VM_ADDR0); echo \"\$out\"; echo \"\$out\" | grep -q 'domain: $EVD_VM_DEV0'"

# The gtest integration suites (getinfo, domain, CM, data path, async events).
ulimit -l unlimited 2>/dev/null || true
"$build/evd_integration" --gtest_color=no
rc=$?
# gtest exits 1 when tests failed (already counted); anything else is a crash.
case $rc in 0 | 1) ;; *) echo "not ok - evd_integration crashed or was killed (exit $rc)" ;; esac
# FI_EVD_CONNECT_TIMEOUT is read once per process: its test runs alone with it set.
FI_EVD_CONNECT_TIMEOUT=1500 "$build/evd_integration" --gtest_color=no \
    --gtest_filter='CmRxe.ConnectNotAnsweredInTimeEndsWithEtimedout'
rc=$?
case $rc in 0 | 1) ;; *) echo "not ok - evd_integration (connect timeout) crashed or was killed (exit $rc)" ;; esac

# Resumable endpoints (FI_EVD_RESUME_TIMEOUT, read once per process): the
# data-path, counter and atomic suites once more, every operation now going
# through the ledgers and posted from evd's copy (docs/resume.md). Of
# ResumeRxe only what reads the variable: its other tests set the domain
# control themselves and ran above.
FI_EVD_RESUME_TIMEOUT=30000 "$build/evd_integration" --gtest_color=no \
    --gtest_filter='DataRxe.*:CntrRxe.*:AtomicRxe.*:ResumeRxe.TheDomainControlSetsReadsAndRefuses'
rc=$?
case $rc in 0 | 1) ;; *) echo "not ok - evd_integration (FI_EVD_RESUME_TIMEOUT) crashed or was killed (exit $rc)" ;; esac

# FI_EVD_DGRAM=0 hides datagram endpoints (read once per process).
FI_EVD_DGRAM=0 "$build/evd_integration" --gtest_color=no --gtest_filter='DgramOff.*'
rc=$?
case $rc in 0 | 1) ;; *) echo "not ok - evd_integration (FI_EVD_DGRAM=0) crashed or was killed (exit $rc)" ;; esac

# The destructive device-removal suites (they delete and re-create rxe0 /
# rxe1), each in a process of its own, after everything else.
for suite in 'AsyncRxe.LinkDelete*' 'CmRxeRemoval.*'; do
    EVD_TEST_LINK_DELETE=1 EVD_TEST_DEVICE_REMOVAL=1 "$build/evd_integration" --gtest_color=no --gtest_filter="$suite"
    rc=$?
    case $rc in 0 | 1) ;; *) echo "not ok - evd_integration $suite crashed or was killed (exit $rc)" ;; esac
done

# Extra guest-side checks contributed by each part (each prints ok/not ok
# lines): stock fi_pingpong, MPI, the demo, the link flaps. EVD_GUEST_EXTRAS=0
# leaves them out (the Soft-iWARP run of the test command: the same
# programs run across siw nodes there).
[ "${EVD_GUEST_EXTRAS:-1}" = 0 ] && exit 0
for extra in "$top"/test/integration/guest.d/*.sh; do
    [ -f "$extra" ] || continue
    echo "# $(basename "$extra")"
    BUILD="$build" TOP="$top" bash "$extra"
done
exit 0
