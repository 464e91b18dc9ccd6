#!/bin/bash
# Session 21, call 1 (experiment build, host probes not committed): a host timeline of the
# GPT-2 block called once at a time (GS_HOSTPROF), and the block with the napping launch
# thread woken for a single work (EXP_WAKE1) against the committed rule, alternated.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
export GRIDSPAN_BACKEND=cuda
GS_HOSTPROF=$OUT/hp.txt timeout 60 $B --gpt2 --sizes 13 --reps 12 --only gpt2_bf16 > $OUT/hp_run.json 2>&1
gzip $OUT/hp.txt
f() { grep -o '"gpu_ms": [0-9.]*, "wall_us_per_call": [0-9.]*' | sed 's/"gpu_ms": //; s/"wall_us_per_call": //' | tr '\n' ' '; }
for r in 1 2 3 4; do
  echo "base $(timeout 40 $B --gpt2 --sizes 13 --reps 30 --only gpt2_bf16 2>/dev/null | f)"
  echo "wake1 $(EXP_WAKE1=1 timeout 40 $B --gpt2 --sizes 13 --reps 30 --only gpt2_bf16 2>/dev/null | f)"
done | tee $OUT/ab.txt
timeout 60 python3 bench/arrays/torch_baseline.py --sizes --gpt2 13 --reps 30 2>/dev/null | grep bf16 | tee $OUT/torch.json
echo "done $(( $(date +%s) - t0 )) s"
