#!/bin/bash
# Session 20, call 4: quantize divides only within 2^-14 of a half (was 2^-12); 16-bit quantize with and
# without __launch_bounds__(256, 8) (GRIDSPAN_XBOUNDS, an experiment), alternated, beside torch's copy; ncu of both.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/tests/test_array --gtest_filter='ArrayQuantize*:RowGpuGeometry.VectorsOfSixteenBytesMatchTheHost' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
F="copy quantize quantize_bf16 rms_norm_bf16"
for run in 1 2; do
  for mode in free bounds; do
    if [ $mode = bounds ]; then export GRIDSPAN_XBOUNDS=1; else unset GRIDSPAN_XBOUNDS; fi
    echo "== $mode $run" >> $OUT/bench.txt
    GRIDSPAN_BACKEND=cuda timeout 60 $B --fused --sizes 28 --reps 10 --only $F >> $OUT/bench.txt 2>/dev/null
  done
done
unset GRIDSPAN_XBOUNDS
timeout 100 python3 bench/arrays/torch_baseline.py --sizes 28 --reps 10 > $OUT/torch.json 2>/dev/null
grep -E '"(copy|quantize_bf16)"' $OUT/torch.json >> $OUT/bench.txt
grep -o '== .*\|"bench": "[a-z_0-9]*".*' $OUT/bench.txt | sed 's/"dtype".*"gpu_ms"/ms/; s/"reps".*//; s/"n": [0-9]*, //; s/"bytes": [0-9.]*, //; s/, "backend.*//; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
echo "bench $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_registers,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
GRIDSPAN_BACKEND=cuda timeout 60 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 2 --only quantize_bf16 > $OUT/ncu.csv 2>/dev/null
GRIDSPAN_XBOUNDS=1 GRIDSPAN_BACKEND=cuda timeout 60 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 2 --only quantize_bf16 >> $OUT/ncu.csv 2>/dev/null
echo "done $(( $(date +%s) - t0 )) s"
