#!/bin/bash
# Session 30, call 1 (the GPU machine): test_e2e Inline.* on cuda (not run after session 29's
# binding cache), then the cpu backend's sweep (two cpu devices of 7 threads) of the benchmarks
# that read a small array whole on every device (SpMV's x, N-Body's positions, K-Means'
# centres), now replicated by work::automatic. Session 29's call-1 script, by path.
cd "$(dirname "$0")/../../../.."
[ $# -eq 0 ] && set -- spmv nbody kmeans
E2E=1 DOT=0 RUNS=${RUNS:-4} ROUNDS=${ROUNDS:-5} PASSES=${PASSES:-"cold warm"} \
  bash bench/results/session29-2026-12-06/call1/run.sh "$@"
