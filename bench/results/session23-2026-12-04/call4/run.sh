#!/bin/bash
# Session 23, call 4: the cpu sweep of call 3 again, after superblocks that run on one thread
# each (reduce partials) are cut about two a thread: two virtual cpu devices of 7 threads each, the paper
# benchmarks at --sizes -5, hand-chosen chunks 1..16 per device against Dask's and Legate's
# rules and automatic.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export GRIDSPAN_CPU_THREADS=7
for b in md5 nbody correlator kmeans hotspot gemm spmv blackscholes; do
  GRIDSPAN_LOG=info timeout 100 build-g/bench/bench_paper --backend cpu --gpus 2 --bench $b --sizes -5 \
    --sweep 1,2,4,8,16 --runs 3 > $OUT/log.txt 2>&1
  echo "cpu $b rc $? at $(( $(date +%s) - t0 )) s"
  grep -a '^sweep' $OUT/log.txt | tee -a $OUT/sweep.txt | cut -c1-110
  grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 >> $OUT/choices.txt
done
rm -f $OUT/log.txt
nproc
echo "done $(( $(date +%s) - t0 )) s"
