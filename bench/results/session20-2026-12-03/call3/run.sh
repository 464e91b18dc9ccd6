#!/bin/bash
# Session 20, call 3: 16-bit rows kept packed in registers (quantize under __launch_bounds__(256, 8)), tests on cuda,
# the 16-bit row kernels beside torch's copy, ncu of quantize; the GPT-2 block per call with the launch thread
# napping (as committed) and spinning (GRIDSPAN_XSPIN, an experiment), alternated.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array test_e2e > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_BACKEND=cuda timeout 60 build-arr/tests/test_e2e --gtest_filter='Launch.*' > $OUT/tests.txt 2>&1
echo "e2e rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"
GRIDSPAN_BACKEND=cuda timeout 150 build-arr/tests/test_array --gtest_filter='ArrayQuantize*:RowGpuGeometry*:ArrayRows*' >> $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
F="copy quantize quantize_bf16 rms_norm_bf16 layer_norm_bf16 softmax_bf16"
GRIDSPAN_BACKEND=cuda timeout 60 $B --fused --sizes 28 --reps 10 --only $F > $OUT/bench.json 2>/dev/null
timeout 100 python3 bench/arrays/torch_baseline.py --sizes 28 --reps 10 > $OUT/torch.json 2>/dev/null
grep -E '"(copy|quantize_bf16|rms_norm_bf16|layer_norm_bf16|softmax_bf16)"' $OUT/torch.json >> $OUT/bench.json
grep -o '"bench": "[a-z_0-9]*".*' $OUT/bench.json | sed 's/"dtype".*"gpu_ms"/ms/; s/"bytes".*"gpu_ms"/ms/; s/"reps".*//; s/"n": [0-9]*, //; s/"bytes": [0-9.]*, //; s/, "backend.*//; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
echo "bench $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__block_size,launch__occupancy_limit_registers,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
GRIDSPAN_BACKEND=cuda timeout 60 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 2 --only copy quantize quantize_bf16 rms_norm_bf16 > $OUT/ncu.csv 2>/dev/null
echo "ncu rc $? $(( $(date +%s) - t0 )) s"
for run in 1 2; do
  for mode in nap spin; do
    if [ $mode = spin ]; then export GRIDSPAN_XSPIN=1; else unset GRIDSPAN_XSPIN; fi
    echo "== $mode $run" >> $OUT/gpt2.txt
    GRIDSPAN_BACKEND=cuda timeout 40 $B --gpt2 --sizes 13 --reps 20 >> $OUT/gpt2.txt 2>/dev/null
  done
done
unset GRIDSPAN_XSPIN
timeout 60 python3 bench/arrays/torch_baseline.py --sizes --gpt2 13 --reps 20 >> $OUT/gpt2.txt 2>/dev/null
grep -o '== .*\|"bench": "[a-z_0-9]*".*' $OUT/gpt2.txt | sed 's/"dtype".*"gpu_ms"/ms/; s/"bytes".*"gpu_ms"/ms/; s/"reps".*//; s/"n": [0-9]*, //; s/"bytes": [0-9.]*, //; s/, "backend.*//; s/, "gbps.*//; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
echo "done $(( $(date +%s) - t0 )) s"
