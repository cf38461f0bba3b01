#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (test/vm/run-in-vm): the churn soak
# (evd_soak, soak_rxe.cpp) from BUILD_DIR for SECONDS (default 120), with the
# link flap and the removal and re-creation of rxe0. Under a sanitizer build
# it sets that sanitizer's options: ThreadSanitizer with its deadlock
# detector (lock-order inversions are reported like races) and the
# suppressions for rdma-core's uninstrumented libraries (test/tsan.supp);
# AddressSanitizer with leak checking. Prints evd_soak's figures and its
# "ok - ..." / "not ok - ..." line, plus a "not ok" line when the sanitizer
# reported anything; then the datagram suite (DgramRxe.*)
# under the same sanitizer, one more "ok"/"not ok" line. Exit status 0 only
# when all passed.
#
#   test/vm/run-in-vm -- test/integration/soak-in-guest.sh BUILD_DIR [SECONDS]
#   test/vm/run-in-vm --timeout 2400 -- test/integration/soak-in-guest.sh build-asan 1800
#                                          (the 30-minute run, by hand)
#   test/vm/run-in-vm -- test/integration/soak-in-guest.sh build-asan 120 --leak-kib 16
#                          (arguments after SECONDS go to evd_soak; this one
#                           must fail "RSS grew": the check can see a leak)
set -u
build=$(cd "${1:?usage: soak-in-guest.sh BUILD_DIR [SECONDS [EVD_SOAK_ARGS...]]}" && pwd)
secs=${2:-120}
top=$(cd "$(dirname "$0")/../.." && pwd)
: "${EVD_VM_ADDR0:?not inside the evd VM (EVD_VM_ADDR0 unset)}"
export FI_PROVIDER_PATH="$build/.libs" EVD_TEST_DEVICE_REMOVAL=1
san_rc=86
export TSAN_OPTIONS="halt_on_error=0 detect_deadlocks=1 second_deadlock_stack=1 exitcode=$san_rc suppressions=$top/test/tsan.supp ${TSAN_OPTIONS:-}"
# A small quarantine: it fills in the first ~45 s instead of growing RSS
# for minutes (the soak's RSS check would read it as a leak; soak_rxe.cpp,
# "Flatness tolerance", has the measurements). 4 MiB still holds the blocks
# of the last few hundred endpoints closed.
export ASAN_OPTIONS="detect_leaks=1 halt_on_error=1 exitcode=$san_rc quarantine_size_mb=4 thread_local_quarantine_size_kb=256 ${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$top/test/lsan.supp print_suppressions=0 ${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1 ${UBSAN_OPTIONS:-}"
ulimit -l unlimited 2>/dev/null || true
name="evd_soak ($(basename "$build"))"
log="${TMPDIR:-/tmp}/soak.$$.log"
# The drain after the run is bounded inside evd_soak (about 3 minutes at worst).
# evd's warnings go to a file of their own: a failure names what evd saw
# (a flush cut short by FI_EVD_FLUSH_TIMEOUT, say) without flooding the log.
# The flush gets 5 s instead of 1: a TCG guest on a loaded 2-core host
# stalls for seconds, and the soak judges that every request completes, not
# the host's scheduling (one run of 459 connections lost a receive at 1 s).
export FI_LOG_LEVEL=warn FI_LOG_PROV=evd FI_EVD_FLUSH_TIMEOUT=${FI_EVD_FLUSH_TIMEOUT:-5000}
timeout -k 10 $((secs + 300)) "$build/evd_soak" -t "$secs" "${@:3}" 2>&1 | tee "$log.all" |
    grep -av --line-buffered '^libfabric:' | tee "$log"
rc=${PIPESTATUS[0]}
warns=$(grep -ac '^libfabric:' "$log.all")
flushw=$(grep -a '^libfabric:' "$log.all" | grep -ac 'flush')
echo "# evd warnings: $warns ($flushw about the closing flush)"
if [ "$rc" -ne 0 ]; then
    echo "# evd's last warnings:"
    grep -a '^libfabric:' "$log.all" | tail -n 20 | sed 's/^/#   /'
fi
reports=$(grep -cE '^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: (Address|Leak)Sanitizer)|runtime error:' "$log")
case $rc in
0) ;;
1) ;;  # evd_soak printed its "not ok" line
$san_rc) echo "not ok - $name: the sanitizer reported $reports problem(s) (above)" ;;
124 | 137) echo "not ok - $name: killed by the timeout ($((secs + 300)) s)" ;;
*) echo "not ok - $name: exit $rc (crashed?)" ;;
esac
[ "$rc" -ne $san_rc ] && [ "$reports" -gt 0 ] && echo "not ok - $name: $reports sanitizer report(s) (above)"
# The datagram suite under the same sanitizer (its threaded test reads an
# address vector without a lock while another thread grows it).
dname="DgramRxe.* ($(basename "$build"))"
timeout -k 10 300 "$build/evd_integration_dgram" --gtest_color=no --gtest_brief=1 \
    --gtest_filter='DgramRxe.*' >"$log.dgram" 2>&1
drc=$?
dreports=$(grep -cE '^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: (Address|Leak)Sanitizer)|runtime error:' "$log.dgram")
if [ "$drc" -eq 0 ] && [ "$dreports" -eq 0 ]; then
    echo "ok - $dname: $(grep -aE '^\[  PASSED  \]' "$log.dgram" | head -n 1)"
else
    echo "not ok - $dname: exit $drc, $dreports sanitizer report(s)"
    grep -avE '^libfabric:' "$log.dgram" | tail -n 60 | sed 's/^/#   /'
fi
rm -f "$log" "$log.all" "$log.dgram"
[ "$rc" -eq 0 ] && [ "$reports" -eq 0 ] && [ "$drc" -eq 0 ] && [ "$dreports" -eq 0 ]
