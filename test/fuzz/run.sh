#!/bin/bash
# test/fuzz/run.sh [SECONDS]: builds the libFuzzer targets (clang++, ASan,
# UBSan; a build tree of their own, build-fuzz/ at the top, or
# $EVD_FUZZ_BUILD) and runs each, as many at once as there are cores, from a
# copy of its committed corpus in test/fuzz/corpus/<target>: every input of
# the corpus is replayed, then it fuzzes for SECONDS (default 60; the test
# command gives 10; a long campaign is `run.sh 3600` by hand, test/README.md).
# The repository's corpus is never written; EVD_FUZZ_KEEP=DIR keeps the grown
# corpora there. One line per
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
# fuzz_one TARGET: one target, its line to $build/fuzz_TARGET.result, its
# exit status 0 or 1
fuzz_one() {
    local t=$1 work log rc runs cov ft files
    local -a dict=()
    work=$(mktemp -d "${TMPDIR:-/tmp}/evd-fuzz-$t.XXXXXX")
    cp -r "$top/test/fuzz/corpus/$t/." "$work/" 2>/dev/null
    [ -f "$top/test/fuzz/$t.dict" ] && dict=(-dict="$top/test/fuzz/$t.dict")
    log=$build/fuzz_$t.log
    # libFuzzer runs every input of the corpus first (the replay), then fuzzes
    ./fuzz_$t -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$build/crash-$t-" \
        "${dict[@]}" "$work" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    files=$(find "$work" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "ok - fuzz_$t: committed corpus replayed ($(ls "$top/test/fuzz/corpus/$t" | wc -l) inputs), ${runs:-?} executions in $secs s, coverage ${cov:-?} edges / ${ft:-?} features, corpus $files inputs" >"$build/fuzz_$t.result"
    else
        {
            echo "not ok - fuzz_$t: exit $rc after ${runs:-?} executions (log $log, input $(ls "$build"/crash-$t-* 2>/dev/null | head -1))"
            grep -E "ERROR: |runtime error:|SUMMARY" "$log" | head -5
        } >"$build/fuzz_$t.result"
    fi
    if [ -n "${EVD_FUZZ_KEEP:-}" ]; then
        mkdir -p "$EVD_FUZZ_KEEP/$t" && cp -r "$work/." "$EVD_FUZZ_KEEP/$t/"
    fi
    rm -rf "$work"
    [ $rc -eq 0 ]
}
# the targets side by side, as many at once as there are cores
targets=(cm_data eq hints addr ud)
fail=0
i=0
while [ $i -lt ${#targets[@]} ]; do
    pids=()
    for _ in $(seq "$jobs"); do
        [ $i -lt ${#targets[@]} ] || break
        fuzz_one "${targets[$i]}" &
        pids+=($!)
        i=$((i + 1))
    done
    for p in "${pids[@]}"; do wait "$p" || fail=1; done
done
for t in "${targets[@]}"; do cat "$build/fuzz_$t.result"; done
exit $fail
