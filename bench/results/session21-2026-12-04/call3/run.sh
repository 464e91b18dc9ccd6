#!/bin/bash
# Session 21, call 3: 16-bit rows kept packed with 32 elements a thread (GRIDSPAN_EXP_ROWS32, an
# experiment) against 16 (the committed rule), alternated: tests on cuda with it, then quantize,
# layer_norm and rms_norm in bfloat16 at 2^28 beside our copy, and torch's copy once.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
export GRIDSPAN_BACKEND=cuda
GRIDSPAN_EXP_ROWS32=1 timeout 120 build-arr/tests/test_array --gtest_filter='ArrayRows*:ArrayQuantize*:RowGpuGeometry*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
f() { grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' | sed 's/"n".*"gbps": //; s/"bench": //' | tr '\n' ' '; }
for r in 1 2 3 4; do
  echo "16 $(timeout 60 $B --fused --sizes 28 --reps 10 --only copy quantize_bf16 layer_norm_bf16 rms_norm_bf16 2>/dev/null | f)"
  echo "32 $(GRIDSPAN_EXP_ROWS32=1 timeout 60 $B --fused --sizes 28 --reps 10 --only copy quantize_bf16 layer_norm_bf16 rms_norm_bf16 2>/dev/null | f)"
done | tee $OUT/ab.txt
timeout 60 python3 bench/arrays/torch_baseline.py --sizes 28 --reps 10 2>/dev/null | grep -E '"(copy|quantize_bf16|layer_norm_bf16|rms_norm_bf16)"' | tee $OUT/torch.json | grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' | sed 's/"n".*"gbps": //'
echo "done $(( $(date +%s) - t0 )) s"
