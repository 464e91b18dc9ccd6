#!/usr/bin/env bash
# bench_launch (gridspan, public API) and the same kernel in CuPy, side by side in one run on
# a GPU machine: per launch of a dependent chain, and a launch followed by wait, at a small
# size (fixed cost) and a large one (the kernel), then plain CUDA's floor. Figures go to
# $OUTDIR.
#
#   scripts/launch-bench.sh               # n = 65536 and 16 Mi, 1 and 4 chunks
#   VARIANTS="GRIDSPAN_LAUNCH_THREAD=1 GRIDSPAN_LAUNCH_THREAD=0" ROUNDS=2 SIZES=65536 \
#     scripts/launch-bench.sh             # each setting in turn, each beside CuPy, all of
#                                         # it twice; a variant sets several with commas:
#                                         # GRIDSPAN_COMPLETION_POLL_US=50,GRIDSPAN_LAUNCH_THREAD=0
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-bench/results/launch-$(date +%F)}
BUILD=${BUILD:-build-launch}
SIZES=${SIZES:-65536 16777216}
mkdir -p "$OUTDIR"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_ENABLE_CUDA=ON \
  -DGRIDSPAN_BUILD_TESTS=OFF -DGRIDSPAN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target bench_launch >/dev/null
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader || true
export GRIDSPAN_CACHE_DIR=$PWD/$BUILD/kernel-cache
VARIANTS=${VARIANTS:-default}
for round in $(seq "${ROUNDS:-1}"); do
  for n in $SIZES; do
    launches=$([ "$n" -gt 1000000 ] && echo 2000 || echo 20000)
    for variant in $VARIANTS; do
      tag=$n$([ "$VARIANTS" = default ] || echo "-$variant" | tr ',=' '-_')
      tag=$tag$([ "${ROUNDS:-1}" = 1 ] || echo "-r$round")
      settings=()
      [ "$variant" = default ] || IFS=, read -ra settings <<<"$variant"
      echo "== n = $n, $launches launches per chain, $variant"
      env "${settings[@]}" "$BUILD/bench/bench_launch" --n "$n" --launches "$launches" \
        --json "$OUTDIR/gridspan-$tag.json"
      python3 bench/launch/cupy_launch.py --n "$n" --launches "$launches" \
        --json "$OUTDIR/cupy-$tag.json"
    done
  done
done
# The floor: the same kernel launched by plain CUDA (runtime API), with and without an event
# after each launch and a thread waiting on them, and what enqueueing a launch costs the host.
if command -v nvcc >/dev/null; then
  for prog in plain_launch plain_enqueue; do
    nvcc -O2 -std=c++17 -o "$BUILD/$prog" "bench/launch/$prog.cu"
    echo "== $prog"
    "$BUILD/$prog"
  done
fi
