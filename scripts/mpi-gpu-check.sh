#!/usr/bin/env bash
# Issue 4 on a GPU machine: the end-to-end tests, 100 differential programs and the failure
# tests under mpirun with one GPU per rank on the cuda backend, then the benchmarks on R
# ranks of one GPU against one process of R GPUs (scripts/mpi-bench.sh). Logs go to $LOGS.
set -uo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-2}
LOGS=${LOGS:-bench/results}
BUILD=${BUILD:-build-mpi-gpu}
mkdir -p "$LOGS"
log="$LOGS/mpi-gpu-check-$(date +%F-%H%M).txt"
{
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRIDSPAN_ENABLE_CUDA=ON \
    -DGRIDSPAN_ENABLE_MPI=ON >/dev/null && cmake --build "$BUILD" -j "$(nproc)" \
    --target test_e2e failure_program gridspan_cli >/dev/null || exit 1
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  export GRIDSPAN_BACKEND=cuda GRIDSPAN_CACHE_DIR=$PWD/$BUILD/kernel-cache
  run() { echo "+ $*"; "$@"; echo "exit status $?"; }
  mpi="mpirun -np $RANKS --bind-to none -x GRIDSPAN_BACKEND -x GRIDSPAN_CACHE_DIR"
  run $mpi "$BUILD/gridspan" info
  run $mpi "$BUILD/tests/test_e2e" --gtest_filter=-Differential.*:GpuFault.*
  run $mpi -x GRIDSPAN_FUZZ_PROGRAMS=100 "$BUILD/tests/test_e2e" --gtest_filter=Differential.*
  # The failure program's native function writes host memory: the cpu backend.
  GRIDSPAN_BACKEND=cpu run $mpi "$BUILD/tests/failure_program" none 0
  GRIDSPAN_BACKEND=cpu run $mpi -x GRIDSPAN_NET_TIMEOUT=3 "$BUILD/tests/failure_program" throw 1
  GRIDSPAN_BACKEND=cpu run timeout 60 $mpi -x GRIDSPAN_NET_TIMEOUT=3 \
    "$BUILD/tests/failure_program" stop 1
} 2>&1 | tee "$log"
