#!/usr/bin/env bash
# The paper's benchmarks on a GPU machine (docs/PERFORMANCE.md): builds bench_paper in
# Release with the cuda backend and runs it; extra arguments go to bench_paper, e.g.
#
#   scripts/paper-bench.sh --bench gemm,nbody --sizes 0,1,2 --out-of-core
#
# The JSON (every run's time, the copy bandwidths measured in the same run) goes to
# $RESULTS (default bench/results/paper-<date>.json).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-paper}
RESULTS=${RESULTS:-bench/results/paper-$(date +%F).json}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_ENABLE_CUDA=ON \
  -DGRIDSPAN_BUILD_TESTS=OFF -DGRIDSPAN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target bench_paper >/dev/null
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm --format=csv,noheader || true
export GRIDSPAN_CACHE_DIR=${GRIDSPAN_CACHE_DIR:-$PWD/$BUILD/kernel-cache}
exec "$BUILD/bench/bench_paper" --json "$RESULTS" "$@"
