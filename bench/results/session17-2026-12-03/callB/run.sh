#!/bin/bash
# Session 17, call B: row kernels with a compile-time thread count, no guards on full rows,
# reciprocals, 16-byte vectors; elements per thread 8 or 16, vectors on or off (ncu, 2^26);
# then 2^28 beside torch.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr test_array bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 120 build-arr/tests/test_array --gtest_filter='ArrayRows.*:ArrayQuantize.*:RowGpuGeometry.*:MemoryPool.*:PinnedTransfers.*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -A8 "Failure" $OUT/tests.txt | head -30
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
ONLY="--only softmax layer_norm rms_norm quantize softmax_bf16 layer_norm_bf16 rms_norm_bf16 quantize_bf16"
for e in 8 16; do for nv in "" 1; do
  GRIDSPAN_ROW_NOVEC=$nv GRIDSPAN_ROW_EACH=$e GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M build-arr/bench/bench_arrays --fused --sizes 26 --reps 1 $ONLY 2>/dev/null | grep '^"' > $OUT/ncu_e$e$nv.csv
  echo "ncu each=$e novec=$nv rc $? $(( $(date +%s) - t0 )) s"
done; done
for e in 8 16; do
  GRIDSPAN_ROW_EACH=$e GRIDSPAN_BACKEND=cuda timeout 100 build-arr/bench/bench_arrays --fused --sizes 28 --reps 20 $ONLY > $OUT/fused_e$e.json 2>/dev/null
  echo "each=$e"; grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' $OUT/fused_e$e.json | sed 's/"n".*"gbps"/ gbps/'
done
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/bench/bench_arrays --gpt2 --sizes 13 --reps 20 > $OUT/gpt2.json 2>/dev/null
timeout 150 python3 bench/arrays/torch_baseline.py --sizes 28 --gpt2 13 --reps 20 > $OUT/torch.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*"gpu_ms": [0-9.]*' $OUT/gpt2.json
grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' $OUT/torch.json | sed 's/"n".*"gbps"/ gbps/'
echo "done $(( $(date +%s) - t0 )) s"
