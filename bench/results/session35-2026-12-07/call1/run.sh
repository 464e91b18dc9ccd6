#!/bin/bash
# Session 35, call 1 (the GPU machine): write-behind (GRIDSPAN_WRITE_BEHIND, new in this tree)
# off and on, out of core, each sweep beside hand choices and Dask's rule; then traces of
# Black-Scholes with it on, one file a variant (GRIDSPAN_TRACE=t.json gives t-<variant>.json
# in a sweep since session 35), summarised by trace_summary.py over the last 60% of the
# kernels' span (the warm-up left out). Without write-behind a copy in waits for the copy out
# of its victim when the device is full: the two directions take turns. DEADLINE in seconds.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
sweep() {  # write-behind (0/1), bench, size, hand choices
  [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-480} ] && { echo "skipped wb$1 $2"; return; }
  GRIDSPAN_WRITE_BEHIND=$1 GRIDSPAN_LOG=info timeout 150 build-g/bench/bench_paper --bench $2 \
    --sizes $3 --gpus 1 --runs 3 --sweep $4 --out-of-core --rounds 2 > $OUT/log.txt 2>&1
  echo "wb$1 $2 rc $? at $(( $(date +%s) - t0 )) s"
  grep -a '^sweep' $OUT/log.txt | grep -v legate | sed "s/^/wb$1 /" | tee -a $OUT/sweep.txt |
    cut -c1-150
  grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 |
    sed "s/^/wb$1 /" >> $OUT/choices.txt
}
for job in blackscholes:3:8,13,16,26,32 kmeans:3:13,26,32 hotspot:2:26,64; do
  IFS=: read bench size hand <<< "$job"
  sweep 0 $bench $size $hand
  sweep 1 $bench $size $hand
done
if [ $(( $(date +%s) - t0 )) -lt ${DEADLINE:-480} ]; then
  mkdir -p $OUT/traces
  for wb in 0 1; do
    GRIDSPAN_WRITE_BEHIND=$wb GRIDSPAN_TRACE=$OUT/traces/bs-wb$wb.json timeout 100 \
      build-g/bench/bench_paper --bench blackscholes --sizes 3 --gpus 1 --runs 3 --sweep 16 \
      --out-of-core > /dev/null 2>&1
    for t in $OUT/traces/bs-wb$wb-16.json $OUT/traces/bs-wb$wb-automatic.json; do
      echo "== $(basename $t)" | tee -a $OUT/summary.txt
      python3 bench/paper/trace_summary.py $t --last 0.6 | tee -a $OUT/summary.txt
    done
  done
  tar czf $OUT/traces.tar.gz -C $OUT traces && rm -rf $OUT/traces  # 8 files at most come back
fi
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
