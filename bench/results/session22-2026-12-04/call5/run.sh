#!/bin/bash
# Session 22 (continued), call 5: HotSpot's arrays with dist::automatic({1, 0}) (the halo its
# kernel reads) out of core and in core, and the out-of-core sweep of Black-Scholes and the
# Correlator again (call 4 had them 10% and 22% from the best hand choice); cpu executors
# now queue what they release behind work queued for them (no effect on cuda).
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
    echo "$tag ${pair%%:*} rc $?"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-160
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 >> $OUT/choices.txt
  done
}
EXTRA="--sweep 8,16,32,64 --out-of-core" run ooc 120 hotspot:2 blackscholes:3 correlator:3
echo "ooc done $(( $(date +%s) - t0 )) s"
EXTRA="--sweep 1,2,4,8" run incore 90 hotspot:3
echo "done $(( $(date +%s) - t0 )) s"
rm -f $OUT/log.txt
