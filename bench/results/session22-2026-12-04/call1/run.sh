#!/bin/bash
# Session 22, call 1: automatic granularity on one H200 (first step of issue 17): the cost
# model's GPU timing events and the measured baseline (Granularity tests with one device run on
# the GPU), the array tests on cuda with the new default distributions, and the launch chain's
# cost with the sampling in place.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g test_api test_array bench_launch > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda GRIDSPAN_LOG=info timeout 120 build-g/tests/test_api --gtest_filter='Granularity*' > $OUT/granularity.txt 2>&1
echo "granularity rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/granularity.txt | tr '\n' ' ')"; grep -a -E "measured:|us a task of|Failure" -A3 $OUT/granularity.txt | head -30
grep -a "automatic" $OUT/granularity.txt | head -12
GRIDSPAN_DIFF_PROGRAMS=10 GRIDSPAN_BACKEND=cuda timeout 200 build-g/tests/test_array --gtest_filter='ArrayElementwise*:ArrayReduce*:ArrayRows*:ArrayMatmul*:Differential.RandomPrograms' > $OUT/array.txt 2>&1
echo "array rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/array.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/array.txt | head -30
GRIDSPAN_BACKEND=cuda timeout 120 build-g/bench/bench_launch --chunks 1,4 --launches 20000 --runs 5 > $OUT/launch.txt 2>&1
tail -15 $OUT/launch.txt
echo "done $(( $(date +%s) - t0 )) s"
