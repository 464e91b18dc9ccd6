#!/bin/bash
# Session 32, call 2 (the GPU machine, right after call 1): session 31's call 1 by path (session
# 30's: test_e2e Inline.* on cuda, then the cpu sweep of two cpu devices of 7 threads), run
# as `DEADLINE=280 RUNS=3 ROUNDS=4 PASSES=cold bash .../call2/run.sh` for SpMV, N-Body,
# K-Means and Black-Scholes, a cold pass only (the budget left).
cd "$(dirname "$0")/../../../.."
[ $# -eq 0 ] && set -- spmv nbody kmeans blackscholes
DEADLINE=${DEADLINE:-280} RUNS=${RUNS:-3} ROUNDS=${ROUNDS:-4} PASSES=${PASSES:-cold} \
  bash bench/results/session31-2026-12-07/call1/run.sh "$@"
