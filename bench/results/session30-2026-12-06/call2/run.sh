#!/bin/bash
# Session 30, call 2 (the same warm machine): the rest of the cpu sweep with the replicas, one
# pass from no history (PASSES=cold), E2E=0. Session 29's call-1 script, by path.
cd "$(dirname "$0")/../../../.."
[ $# -eq 0 ] && set -- hotspot gemm correlator blackscholes
E2E=0 DOT=0 RUNS=${RUNS:-4} ROUNDS=${ROUNDS:-5} PASSES=${PASSES:-cold} DEADLINE=${DEADLINE:-380} \
  bash bench/results/session29-2026-12-06/call1/run.sh "$@"
