#!/bin/bash
# Session 34, call 1 (the GPU machine): the tree's automatic choice after session 34's change
# (chunks at most 1/64 of the budget, but at most 64 an array a device where 1/16 allows;
# memory-bound cuts in whole 256 rows so that K-Means' points and labels share theirs),
# out of core against hand 8, 13, 16, 26, 32, 64 and the rules, and in core against 1, 2,
# 4. Two rounds a sweep. Arguments: "ooc", "incore" (default: both); DEADLINE in seconds.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
grep -n "kBudgetParts = \|kMostChunks = " src/runtime/granularity.hpp
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
run() {  # tag, extra arguments, then bench:size pairs
  local tag=$1 extra=$2; shift 2
  for pair in "$@"; do
    [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-500} ] && { echo "skipped $tag $pair"; continue; }
    GRIDSPAN_LOG=info timeout 200 build-g/bench/bench_paper --bench ${pair%%:*} \
      --sizes ${pair##*:} --gpus 1 --runs 3 $extra > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-140
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 |
      sed "s/^/$tag /" >> $OUT/choices.txt
  done
}
for part in ${@:-ooc incore}; do
  [ $part = ooc ] && run ooc "--sweep 8,13,16,26,32,64 --out-of-core --rounds 2" \
    correlator:3 kmeans:3 blackscholes:3 hotspot:2 spmv:4
  [ $part = incore ] && run incore "--sweep 1,2,4 --rounds 2" hotspot:3 kmeans:3 blackscholes:3
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
