#!/bin/bash
# Session 20, call 2: quantize rounding by adding 1.5 * 2^23 (no conversion instructions), superblocks over the grid's
# limits launched in pieces (no looping entry): tests on cuda,
# quantize beside torch's copy, ncu of quantize; the GPT-2 block's kernels (ncu, ours and torch's) and a trace of one call.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array test_e2e > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_BACKEND=cuda timeout 60 build-arr/tests/test_e2e --gtest_filter='Launch.*' > $OUT/tests_e2e.txt 2>&1
echo "e2e rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests_e2e.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests_e2e.txt | head -20
GRIDSPAN_BACKEND=cuda timeout 150 build-arr/tests/test_array --gtest_filter='ArrayQuantize*:RowGpuGeometry*:ArrayRows*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
GRIDSPAN_BACKEND=cuda timeout 60 $B --fused --sizes 28 --reps 10 --only copy quantize quantize_bf16 gelu_tanh rms_norm softmax_bf16 rms_norm_bf16 > $OUT/fused_gs.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*", "n": [0-9]*.*' $OUT/fused_gs.json | sed 's/"bytes".*"gbps"/gbps/; s/, "backend.*//; s/"n": [0-9]*, //; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
timeout 100 python3 bench/arrays/torch_baseline.py --sizes 28 --reps 10 > $OUT/torch.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*' $OUT/torch.json | grep -E '"(copy|quantize|quantize_bf16|gelu_tanh|rms_norm|softmax_bf16|rms_norm_bf16)"' | sed 's/"dtype".*"gpu_ms"/ms/; s/"reps".*//; s/"gbps"/gbps/; s/"bench": //; s/"wall_us_per_call"/loop_us/; s/"n": [0-9]*, //' | tr '\n' ' '; echo
echo "bench $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
GRIDSPAN_BACKEND=cuda timeout 60 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 2 --only copy quantize quantize_bf16 > $OUT/ncu_quantize.csv 2>/dev/null
echo "ncu quantize rc $? $(( $(date +%s) - t0 )) s"
M2=gpu__time_duration.sum,launch__block_size,launch__grid_size,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M2 $B --gpt2 --sizes 13 --reps 2 > $OUT/ncu_gpt2_gs.csv 2>/dev/null
echo "ncu gpt2 gs rc $? $(( $(date +%s) - t0 )) s"
timeout 100 ncu --clock-control none --csv --metrics $M2 python3 bench/arrays/torch_baseline.py --sizes --gpt2 13 --reps 2 > $OUT/ncu_gpt2_torch.csv 2>/dev/null
echo "ncu gpt2 torch rc $? $(( $(date +%s) - t0 )) s"
GRIDSPAN_TRACE=$OUT/gpt2_trace.json GRIDSPAN_BACKEND=cuda timeout 60 $B --gpt2 --sizes 13 --reps 5 > $OUT/gpt2_traced.json 2>/dev/null
echo "trace rc $?"; gzip $OUT/gpt2_trace.json
GRIDSPAN_BACKEND=cuda timeout 40 $B --gpt2 --sizes 13 --reps 20 > $OUT/gpt2_gs.json 2>/dev/null
timeout 60 python3 bench/arrays/torch_baseline.py --sizes --gpt2 13 --reps 20 > $OUT/gpt2_torch.json 2>/dev/null
cat $OUT/gpt2_gs.json $OUT/gpt2_torch.json | grep -o '"bench": "[a-z_0-9]*".*' | sed 's/"dtype".*"gpu_ms"/ms/; s/"bytes".*"gpu_ms"/ms/; s/"reps".*//; s/, "backend.*//; s/"bench": //; s/"wall_us_per_call"/loop_us/; s/"n": [0-9]*, //' | tr '\n' ' '; echo
echo "done $(( $(date +%s) - t0 )) s"
