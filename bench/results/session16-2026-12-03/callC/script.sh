#!/bin/bash
# Session 16, call C: at-once queuing only after a host wait, old (HEAD db22e06, .session/old)
# against new side by side: chain/add at 4096 (6 rounds), the launch benchmark beside CuPy,
# the paper benchmarks at their smallest sizes, and the end-to-end tests on the GPU.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays bench_launch bench_paper test_e2e > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cmake -G Ninja -S .session/old -B build-old -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON -DGRIDSPAN_BUILD_TESTS=OFF > /dev/null 2>&1
ninja -C build-old bench_arrays bench_launch bench_paper >> $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
one() {  # name, build
  local o; o=$(GRIDSPAN_LOG=debug GRIDSPAN_BACKEND=cuda timeout 30 $2/bench/bench_arrays --sizes 12 --reps 2000 --only add chain_fused 2>&1)
  echo "$1 add/chain $(echo "$o" | grep -o '"wall_us_per_call": [0-9.]*' | sed 's/.*: //' | tr '\n' ' ') | $(echo "$o" | grep -o 'works queued.*' | head -1)"
}
for r in 1 2 3 4 5 6; do one old build-old; one new build-arr; done | tee $OUT/runs.txt
python3 bench/arrays/cupy_baseline.py --sizes 12 --reps 2000 2>&1 | grep -E '"(add|chain_fused)"' | grep -o '"bench": "[a-z_]*".*"wall_us_per_call": [0-9.]*' | sed 's/"n".*"wall/ wall/'
echo "arrays $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  for b in build-old build-arr; do
    echo "== launch $b"
    GRIDSPAN_BACKEND=cuda timeout 60 $b/bench/bench_launch --n 65536 --launches 20000 --chunks 1 4 2>&1 | grep -vE "^gridspan (info|debug)"
  done
  echo "== cupy"; timeout 60 python3 bench/launch/cupy_launch.py --n 65536 --launches 20000 2>&1 | tail -3
done > $OUT/launch.txt 2>&1
cat $OUT/launch.txt
echo "launch $(( $(date +%s) - t0 )) s"
for b in build-old build-arr; do
  echo "== paper $b"
  timeout 150 $b/bench/bench_paper --bench all --sizes 0 --gpus 1 --runs 5 2>&1 | grep -vE "^gridspan (info|debug)" | tail -14
done > $OUT/paper.txt 2>&1
cat $OUT/paper.txt
echo "paper $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 240 build-arr/tests/test_e2e --gtest_brief=1 --gtest_filter=-GpuFault.* > $OUT/e2e.txt 2>&1
echo "e2e rc $?"; tail -5 $OUT/e2e.txt; grep -a -A10 "Failure" $OUT/e2e.txt | head -30
echo "done $(( $(date +%s) - t0 )) s"
