#!/bin/bash
# Session 25, call 1 (one H200): the array library inside native tasks on the cuda backend,
# reductions included (Inline.*), the array library's tests but the long random programs,
# and a step of the array library inside a native task against a library call from the
# program and a kernel's inline launch (bench_launch, session 24's call 4 that got no machine).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g test_e2e test_array bench_launch bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export GRIDSPAN_BACKEND=cuda
timeout 150 build-g/tests/test_e2e --gtest_filter='Inline.*' > $OUT/e2e.txt 2>&1
echo "e2e rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/e2e.txt | tr '\n' ' ')"
grep -a -B2 -A8 "Failure\|FAILED  \]" $OUT/e2e.txt | head -60
echo "e2e done $(( $(date +%s) - t0 )) s"
for mode in "" "--arrays"; do
  timeout 60 build-g/bench/bench_launch --n 65536 --chunks 1,4 \
    --launches 5000 --runs 5 --inline 1,4,16 $mode 2>&1 | tee -a $OUT/launch.txt
done
echo "launch done $(( $(date +%s) - t0 )) s"
timeout 200 build-g/tests/test_array --gtest_filter='-Differential.*' > $OUT/array.txt 2>&1
echo "array rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/array.txt | tr '\n' ' ')"
grep -a -B2 -A8 "Failure\|FAILED  \]" $OUT/array.txt | head -40
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "done $(( $(date +%s) - t0 )) s"
