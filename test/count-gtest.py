#!/usr/bin/env python3
"""Counts results of one test step from its log and exit code.

Usage: count-gtest.py LOG EXITCODE STEPNAME
Prints "passed failed" on stdout. gtest per-test lines are counted
("[       OK ] X (N ms)" and "[  FAILED  ] X (N ms)"); "ok - NAME" /
"not ok - NAME" lines (the project's shell checks) are counted too. A step
that exited non-zero without reporting any failure (a crash, a sanitizer
abort, a hang killed by timeout) counts as one failure, so nothing is lost.
"""
import re
import sys

log, rc, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]
passed = failed = 0
ok_re = re.compile(r"^\[       OK \] \S+ \(\d+ ms\)")
fail_re = re.compile(r"^\[  FAILED  \] \S+.* \(\d+ ms\)")
tap_ok = re.compile(r"^ok( \d+)? - ")
tap_fail = re.compile(r"^not ok( \d+)? - ")
with open(log, errors="replace") as f:
    for line in f:
        line = line.rstrip("\r\n")
        if ok_re.match(line) or tap_ok.match(line):
            passed += 1
        elif fail_re.match(line) or tap_fail.match(line):
            failed += 1
if rc != 0 and failed == 0:
    failed = 1
    sys.stderr.write(f"{step}: exited with {rc} without naming a failed test: counted as one failure\n")
if rc == 0 and passed == 0 and failed == 0:
    failed = 1
    sys.stderr.write(f"{step}: ran no test: counted as one failure\n")
print(passed, failed)
