#!/bin/bash
# Session 22 (continued), call 4: after call 3's findings (chunks at 1/32 of the budget, the
# superblocks following the array of most bytes, slabs across chunk boundaries cut out,
# blocked placement): the Granularity tests on cuda, the out-of-core sweep again (and 64
# pieces), the in-core sweep of the three benchmarks whose principal array changed, and the
# array library's elementwise, reduction and scan benchmarks at 1..32 chunks and automatic.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper bench_arrays test_api > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 120 build-g/tests/test_api --gtest_filter='Granularity*' > $OUT/tests.txt 2>&1
echo "granularity rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"
grep -a -B2 -A6 "Failure" $OUT/tests.txt | head -20
run() {  # tag, timeout, then bench:size pairs; extra arguments in $EXTRA
  local tag=$1 limit=$2; shift 2
  for pair in "$@"; do
    GRIDSPAN_LOG=info timeout $limit build-g/bench/bench_paper --bench ${pair%%:*} --sizes ${pair##*:} \
      --gpus 1 --runs 3 $EXTRA > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $?"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-160
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 >> $OUT/choices.txt
  done
}
EXTRA="--sweep 2,4,8,16,32,64 --out-of-core" run ooc 120 blackscholes:3 hotspot:2 kmeans:3 spmv:4 correlator:3
echo "ooc done $(( $(date +%s) - t0 )) s"
EXTRA="--sweep 1,2,4,8,16,32" run incore 90 hotspot:3 kmeans:3 nbody:2
echo "in core done $(( $(date +%s) - t0 )) s"
for c in 0 1 2 4 8 16 32; do
  timeout 60 build-g/bench/bench_arrays --sizes 20 24 28 --reps 20 --chunks $c \
    --only copy add chain_fused sum_all sum_first cumsum_all >> $OUT/arrays.jsonl 2> $OUT/log.txt
  echo "arrays chunks $c rc $? $(wc -l < $OUT/arrays.jsonl) lines"
done
echo "done $(( $(date +%s) - t0 )) s"
rm -f $OUT/log.txt
