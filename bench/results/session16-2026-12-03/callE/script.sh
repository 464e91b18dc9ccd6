#!/bin/bash
# Session 16, call E: row kernels whose register loop unrolls (a guard, not a break), at 2^28
# beside torch (rows only).
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr test_array bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/tests/test_array --gtest_filter='ArrayRows.*:ArrayQuantize.*:RowGpuGeometry.*' > $OUT/tests.txt 2>&1
echo "rows rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"
GRIDSPAN_BACKEND=cuda timeout 150 build-arr/bench/bench_arrays --fused --sizes 28 --reps 20 > $OUT/fused_gs.json 2> $OUT/fused_gs.err
echo "bench rc $?"
grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' $OUT/fused_gs.json | sed 's/"n".*"gbps"/ gbps/'
echo "done $(( $(date +%s) - t0 )) s"
