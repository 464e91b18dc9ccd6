#!/bin/bash
# Session 32, call 1 (the GPU machine), run as `DEADLINE=330 RUNS=3 ROUNDS=4 bash
# .../call1/run.sh hotspot gemm correlator`: session 31's call 2 (never run there) by path, on
# the code of session 32: the cpu sweep (two cpu devices of 7 threads) of HotSpot, GEMM, the
# Correlator and Black-Scholes with the pieces in tiles, the trial's leap, the trial kept
# across runs with its period (a run's first launch at once at the cut tried next), a cold
# pass from no history and a warm one.
cd "$(dirname "$0")/../../../.."
bash bench/results/session31-2026-12-07/call2/run.sh "$@"
