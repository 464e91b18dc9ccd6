#!/usr/bin/env bash
# Issue 4's GPU comparison: the paper's benchmarks on R MPI ranks of one GPU each against
# one process with R GPUs, side by side in one mpirun (rank 0 runs both; docs/PERFORMANCE.md).
# Extra arguments go to bench_paper, e.g.
#
#   scripts/mpi-bench.sh --bench gemm,nbody --sizes 2
#
# RANKS (default 2) ranks, one per GPU; the JSON goes to $RESULTS.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-paper}
RANKS=${RANKS:-2}
RESULTS=${RESULTS:-bench/results/mpi-$(date +%F).json}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_ENABLE_CUDA=ON \
  -DGRIDSPAN_ENABLE_MPI=ON -DGRIDSPAN_BUILD_TESTS=OFF -DGRIDSPAN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target bench_paper >/dev/null
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm --format=csv,noheader || true
export GRIDSPAN_CACHE_DIR=${GRIDSPAN_CACHE_DIR:-$PWD/$BUILD/kernel-cache}
if [ "$(id -u)" = 0 ]; then  # mpirun refuses root unless told
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# --bind-to none: each rank runs threads per device (mpirun binds 2 ranks to a core each).
exec mpirun -np "$RANKS" --bind-to none -x GRIDSPAN_CACHE_DIR "$BUILD/bench/bench_paper" \
  --gpus "$RANKS" --skip-cuda --json "$RESULTS" "$@"
