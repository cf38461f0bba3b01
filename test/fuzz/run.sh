#!/bin/bash
# test/fuzz/run.sh [SECONDS]: builds the libFuzzer targets (clang++, ASan,
# UBSan; a build tree of their own, build-fuzz/ at the top, or
# $EVD_FUZZ_BUILD) and runs each for SECONDS (default 60) from a copy of its
# seed corpus in test/fuzz/corpus/<target> (the repository's corpus is never
# written; EVD_FUZZ_KEEP=DIR keeps the grown corpora there). One line per
# target: "ok - ..." with executions, coverage and corpus size, or
# "not ok - ..." with the crash and where its input was saved.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-60}
build=${EVD_FUZZ_BUILD:-$top/build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$build"
cd "$build" || exit 1
if [ ! -f Makefile ]; then
    CC=clang CXX=clang++ "$top/configure" -q --enable-fuzzing || { echo "not ok - configure --enable-fuzzing"; exit 1; }
fi
make -j"$jobs" fuzz >make-fuzz.log 2>&1 || { tail -30 make-fuzz.log; echo "not ok - make fuzz"; exit 1; }
echo "ok - fuzz targets built (clang++ $(clang++ -dumpversion), ASan+UBSan)"
fail=0
for t in cm_data eq hints addr ud; do
    work=$(mktemp -d "${TMPDIR:-/tmp}/evd-fuzz-$t.XXXXXX")
    cp -r "$top/test/fuzz/corpus/$t/." "$work/" 2>/dev/null
    dict=()
    [ -f "$top/test/fuzz/$t.dict" ] && dict=(-dict="$top/test/fuzz/$t.dict")
    log=$build/fuzz_$t.log
    ./fuzz_$t -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$build/crash-$t-" \
        "${dict[@]}" "$work" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    files=$(find "$work" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "ok - fuzz_$t: ${runs:-?} executions in $secs s, coverage ${cov:-?} edges / ${ft:-?} features, corpus $files inputs"
    else
        fail=1
        echo "not ok - fuzz_$t: exit $rc after ${runs:-?} executions (log $log, input $(ls "$build"/crash-$t-* 2>/dev/null | head -1))"
        grep -E "ERROR: |runtime error:|SUMMARY" "$log" | head -5
    fi
    if [ -n "${EVD_FUZZ_KEEP:-}" ]; then
        mkdir -p "$EVD_FUZZ_KEEP/$t" && cp -r "$work/." "$EVD_FUZZ_KEEP/$t/"
    fi
    rm -rf "$work"
done
exit $fail
