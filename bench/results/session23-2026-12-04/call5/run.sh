#!/bin/bash
# Session 23, call 5: automatic arrays cut anew along the axis a kernel's threads walk (SpMV's
# ELL matrix, walked along its columns: out of memory out of core in session 22), out of core
# and in core; the in-core sweep of K-Means and HotSpot again (the principal array is now the
# first whose chunks can be followed, along any axis).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper test_api > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 120 build-g/tests/test_api --gtest_filter='Granularity*' > $OUT/tests.txt 2>&1
echo "granularity rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"
grep -a -B2 -A6 "Failure" $OUT/tests.txt | head -20
run() {  # tag, timeout, then bench:size pairs; extra arguments in $EXTRA
  local tag=$1 limit=$2; shift 2
  for pair in "$@"; do
    GRIDSPAN_LOG=info timeout $limit build-g/bench/bench_paper --bench ${pair%%:*} --sizes ${pair##*:} \
      --gpus 1 --runs 3 $EXTRA > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-130
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 >> $OUT/choices.txt
  done
}
EXTRA="--sweep 4,8,16,32,64 --out-of-core" run ooc 200 spmv:4
EXTRA="--sweep 1,2,4,8,16,32" run incore 120 spmv:5 kmeans:3 hotspot:3
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
