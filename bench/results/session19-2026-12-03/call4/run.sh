#!/bin/bash
# Session 19, call 4: row launches cut into superblocks of at most 65535 rows (no looping entry); vectors on and off
# (GRIDSPAN_ROW_VECTORS=0, an experiment's switch); tests on cuda; rows, quantize and GPT-2 beside torch.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/tests/test_array --gtest_filter='PinnedTransfers.*:ArrayRows*:ArrayQuantize*:RowGpuGeometry*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
for v in 1 0 1; do
echo "== vectors $v"
GRIDSPAN_ROW_VECTORS=$v GRIDSPAN_BACKEND=cuda timeout 90 $B --fused --sizes 28 --reps 10 --only copy softmax layer_norm rms_norm quantize softmax_bf16 layer_norm_bf16 rms_norm_bf16 quantize_bf16 > $OUT/fused_gs$v.json 2>/dev/null
GRIDSPAN_ROW_VECTORS=$v GRIDSPAN_BACKEND=cuda timeout 40 $B --gpt2 --sizes 13 --reps 20 > $OUT/gpt2_gs$v.json 2>/dev/null
cat $OUT/fused_gs$v.json $OUT/gpt2_gs$v.json | grep -o '"bench": "[a-z_0-9]*", "n": [0-9]*.*' | sed 's/"bytes".*"gbps"/gbps/; s/, "backend.*//; s/"n": [0-9]*, //; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
done
echo "ours $(( $(date +%s) - t0 )) s"
timeout 100 python3 bench/arrays/torch_baseline.py --sizes 28 --gpt2 13 --reps 10 > $OUT/torch.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*' $OUT/torch.json | grep -v "gelu\|silu\|sigmoid\|softplus\|cupy" | sed 's/"dtype".*"gpu_ms"/ms/; s/"reps".*//; s/"gbps"/gbps/; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
echo "torch $(( $(date +%s) - t0 )) s"
GRIDSPAN_DIFF_PROGRAMS=12 GRIDSPAN_BACKEND=cuda timeout 60 build-arr/tests/test_array --gtest_filter='Differential.RandomPrograms' > $OUT/diff.txt 2>&1
echo "diff rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/diff.txt | tr '\n' ' ')"
echo "done $(( $(date +%s) - t0 )) s"
