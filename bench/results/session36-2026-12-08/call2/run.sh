#!/bin/bash
# Session 36, call 2 (the GPU machine). Call 1 found Black-Scholes out of core uniformly at
# its best (0.0995-0.1005 s for 13, 16, 32, Dask's 16 and automatic) with the worker's
# staging bound at 2.5 GiB (half of the budget) set by GRIDSPAN_STAGING_BYTES, and with
# scheduler.patch. Here the default bound itself at half of the device's memory
# (half.patch), with and without scheduler.patch, all out of core with write-behind on:
# - inorder: the tree (bound: a quarter of the memory).
# - half: the tree with half.patch.
# - firsthalf: the tree with session 35's call3/scheduler.patch and half.patch.
# Black-Scholes twice over (the spread of identical runs), K-Means and HotSpot. DEADLINE in s.
cd "$(dirname "$0")/../../../.."
here=bench/results/session36-2026-12-08/call2
first=bench/results/session35-2026-12-07/call3/scheduler.patch
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-inorder
patch -p1 < $here/half.patch > /dev/null || exit 1
ninja -C build-g bench_paper >> $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-half
patch -p1 < $first > /dev/null || exit 1
ninja -C build-g bench_paper >> $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-firsthalf
echo "builds $(( $(date +%s) - t0 )) s"
run() {  # variant, bench, size, hand choices
  [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-380} ] && { echo "skipped $1 $2"; return; }
  GRIDSPAN_LOG=info timeout 100 /tmp/bench-$1 --bench $2 --sizes $3 --gpus 1 --runs 3 \
    --sweep $4 --out-of-core --rounds 2 > $OUT/log.txt 2>&1
  echo "$1 $2 rc $? at $(( $(date +%s) - t0 )) s"
  grep -a '^sweep' $OUT/log.txt | grep -v legate | sed "s/^/$1 /" | tee -a $OUT/sweep.txt |
    cut -c1-150
}
for v in inorder half firsthalf; do run $v blackscholes 3 13,16,32; done
for v in inorder half; do run $v kmeans 3 26,32; done
for v in inorder half firsthalf; do run $v blackscholes 3 13,16,32; done
for v in inorder half; do run $v hotspot 2 26,64; done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
