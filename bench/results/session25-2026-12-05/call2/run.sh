#!/bin/bash
# Session 25, call 2 (the 16-core host of the GPU machine): finer cuts from measured times
# on the cpu backend, side by side with the trial off (GRIDSPAN_FINER_CUTS=0), alternated;
# two cpu devices of 7 threads, HotSpot and K-Means (below target in session 23).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export GRIDSPAN_CPU_THREADS=7
for b in hotspot kmeans; do
  for finer in 1 0 1 0; do
    GRIDSPAN_FINER_CUTS=$finer GRIDSPAN_LOG=info timeout 100 build-g/bench/bench_paper --backend cpu \
      --gpus 2 --bench $b --sizes -5 --sweep 1,2,4,8,16 --runs 3 > $OUT/log.txt 2>&1
    echo "cpu $b finer=$finer rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | sed "s/^/finer=$finer /" | tee -a $OUT/sweep.txt | cut -c1-120
    grep -a 'automatic work\|finer' $OUT/log.txt | sort -u | cut -c1-300 | sed "s/^/finer=$finer /" >> $OUT/choices.txt
  done
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
