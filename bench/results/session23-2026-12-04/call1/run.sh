#!/bin/bash
# Session 23, call 1: inline launches inside native functions on the cuda backend (the
# e2e tests, Inline.* among them) and what a step costs as an inline launch against a
# launch of its own (bench_launch --inline).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g test_e2e test_api bench_launch > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export GRIDSPAN_BACKEND=cuda
timeout 240 build-g/tests/test_e2e --gtest_filter='Inline.*:Errors.*:Launch.*:Spill.*' > $OUT/e2e.txt 2>&1
echo "e2e rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/e2e.txt | tr '\n' ' ')"
grep -a -B2 -A8 "Failure\|FAILED  \]" $OUT/e2e.txt | head -40
echo "e2e done $(( $(date +%s) - t0 )) s"
timeout 200 build-g/tests/test_e2e --gtest_filter='Differential.*' > $OUT/differential.txt 2>&1
echo "differential rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/differential.txt | tr '\n' ' ')"
timeout 120 build-g/tests/test_api --gtest_filter='Granularity*' > $OUT/api.txt 2>&1
echo "granularity rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/api.txt | tr '\n' ' ')"
for n in 65536 1048576; do
  launches=$([ "$n" -gt 100000 ] && echo 2000 || echo 10000)
  timeout 120 build-g/bench/bench_launch --n $n --chunks 1,4 --launches $launches --runs 5 \
    --inline 1,4,16 --json $OUT/launch-$n.json 2>&1 | tee $OUT/launch-$n.txt
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "done $(( $(date +%s) - t0 )) s"
