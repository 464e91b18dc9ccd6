#!/bin/bash
# Session 19, call 1: the pinned-buffer test on cuda; quantize under ncu (instructions, DRAM, issue) and its SASS;
# the GPT-2 block and the fused rows beside torch (sync_ms and gpu_ms alike).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/tests/test_array --gtest_filter='PinnedTransfers.*:ArrayRows*:ArrayQuantize*:RowGpuGeometry*:ArrayActivations*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
GRIDSPAN_BACKEND=cuda timeout 90 $B --fused --sizes 28 --reps 10 --only copy softmax layer_norm rms_norm quantize softmax_bf16 layer_norm_bf16 rms_norm_bf16 quantize_bf16 > $OUT/fused_gs.json 2>/dev/null
GRIDSPAN_BACKEND=cuda timeout 40 $B --gpt2 --sizes 13 --reps 20 > $OUT/gpt2_gs.json 2>/dev/null
cat $OUT/fused_gs.json $OUT/gpt2_gs.json | grep -o '"bench": "[a-z_0-9]*", "n": [0-9]*.*' | sed 's/"bytes".*"gbps"/gbps/; s/, "backend.*//'
echo "ours $(( $(date +%s) - t0 )) s"
timeout 100 python3 bench/arrays/torch_baseline.py --sizes 28 --gpt2 13 --reps 10 > $OUT/torch.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*' $OUT/torch.json | sed 's/"dtype".*"gpu_ms"/ms/; s/"reps".*//'
echo "torch $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__warps_active.avg.pct_of_peak_sustained_active
rm -rf build-arr/kcQ; GRIDSPAN_CACHE_DIR=$PWD/build-arr/kcQ GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 1 --only copy quantize quantize_bf16 rms_norm_bf16 layer_norm_bf16 > $OUT/ncu_q.csv 2>/dev/null
echo "ncu rc $? $(( $(date +%s) - t0 )) s"
OBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump | head -1)
for f in $(find build-arr/kcQ -type f -path '*cuda*' ); do echo "#### $f"; $OBJ -sass -fun gridspan_entry_origin_v1 $f 2>&1 | grep -E '^\s+/\*[0-9a-f]{4}\*/' | sed 's#^\s*/\*[0-9a-f]*\*/\s*##; s#\s*/\*.*##; s/ *;$//'; done > $OUT/sass.txt 2>&1
gzip -9 $OUT/sass.txt
echo "done $(( $(date +%s) - t0 )) s"
