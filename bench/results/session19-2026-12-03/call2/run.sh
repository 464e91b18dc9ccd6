#!/bin/bash
# Session 19, call 2: row kernels a vector (16 bytes) at a time; tests on cuda, rows and quantize beside torch, ncu.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/tests/test_array --gtest_filter='PinnedTransfers.*:ArrayRows*:ArrayQuantize*:RowGpuGeometry*:ArrayActivations*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
for i in 1 2; do
GRIDSPAN_BACKEND=cuda timeout 90 $B --fused --sizes 28 --reps 10 --only copy softmax layer_norm rms_norm quantize softmax_bf16 layer_norm_bf16 rms_norm_bf16 quantize_bf16 > $OUT/fused_gs$i.json 2>/dev/null
GRIDSPAN_BACKEND=cuda timeout 40 $B --gpt2 --sizes 13 --reps 20 > $OUT/gpt2_gs$i.json 2>/dev/null
cat $OUT/fused_gs$i.json $OUT/gpt2_gs$i.json | grep -o '"bench": "[a-z_0-9]*", "n": [0-9]*.*' | sed 's/"bytes".*"gbps"/gbps/; s/, "backend.*//; s/"n": [0-9]*, //'
done
echo "ours $(( $(date +%s) - t0 )) s"
timeout 100 python3 bench/arrays/torch_baseline.py --sizes 28 --gpt2 13 --reps 10 > $OUT/torch.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*' $OUT/torch.json | grep -v "gelu\|silu\|sigmoid\|softplus\|cupy" | sed 's/"dtype".*"gpu_ms"/ms/; s/"reps".*//; s/"gbps"/gbps/'
echo "torch $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.pct_of_peak_sustained_active
rm -rf build-arr/kcQ; GRIDSPAN_CACHE_DIR=$PWD/build-arr/kcQ GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 1 --only copy quantize quantize_bf16 rms_norm_bf16 layer_norm_bf16 > $OUT/ncu_q.csv 2>/dev/null
echo "ncu rc $? $(( $(date +%s) - t0 )) s"
GRIDSPAN_DIFF_PROGRAMS=16 GRIDSPAN_BACKEND=cuda timeout 60 build-arr/tests/test_array --gtest_filter='Differential.RandomPrograms' > $OUT/diff.txt 2>&1
echo "diff rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/diff.txt | tr '\n' ' ')"
echo "done $(( $(date +%s) - t0 )) s"
