#!/bin/bash
# Session 22, call 2: the probe fills 4-byte words (call 1's byte fill ran at 351 GB/s on the
# H200): the measured baseline three times (each in a fresh cache folder), the Granularity
# tests on cuda, and the launch chain again.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g test_api bench_launch > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  GRIDSPAN_BACKEND=cuda timeout 120 build-g/tests/test_api --gtest_filter='Granularity*' > $OUT/granularity$r.txt 2>&1
  echo "granularity rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/granularity$r.txt | tr '\n' ' ') $(grep -a 'measured:' $OUT/granularity$r.txt) $(grep -a 'us a task of' $OUT/granularity$r.txt)"
  grep -a -B2 -A6 "Failure" $OUT/granularity$r.txt | head -20
done
GRIDSPAN_BACKEND=cuda timeout 120 build-g/bench/bench_launch --chunks 1,4 --launches 20000 --runs 5 > $OUT/launch.txt 2>&1
tail -4 $OUT/launch.txt
echo "done $(( $(date +%s) - t0 )) s"
