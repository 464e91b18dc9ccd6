#!/bin/bash
# Session 23, call 6: the demo problems on the cpu backend (16 cores: two cpu devices of 7
# threads), out of core as `make demo` runs them, against hand-chosen cuts, Dask's and
# Legate's rules (bench_demo --sweep); after matrices' chunks are whole 2-D blocks high and
# tiny budgets get chunks of up to 1 MiB (1/16 of them). Then the GPU paper benchmarks whose
# cuts that changes (HotSpot, the Correlator, SpMV), in core and out of core.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper bench_demo > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cpu GRIDSPAN_CPU_DEVICES=2 GRIDSPAN_CPU_THREADS=7 GRIDSPAN_LOG=info timeout 200 \
  build-g/bench/bench_demo 2 --sweep 1,2,4,8,16,32 > $OUT/log.txt 2>&1
echo "demo rc $? at $(( $(date +%s) - t0 )) s"
grep -a '^sweep' $OUT/log.txt | tee $OUT/demo.txt | cut -c1-120
grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 > $OUT/choices.txt
run() {  # tag, timeout, then bench:size pairs; extra arguments in $EXTRA
  local tag=$1 limit=$2; shift 2
  for pair in "$@"; do
    GRIDSPAN_LOG=info timeout $limit build-g/bench/bench_paper --bench ${pair%%:*} --sizes ${pair##*:} \
      --gpus 1 --runs 3 $EXTRA > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | grep -a "automatic\| 32 \| 64 " | cut -c1-110
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 >> $OUT/choices.txt
  done
}
EXTRA="--sweep 8,16,32,64 --out-of-core" run ooc 150 hotspot:2 correlator:3 spmv:4
EXTRA="--sweep 1,2,4,8,16,32" run incore 120 hotspot:3 correlator:3
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
