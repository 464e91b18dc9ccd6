#!/bin/bash
# Session 33, call 3 (the GPU machine): first what choosing costs a launch (bench_launch
# --chunks 0,1,4: 0 is dist/work::automatic), then session 32's call 3 by path (never run
# there): the paper benchmarks on the GPU itself, in core and out of core ("incore" / "ooc").
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_launch bench_paper > $OUT/build-launch.txt 2>&1 || { tail -40 $OUT/build-launch.txt; exit 1; }
for i in 1 2; do
  timeout 60 build-g/bench/bench_launch --chunks 0,1,4 --launches 20000 --runs 5 | tee -a $OUT/launch.txt
done
bash bench/results/session32-2026-12-07/call3/run.sh "$@"
