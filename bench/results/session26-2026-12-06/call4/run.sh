#!/bin/bash
# Session 26, call 4 (the GPU machine): the inline tests on cuda, with the new test of whole
# reductions over regions of 1 to 2000 elements (warps partly filled) combined a warp at a time.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g test_e2e > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 100 build-g/tests/test_e2e --gtest_filter='Inline.*' > $OUT/e2e.txt 2>&1
echo "Inline on cuda rc $?: $(grep -a -c '\[       OK' $OUT/e2e.txt) ok, $(grep -a -c '\[  FAILED  \]' $OUT/e2e.txt) failed lines"
grep -a -B2 -A8 "Failure" $OUT/e2e.txt | head -40
echo "done $(( $(date +%s) - t0 )) s"
