#!/bin/bash
# Session 21, call 4: the committed code (packed 16-bit rows 32 a thread): tests on cuda (rows, quantize, activations, random
# differential programs), then every fused figure, the GPT-2 block and matmul 8192^3 beside torch in one run.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_DIFF_PROGRAMS=10 GRIDSPAN_BACKEND=cuda timeout 200 build-arr/tests/test_array --gtest_filter='ArrayRows*:ArrayQuantize*:ArrayActivations*:RowGpuGeometry*:Differential.RandomPrograms' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
GRIDSPAN_BACKEND=cuda timeout 60 $B --fused --sizes 28 --reps 10 > $OUT/bench.json 2>/dev/null
GRIDSPAN_BACKEND=cuda timeout 30 $B --gpt2 --sizes 13 --reps 20 >> $OUT/bench.json 2>/dev/null
GRIDSPAN_BACKEND=cuda timeout 60 $B --matmul --sizes 13 --reps 10 >> $OUT/bench.json 2>/dev/null
timeout 90 python3 bench/arrays/torch_baseline.py --sizes 28 --gpt2 13 --matmul 13 --reps 10 >> $OUT/bench.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*' $OUT/bench.json | sed 's/"dtype".*"gpu_ms"/ms/; s/"reps".*//; s/"n": [0-9]*, //; s/"bytes": [0-9.]*, //; s/, "backend.*//; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
echo "done $(( $(date +%s) - t0 )) s"
