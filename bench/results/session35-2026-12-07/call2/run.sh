#!/bin/bash
# Session 35, call 2 (the GPU machine), run with debug.patch applied to the tree of 609dea5:
# a diagnostic build (fprintf "DBG" lines in
# Worker::admit_and_stage, count_unstaged and MemoryManager::try_stage, never committed) of
# Black-Scholes out of core, hand 16, write-behind on: when each copying task is deferred,
# tried, refused and staged against when the resident tasks finish. Call 1's trace showed no
# copy in while the resident tasks of a run computed (21 ms), then the copies in one task at a
# time with no compute beside them (56 ms), then the resident tail (19 ms).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_TRACE=$OUT/bs.json timeout 100 build-g/bench/bench_paper --bench blackscholes --sizes 3 \
  --gpus 1 --runs 3 --sweep 16 --out-of-core > $OUT/log.txt 2>&1
grep -a '^sweep' $OUT/log.txt
grep -a DBG $OUT/log.txt > $OUT/dbg.txt; wc -l $OUT/dbg.txt
rm -f $OUT/bs-dask-16.json $OUT/bs-legate-1.json $OUT/bs-automatic.json $OUT/log.txt
gzip $OUT/dbg.txt $OUT/bs-16.json
echo "done $(( $(date +%s) - t0 )) s"
