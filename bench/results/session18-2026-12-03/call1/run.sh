#!/bin/bash
# Session 18, call 1: elementwise knobs (elements per thread, block), ncu of activations and copy, SASS, GPT-2 kernels.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
for cfg in "4 1024" "8 2048" "16 4096" "8 1024" "4 512"; do
  set -- $cfg
  echo "== U=$1 B=$2"
  GRIDSPAN_XU=$1 GRIDSPAN_XB=$2 GRIDSPAN_BACKEND=cuda timeout 60 $B --fused --sizes 28 --reps 10 --only copy gelu silu sigmoid softplus quantize 2>/dev/null | grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' | sed 's/"n".*"wall_us_per_call"/ wall_us/' >> $OUT/knobs.txt
  GRIDSPAN_XU=$1 GRIDSPAN_XB=$2 GRIDSPAN_BACKEND=cuda timeout 60 $B --sizes 28 --reps 10 --only add chain_fused 2>/dev/null | grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' | sed 's/"n".*"wall_us_per_call"/ wall_us/' >> $OUT/knobs.txt
  echo "== end $1 $2" >> $OUT/knobs.txt
done
cat $OUT/knobs.txt | sed 's/"bench": //; s/"bytes".*"gbps"/gbps/'
echo "knobs $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers
rm -rf build-arr/kc2; GRIDSPAN_CACHE_DIR=$PWD/build-arr/kc2 GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 2 --only copy gelu sigmoid silu > $OUT/ncu_gs.csv 2>/dev/null
echo "ncu gs rc $? $(( $(date +%s) - t0 )) s"
timeout 100 ncu --clock-control none --csv --metrics $M -k regex:elementwise python3 bench/arrays/torch_baseline.py --sizes 26 --reps 2 > $OUT/ncu_torch.csv 2>/dev/null
echo "ncu torch rc $? $(( $(date +%s) - t0 )) s"
OBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump | head -1)
for f in $(find build-arr/kc2 -type f); do echo "#### $f"; $OBJ -sass $f 2>&1 | grep -v '^\s*$' | grep -v '/\*[0-9a-f]*\*/ *$' ; done > $OUT/sass.txt 2>&1
echo "sass $(wc -l < $OUT/sass.txt) lines"
M2=gpu__time_duration.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M2 $B --gpt2 --sizes 13 --reps 2 > $OUT/ncu_gpt2_gs.csv 2>/dev/null
echo "ncu gpt2 gs rc $? $(( $(date +%s) - t0 )) s"
timeout 100 ncu --clock-control none --csv --metrics $M2 python3 bench/arrays/torch_baseline.py --sizes --gpt2 13 --reps 2 > $OUT/ncu_gpt2_torch.csv 2>/dev/null
echo "ncu gpt2 torch rc $? $(( $(date +%s) - t0 )) s"
echo "done $(( $(date +%s) - t0 )) s"
