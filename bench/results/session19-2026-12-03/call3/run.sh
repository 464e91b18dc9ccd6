#!/bin/bash
# Session 19, call 3: row kernels with and without vectors (an experiment's switch, GRIDSPAN_ROW_VECTORS=0) at 2^26 and 2^28, and under ncu at 2^28.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
for v in 1 0 1 0; do for s in 26 28; do
echo "== vectors $v size $s"
GRIDSPAN_ROW_VECTORS=$v GRIDSPAN_BACKEND=cuda timeout 90 $B --fused --sizes $s --reps 10 --only copy softmax quantize softmax_bf16 layer_norm_bf16 rms_norm_bf16 quantize_bf16 2>/dev/null | grep -o '"bench": "[a-z_0-9]*", "n": [0-9]*.*' | sed 's/"bytes".*"gbps"/gbps/; s/, "backend.*//; s/"n": [0-9]*, //' | tr '\n' ' ' | sed 's/"bench": //g; s/"gpu_ms"/ms/g; s/"wall_us_per_call": [0-9.]*, //g'; echo
done; done
echo "ours $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for v in 1 0; do
GRIDSPAN_ROW_VECTORS=$v GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M $B --fused --sizes 28 --reps 1 --only rms_norm_bf16 > $OUT/ncu_v$v.csv 2>/dev/null
echo "ncu $v rc $? $(( $(date +%s) - t0 )) s"
done
echo "done $(( $(date +%s) - t0 )) s"
