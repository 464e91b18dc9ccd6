#!/bin/bash
# Session 33, call 2 (the GPU machine, right after call 1): session 32's call 2 by path:
# test_e2e Inline.* on cuda, then the cpu sweep of SpMV, N-Body, K-Means and Black-Scholes.
cd "$(dirname "$0")/../../../.."
bash bench/results/session32-2026-12-07/call2/run.sh "$@"
