#!/bin/bash
# NOT RUN: the machine was taken back as it started (session 32), for a later session.
# Session 32, call 3 (the GPU machine): the GPU figures of issue 17 again on today's code
# (last measured in sessions 22-23): each paper benchmark on one GPU at session 22's sizes
# with 1..32 chunks and superblocks, Dask's and Legate's rules and automatic, in core; then
# out of core (device memory at half of the data). A benchmark is skipped once DEADLINE
# seconds (default 540) have gone. Arguments: "incore" and/or "ooc" (default both).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
run() {  # tag, timeout, then bench:size pairs; extra arguments in $EXTRA
  local tag=$1 limit=$2; shift 2
  for pair in "$@"; do
    [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-540} ] && { echo "skipped $tag $pair"; continue; }
    GRIDSPAN_LOG=info timeout $limit build-g/bench/bench_paper --bench ${pair%%:*} --sizes ${pair##*:} \
      --gpus 1 --runs 3 $EXTRA > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-110
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 | sed "s/^/$tag /" >> $OUT/choices.txt
  done
}
for part in ${@:-incore ooc}; do
  [ $part = incore ] && EXTRA="--sweep 1,2,4,8,16,32" run incore 120 blackscholes:3 hotspot:3 \
    kmeans:3 spmv:5 correlator:3 md5:3 nbody:2 gemm:1
  [ $part = ooc ] && EXTRA="--sweep 8,16,32,64 --out-of-core" run ooc 150 blackscholes:3 \
    correlator:3 spmv:4 hotspot:2 kmeans:3
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
