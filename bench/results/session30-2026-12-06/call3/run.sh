#!/bin/bash
# Session 30, call 3 (the same warm machine, right after call 2), as it ran: meant as a warm
# pass from call 2's history, but HISTORY named a file that was not there, so the script
# wiped the history, tar failed, and the pass started from none: a second cold pass. MD5 ran
# past its 150 s (RUNS=4 ROUNDS=5) and gave no line.
cd "$(dirname "$0")/../../../.."
PASSES=warm DEADLINE=300 HISTORY=$OUT/../none bash bench/results/session30-2026-12-06/call2/run.sh \
  md5 hotspot correlator blackscholes gemm
