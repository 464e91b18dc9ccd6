#!/bin/bash
# Session 33, call 1 (the GPU machine): session 32's call 1 by path, on the code of session
# 32's end (end_trials, fresh, the trial keyed by written arrays): the cpu sweep (two cpu
# devices of 7 threads) of HotSpot, GEMM, the Correlator and Black-Scholes, cold and warm.
cd "$(dirname "$0")/../../../.."
bash bench/results/session32-2026-12-07/call1/run.sh "$@"
