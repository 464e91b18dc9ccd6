#!/bin/bash
# Session 36, call 3 (the GPU machine): the default staging bound at half of the device's
# memory (the tree since 2eaef3e, "half"; with copying_first since e0720fe) against a quarter
# (quarter.patch: the bound before, made against e0720fe), out of core with write-behind on: Black-Scholes, then K-Means, then HotSpot, each in two
# rounds beside hand choices and Dask's rule. DEADLINE in s: no run starts after it.
cd "$(dirname "$0")/../../../.."
here=bench/results/session36-2026-12-08/call3
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-half
patch -p1 < $here/quarter.patch > /dev/null || exit 1
ninja -C build-g bench_paper >> $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
cp build-g/bench/bench_paper /tmp/bench-quarter
echo "builds $(( $(date +%s) - t0 )) s"
tail -3 $OUT/build.txt > $OUT/build-tail.txt && rm $OUT/build.txt
run() {  # variant, bench, size, hand choices
  [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-380} ] && { echo "skipped $1 $2"; return; }
  GRIDSPAN_LOG=info timeout 100 /tmp/bench-$1 --bench $2 --sizes $3 --gpus 1 --runs 3 \
    --sweep $4 --out-of-core --rounds 2 > $OUT/log.txt 2>&1
  echo "$1 $2 rc $? at $(( $(date +%s) - t0 )) s"
  grep -a '^sweep' $OUT/log.txt | grep -v legate | sed "s/^/$1 /" | tee -a $OUT/sweep.txt |
    cut -c1-150
}
for v in half quarter; do run $v blackscholes 3 13,16,32; done
for v in half quarter; do run $v kmeans 3 26,32; done
for v in half quarter; do run $v hotspot 2 26,64; done
for v in half quarter; do run $v blackscholes 3 13,16,32; done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
