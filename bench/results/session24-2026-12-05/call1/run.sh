#!/bin/bash
# Session 24, call 1: the array library inside native tasks on the cuda backend (Inline.*,
# Errors.*), and the array library's own tests after the elementwise/assign refactor.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g test_e2e test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export GRIDSPAN_BACKEND=cuda
timeout 240 build-g/tests/test_e2e --gtest_filter='Inline.*:Errors.*:Launch.*' > $OUT/e2e.txt 2>&1
echo "e2e rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/e2e.txt | tr '\n' ' ')"
grep -a -B2 -A8 "Failure\|FAILED  \]" $OUT/e2e.txt | head -60
echo "e2e done $(( $(date +%s) - t0 )) s"
timeout 300 build-g/tests/test_array > $OUT/array.txt 2>&1
echo "array rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/array.txt | tr '\n' ' ')"
grep -a -B2 -A8 "Failure\|FAILED  \]" $OUT/array.txt | head -40
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "done $(( $(date +%s) - t0 )) s"
