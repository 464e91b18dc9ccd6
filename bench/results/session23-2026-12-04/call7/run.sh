#!/bin/bash
# Session 23, call 7: a matrix's chunks are aligned to 2-D blocks only where they are under
# 1024 rows (call 6: HotSpot out of core on the GPU ran 0.74 of the best hand choice with
# its 1490-row chunks aligned to 1472); HotSpot out of core again, and the demo's K-Means and
# GEMM on the cpu backend (16 cores), which call 6 did not reach.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper bench_demo > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_LOG=info timeout 100 build-g/bench/bench_paper --bench hotspot --sizes 2 --gpus 1 --runs 3 \
  --sweep 16,32,64 --out-of-core > $OUT/log.txt 2>&1
echo "ooc hotspot rc $? at $(( $(date +%s) - t0 )) s"
grep -a '^sweep' $OUT/log.txt | tee $OUT/ooc.txt | cut -c1-110
grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 > $OUT/choices.txt
for p in kmeans gemm; do
  GRIDSPAN_BACKEND=cpu GRIDSPAN_CPU_DEVICES=2 GRIDSPAN_CPU_THREADS=7 GRIDSPAN_LOG=info timeout 90 \
    build-g/bench/bench_demo 1 $p --sweep 8,16,32 > $OUT/log.txt 2>&1
  echo "demo $p rc $? at $(( $(date +%s) - t0 )) s"
  grep -a '^sweep' $OUT/log.txt | tee -a $OUT/demo.txt | cut -c1-100
  grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 >> $OUT/choices.txt
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
