#!/bin/bash
# Session 34, call 2 (the GPU machine): Black-Scholes and K-Means out of core, the tree's
# automatic choice (chunks at most 1/64 of the budget, at most 64 an array a device where
# 1/16 allows, memory-bound cuts in whole 256 rows) against the same with 1/32 (patched in
# the machine's copy, built second), each beside hand 13, 26 and 32. In call 1 K-Means ran
# 26 pieces at 0.32 s and 32/64 at 0.42-0.44 s (automatic took 64); Black-Scholes 16/32 at
# 0.104 s, 26 at 0.107 and 13 at 0.115 (automatic took 26 at 1/64, 13 at 1/32). BENCHES: the
# bench:size pairs (default kmeans:3: the device time left allowed no more).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
run() {  # tag, then bench:size pairs
  local tag=$1; shift
  ninja -C build-g bench_paper > $OUT/build-$tag.txt 2>&1 || { tail -40 $OUT/build-$tag.txt; exit 1; }
  echo "$tag: built at $(( $(date +%s) - t0 )) s"
  for pair in "$@"; do
    GRIDSPAN_LOG=info timeout 200 build-g/bench/bench_paper --bench ${pair%%:*} \
      --sizes ${pair##*:} --gpus 1 --runs 3 --sweep 13,26,32 --out-of-core --rounds 2 \
      > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-140
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 |
      sed "s/^/$tag /" >> $OUT/choices.txt
  done
}
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
run parts64 ${BENCHES:-kmeans:3}
sed -i 's/kBudgetParts = 64;/kBudgetParts = 32;/' src/runtime/granularity.hpp
grep -n "kBudgetParts = " src/runtime/granularity.hpp
run parts32 ${BENCHES:-kmeans:3}
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
