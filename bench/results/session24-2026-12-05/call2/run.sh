#!/bin/bash
# Session 24, call 2: what a step of the array library costs inside a native task (inline,
# K steps a task) against the same step as a library call from the program, and against a
# kernel's inline launch; the array library's tests on cuda (without the slow differential).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g test_e2e test_array bench_launch > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export GRIDSPAN_BACKEND=cuda
timeout 100 build-g/tests/test_e2e --gtest_filter='Inline.*' > $OUT/e2e.txt 2>&1
echo "e2e rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/e2e.txt | tr '\n' ' ')"
for n in 65536 1048576; do
  launches=$([ "$n" -gt 100000 ] && echo 2000 || echo 10000)
  timeout 100 build-g/bench/bench_launch --n $n --chunks 1,4 --launches $launches --runs 5 \
    --inline 1,4,16 --json $OUT/kernel-$n.json 2>&1 | tee $OUT/kernel-$n.txt
  timeout 100 build-g/bench/bench_launch --n $n --chunks 1,4 --launches $launches --runs 5 \
    --inline 1,4,16 --arrays --json $OUT/arrays-$n.json 2>&1 | tee $OUT/arrays-$n.txt
done
echo "bench done $(( $(date +%s) - t0 )) s"
timeout 200 build-g/tests/test_array --gtest_filter='-Differential.*' > $OUT/array.txt 2>&1
echo "array rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/array.txt | tr '\n' ' ')"
grep -a -B2 -A8 "Failure\|FAILED  \]" $OUT/array.txt | head -40
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "done $(( $(date +%s) - t0 )) s"
