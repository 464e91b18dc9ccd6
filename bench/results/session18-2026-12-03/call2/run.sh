#!/bin/bash
# Session 18, call 2: elementwise kernels loading every input first (three passes): benchmarks, ncu, SASS.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
for cfg in "4 1024" "4 512" "8 1024"; do
  set -- $cfg
  echo "== U=$1 B=$2" >> $OUT/knobs.txt
  GRIDSPAN_XU=$1 GRIDSPAN_XB=$2 GRIDSPAN_BACKEND=cuda timeout 60 $B --fused --sizes 28 --reps 10 --only copy gelu gelu_tanh silu sigmoid softplus 2>/dev/null | grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' >> $OUT/knobs.txt
  GRIDSPAN_XU=$1 GRIDSPAN_XB=$2 GRIDSPAN_BACKEND=cuda timeout 60 $B --sizes 28 --reps 10 --only add chain_fused 2>/dev/null | grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' >> $OUT/knobs.txt
  GRIDSPAN_XU=$1 GRIDSPAN_XB=$2 GRIDSPAN_BACKEND=cuda timeout 60 $B --gpt2 --sizes 13 --reps 20 2>/dev/null | grep -o '"bench": "[a-z_0-9]*".*"wall_us_per_call": [0-9.]*' >> $OUT/knobs.txt
done
sed 's/"bench": //; s/"n".*"gpu_ms"/ gpu_ms/; s/"bytes".*"gbps"/gbps/' $OUT/knobs.txt
echo "knobs $(( $(date +%s) - t0 )) s"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__issue_active.avg.pct_of_peak_sustained_active
GRIDSPAN_CACHE_DIR=$PWD/build-arr/kcA GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M $B --fused --sizes 26 --reps 1 --only copy gelu sigmoid > $OUT/ncu_gs.csv 2>/dev/null
GRIDSPAN_CACHE_DIR=$PWD/build-arr/kcB GRIDSPAN_BACKEND=cuda timeout 100 ncu --clock-control none --csv --metrics $M $B --gpt2 --sizes 13 --reps 1 > $OUT/ncu_gpt2.csv 2>/dev/null
echo "ncu rc $? $(( $(date +%s) - t0 )) s"
OBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump | head -1)
for d in kcA kcB; do for f in $(find build-arr/$d -type f -name '*.cubin' -o -type f -path '*cuda*' ); do echo "#### $f $(strings $f | grep -m2 -E '\.cu$|gs_|ew_' | tr '\n' ' ')"; $OBJ -sass -fun gridspan_entry_origin_v1 $f 2>&1 | grep -E '^\s+/\*[0-9a-f]{4}\*/' | sed 's#^\s*/\*[0-9a-f]*\*/\s*##; s#\s*/\*.*##; s/ *;$//'; done; done > $OUT/sass.txt 2>&1
gzip -9 $OUT/sass.txt; ls -la $OUT
echo "done $(( $(date +%s) - t0 )) s"
