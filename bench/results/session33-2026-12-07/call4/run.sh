#!/bin/bash
# Session 33, call 4 (the GPU machine): the array library's chunk sweep again (last run in
# session 22, call 4, before the trials, tiles and replicas): `bench_arrays --sizes 20 24 28
# --reps 20 --chunks C` for C = 0 (automatic), 1, 2, 4, 8, 16, 32, in two interleaved rounds.
# plot_sweep.py draws arrays.jsonl (its best hand choice per size against automatic).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_arrays > $OUT/build-arrays.txt 2>&1 || { tail -40 $OUT/build-arrays.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for round in 1 2; do
  for c in 0 1 2 4 8 16 32; do
    [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-400} ] && { echo "skipped $round $c"; continue; }
    timeout 60 build-g/bench/bench_arrays --sizes 20 24 28 --reps 20 --chunks $c \
      --only copy add chain_fused sum_all sum_first cumsum_all >> $OUT/arrays.jsonl 2> $OUT/log.txt
    echo "round $round chunks $c rc $? $(wc -l < $OUT/arrays.jsonl) lines at $(( $(date +%s) - t0 )) s"
  done
done
rm -f $OUT/log.txt
