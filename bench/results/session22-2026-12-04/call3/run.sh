#!/bin/bash
# Session 22 (continued 2026-12-04), call 3: the granularity sweep on one H200. Each paper
# benchmark at a mid size (about an eighth of its largest) with 1..32 chunks and superblocks,
# Dask's 128 MiB rule, Legate's 1 Mi-element rule and dist::automatic/work::automatic; then
# out of core (device memory at half of the data) for the benchmarks that can run so.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON -DGRIDSPAN_BUILD_TESTS=OFF > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
run() {  # tag, timeout, then bench:size pairs; extra arguments in $EXTRA
  local tag=$1 limit=$2; shift 2
  for pair in "$@"; do
    GRIDSPAN_LOG=info timeout $limit build-g/bench/bench_paper --bench ${pair%%:*} --sizes ${pair##*:} \
      --gpus 1 --runs 3 --json $OUT/$tag-${pair%%:*}.json $EXTRA > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $?"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt
    grep -a 'automatic \(work\|distribution\|granularity\)' $OUT/log.txt | sort -u | cut -c1-400 >> $OUT/choices-$tag.txt
    rm -f $OUT/$tag-${pair%%:*}.json
  done
}
EXTRA="--sweep 1,2,4,8,16,32" run incore 120 blackscholes:3 hotspot:3 kmeans:3 spmv:5 correlator:3 md5:3 nbody:2 gemm:1
echo "in core done $(( $(date +%s) - t0 )) s"
EXTRA="--sweep 2,4,8,16,32 --out-of-core" run ooc 150 blackscholes:3 hotspot:2 kmeans:3 spmv:4 correlator:3
echo "done $(( $(date +%s) - t0 )) s"
rm -f $OUT/log.txt
