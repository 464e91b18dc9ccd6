#!/bin/bash
# NOT RUN in session 31 (no GPU machine could be started): written for the next session.
# Session 31, call 2 (the GPU machine): the cpu sweep (two cpu devices of 7 threads) of
# HotSpot, GEMM, the Correlator and Black-Scholes with this session's changes: the cpu
# device's pieces in tiles (PieceGrid) and the trial of finer cuts that leaps a halving once
# and goes on across runs; a cold pass from no history and a warm one from it. Session 29's
# call-1 script, by path.
cd "$(dirname "$0")/../../../.."
[ $# -eq 0 ] && set -- hotspot gemm correlator blackscholes
E2E=0 DOT=0 RUNS=${RUNS:-4} ROUNDS=${ROUNDS:-5} PASSES=${PASSES:-"cold warm"} \
  DEADLINE=${DEADLINE:-480} bash bench/results/session29-2026-12-06/call1/run.sh "$@"
