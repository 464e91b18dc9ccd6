#!/bin/bash
# NOT RUN in session 31 (no GPU machine could be started): written for the next session.
# Session 31, call 1 (the GPU machine): session 30's call 1 (by path) on the code with the
# second-read condition for replicas (5bc29cb) and this session's (pieces in tiles, the
# trial's leap, kept across runs): test_e2e Inline.* on cuda, then the cpu sweep (two cpu
# devices of 7 threads) of SpMV, N-Body and K-Means, a cold and a warm pass.
cd "$(dirname "$0")/../../../.."
bash bench/results/session30-2026-12-06/call1/run.sh "$@"
