#!/bin/bash
# Session 17, call A: matmul tests (batched) on cuBLAS; ncu of the fused benchmark's kernels
# (ours and torch's) at 2^26 elements.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr test_array bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 60 build-arr/tests/test_array --gtest_filter='ArrayMatmul.*' > $OUT/matmul.txt 2>&1
echo "matmul rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/matmul.txt | tr '\n' ' ')"; grep -a -B2 -A10 "Failure" $OUT/matmul.txt | head -30
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers,smsp__inst_executed.sum
GRIDSPAN_BACKEND=cuda timeout 200 ncu --clock-control none --csv --metrics $M build-arr/bench/bench_arrays --fused --sizes 26 --reps 2 > $OUT/ncu_gs.csv 2> $OUT/ncu_gs.err
echo "ncu gs rc $? $(( $(date +%s) - t0 )) s"
timeout 200 ncu --clock-control none --csv --metrics $M python3 bench/arrays/torch_baseline.py --sizes 26 --reps 2 > $OUT/ncu_torch.csv 2> $OUT/ncu_torch.err
echo "ncu torch rc $? $(( $(date +%s) - t0 )) s"
ls build-arr/kernel-cache | head -3; ls build-arr/kernel-cache | wc -l
tar czf $OUT/cache.tgz -C build-arr kernel-cache
echo "done $(( $(date +%s) - t0 )) s"
