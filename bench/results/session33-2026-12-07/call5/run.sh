#!/bin/bash
# NOT RUN in session 33 (two machine starts refused). Session 33, call 5 (the GPU machine):
# chunks at most 1/64 of the device budget instead of 1/32 (Granularity::kBudgetParts patched
# in the machine's copy only), against hand choices around both cuts, with the bytes a run
# moves (bench_paper's sweep prints them out of core since 3e7eb3d). Black-Scholes' 13 chunks
# at 1/32 ran at 0.909-0.93 of its best hand choice and of Dask's rule in three sessions, and
# below hand 8 too. Arguments: "ooc", "incore", "trace" (default: ooc); DEADLINE in seconds.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
sed -i 's/kBudgetParts = 32;/kBudgetParts = 64;/' src/runtime/granularity.hpp
grep -n "kBudgetParts = " src/runtime/granularity.hpp
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
run() {  # tag, extra arguments, then bench:size pairs
  local tag=$1 extra=$2; shift 2
  for pair in "$@"; do
    [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-330} ] && { echo "skipped $tag $pair"; continue; }
    GRIDSPAN_LOG=info timeout 200 build-g/bench/bench_paper --bench ${pair%%:*} \
      --sizes ${pair##*:} --gpus 1 --runs 3 $extra > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-140
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 |
      sed "s/^/$tag /" >> $OUT/choices.txt
  done
}
for part in ${@:-ooc}; do
  [ $part = ooc ] && run ooc64 "--sweep 8,13,16,26,32,64 --out-of-core --rounds 2" blackscholes:3 \
    hotspot:2 correlator:3 kmeans:3 spmv:4
  [ $part = incore ] && run incore64 "--sweep 1,2,4 --rounds 2" hotspot:3 kmeans:3 blackscholes:3
  # A trace of automatic's Black-Scholes out of core (the last Context of the sweep writes
  # it last): the copy queues' idle gaps against the kernels'. Also a check of position: in
  # a sweep of one round automatic runs last, after every hand choice (sessions 22, 23, 33);
  # here after three variants only.
  [ $part = trace ] && GRIDSPAN_TRACE=$OUT/blackscholes-ooc-trace.json timeout 120 \
    build-g/bench/bench_paper --bench blackscholes --sizes 3 --gpus 1 --runs 3 --sweep 16 \
    --out-of-core | grep -a '^sweep' | tee $OUT/trace-sweep.txt
  [ $part = trace ] && python3 bench/paper/trace_summary.py $OUT/blackscholes-ooc-trace.json
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
