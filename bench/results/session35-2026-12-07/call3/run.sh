#!/bin/bash
# Session 35, call 3 (the GPU machine). NOT RUN in session 35: the device time was spent on
# refused starts. Of the blocked tasks of a device, the first whose staging copies goes back to
# ready first and is not deferred again (scheduler.patch: Worker::copying_first, with its test
# Worker.OfTheTasksThatWaitedForTheStagingBoundOneThatCopiesGoesFirst; not in the tree),
# against the tree as it is, both with write-behind on, out of core. Call 2's diagnostic build
# showed the staging bound (a quarter of the budget: two Black-Scholes tasks of 640 MiB) taken
# by the resident tasks of a sweep until all had run (21 ms), then the copies in one task at a
# time with no compute beside them (56 ms), then the resident tail (19 ms). The tree is built
# first, then the patch is applied in the machine's copy and built. DEADLINE in seconds.
cd "$(dirname "$0")/../../../.."
here=bench/results/session35-2026-12-07/call3
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-inorder
patch -p1 < $here/scheduler.patch > /dev/null || exit 1
ninja -C build-g bench_paper >> $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-first
echo "builds $(( $(date +%s) - t0 )) s"
for job in blackscholes:3:13,16,32 kmeans:3:26,32 hotspot:2:26,64; do
  IFS=: read bench size hand <<< "$job"
  for v in inorder first; do
    [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-330} ] && { echo "skipped $v $bench"; continue; }
    GRIDSPAN_LOG=info timeout 100 /tmp/bench-$v --bench $bench --sizes $size --gpus 1 --runs 3 \
      --sweep $hand --out-of-core --rounds 2 > $OUT/log.txt 2>&1
    echo "$v $bench rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | grep -v legate | sed "s/^/$v /" | tee -a $OUT/sweep.txt |
      cut -c1-150
  done
done
# A trace of each (hand 16): do copies in now run beside the resident tasks?
for v in inorder first; do
  [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-330} ] && break
  GRIDSPAN_TRACE=$OUT/bs-$v.json timeout 100 /tmp/bench-$v --bench blackscholes --sizes 3 \
    --gpus 1 --runs 3 --sweep 16 --out-of-core > /dev/null 2>&1
  python3 bench/paper/trace_summary.py $OUT/bs-$v-16.json --last 0.3 | sed "s/^/$v /" |
    tee -a $OUT/summary.txt
  rm -f $OUT/bs-$v-dask-16.json $OUT/bs-$v-legate-1.json $OUT/bs-$v-automatic.json
  gzip $OUT/bs-$v-16.json
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
