#!/bin/bash
# Session 16, call B: at-once queuing only after a host wait (GS_EXP_WAITED), waking the
# napping launch thread, a launch thread that watches 50 us before it naps; chain at 4096
# (6 processes each) and the launch benchmark beside CuPy.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays bench_launch > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
one() {  # name, env...
  local name=$1; shift
  local o; o=$(env "$@" GRIDSPAN_LOG=debug GRIDSPAN_BACKEND=cuda timeout 30 build-arr/bench/bench_arrays --sizes 12 --reps 2000 --only chain_fused add 2>&1)
  echo "$name $(echo "$o" | grep -o '"wall_us_per_call": [0-9.]*' | sed 's/.*: //' | tr '\n' ' ') | $(echo "$o" | grep -o 'works queued.*' | head -1 | sed 's/works queued at once/once/;s/by the launch thread/launcher/;s/by waiters/waiters/;s/launch thread woken/woken/')"
}
for r in 1 2 3 4 5 6; do
  one default X=1
  one waited GS_EXP_WAITED=1
  one waited_wake1 GS_EXP_WAITED=1 GS_EXP_WAKE1=1
  one waited_spin50 GS_EXP_WAITED=1 GS_EXP_SPIN=50
  one spin50 GS_EXP_SPIN=50
done | tee $OUT/runs.txt
echo "runs $(( $(date +%s) - t0 )) s"
python3 bench/arrays/cupy_baseline.py --sizes 12 --reps 2000 2>&1 | grep -E '"(add|chain_fused)"' | grep -o '"bench": "[a-z_]*".*"wall_us_per_call": [0-9.]*' | sed 's/"n".*"wall/ wall/'
for r in 1 2; do
  for v in X=1 GS_EXP_WAITED=1 "GS_EXP_WAITED=1 GS_EXP_SPIN=50"; do
    echo "== launch $v"
    env $v GRIDSPAN_BACKEND=cuda timeout 60 build-arr/bench/bench_launch --n 65536 --launches 20000 --chunks 1 4 2>&1 | grep -vE "^gridspan (info|debug)"
  done
  echo "== cupy"; timeout 60 python3 bench/launch/cupy_launch.py --n 65536 --launches 20000 2>&1 | tail -8
done > $OUT/launch.txt 2>&1
cat $OUT/launch.txt | head -120
echo "done $(( $(date +%s) - t0 )) s"
