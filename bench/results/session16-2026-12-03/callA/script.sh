#!/bin/bash
# Session 16, call A: the 4096 chain's slow mode: who queues the works, per process, and
# experiment switches (idle-direct off, polling, waking the napping launch thread, nap length).
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
one() {  # name, env...
  local name=$1; shift
  local o; o=$(env "$@" GRIDSPAN_LOG=debug GRIDSPAN_BACKEND=cuda timeout 30 build-arr/bench/bench_arrays --sizes 12 --reps 2000 --only chain_fused 2>&1)
  echo "$name $(echo "$o" | grep -o '"wall_us_per_call": [0-9.]*' | sed 's/.*: //' | tr '\n' ' ') | $(echo "$o" | grep -o 'works queued.*' | head -1)"
}
for r in 1 2 3 4 5 6; do
  one default X=1
  one idle0 GRIDSPAN_LAUNCH_IDLE_DIRECT=0
  one poll20 GRIDSPAN_COMPLETION_POLL_US=20
  one wake1 GS_EXP_WAKE1=1
  one nap5 GS_EXP_NAP_US=5
  one idle0wake1 GRIDSPAN_LAUNCH_IDLE_DIRECT=0 GS_EXP_WAKE1=1
done | tee $OUT/runs.txt
echo "runs $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  python3 bench/arrays/cupy_baseline.py --sizes 12 --reps 2000 2>&1 | grep -E '"(add|chain_fused|copy)"' | grep -o '"bench": "[a-z_]*".*"wall_us_per_call": [0-9.]*' | sed 's/"n".*"wall/ wall/'
done
echo "done $(( $(date +%s) - t0 )) s"
