#!/bin/bash
# Session 36, call 1 (the GPU machine): session 35's call 3, with more variants, all out of
# core with write-behind on:
# - inorder: the tree.
# - first: the tree with session 35's call3/scheduler.patch (of the tasks that waited for
#   the worker's staging bound, the first of each device whose staging copies goes first).
# - floor: the tree with floor.patch (scheduler.patch, and the default staging bound admits
#   at least 3 tasks of the device's latest size, up to half of its memory). The default
#   bound is a quarter of the budget, 1.25 GiB: one task of automatic's 13 chunks (800 MiB),
#   two of hand 16's (640 MiB).
# - first-bound (Black-Scholes only): first with GRIDSPAN_STAGING_BYTES=2.5 GiB.
# Then a trace of Black-Scholes hand 16 for each of inorder, first and floor. DEADLINE in s.
cd "$(dirname "$0")/../../../.."
here=bench/results/session36-2026-12-08/call1
first=bench/results/session35-2026-12-07/call3/scheduler.patch
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-inorder
patch -p1 < $first > /dev/null || exit 1
ninja -C build-g bench_paper >> $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-first
patch -p1 -R < $first > /dev/null && patch -p1 < $here/floor.patch > /dev/null || exit 1
ninja -C build-g bench_paper >> $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-floor
echo "builds $(( $(date +%s) - t0 )) s"
run() {  # variant, bench, size, hand choices, staging bytes (empty: default)
  [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-430} ] && { echo "skipped $1 $2"; return; }
  GRIDSPAN_STAGING_BYTES=$5 GRIDSPAN_LOG=info timeout 100 /tmp/bench-${1%-bound} --bench $2 \
    --sizes $3 --gpus 1 --runs 3 --sweep $4 --out-of-core --rounds 2 > $OUT/log.txt 2>&1
  echo "$1 $2 rc $? at $(( $(date +%s) - t0 )) s"
  grep -a '^sweep' $OUT/log.txt | grep -v legate | sed "s/^/$1 /" | tee -a $OUT/sweep.txt |
    cut -c1-150
}
run inorder blackscholes 3 13,16,32
run floor blackscholes 3 13,16,32
run first blackscholes 3 13,16,32
run first-bound blackscholes 3 13,16,32 2684354560
run inorder kmeans 3 26,32
run floor kmeans 3 26,32
run inorder hotspot 2 26,64
run floor hotspot 2 26,64
run first kmeans 3 26,32
for v in inorder floor first; do
  [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-430} ] && break
  GRIDSPAN_TRACE=$OUT/bs-$v.json timeout 100 /tmp/bench-$v --bench blackscholes --sizes 3 \
    --gpus 1 --runs 3 --sweep 16 --out-of-core > /dev/null 2>&1
  python3 bench/paper/trace_summary.py $OUT/bs-$v-16.json --last 0.3 | sed "s/^/$v /" |
    tee -a $OUT/summary.txt
  rm -f $OUT/bs-$v-dask-16.json $OUT/bs-$v-legate-1.json $OUT/bs-$v-automatic.json
  gzip $OUT/bs-$v-16.json
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
