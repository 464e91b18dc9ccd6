#!/bin/bash
# Session 29, call 1 (the GPU machine): the cpu backend's sweep (two cpu devices of 7 threads)
# with the trial of finer cuts judged by launch periods (LaunchClocks) instead of busy time a thread; the
# kernels' cost history kept across runs (GRIDSPAN_COST_HISTORY): a "cold" pass from no history
# (its later rounds read what its earlier ones kept), then a "warm" pass that starts from it.
# Arguments: benchmarks. Env: RUNS, ROUNDS (defaults 2 and 3), PASSES, E2E=0 skips the tests.
# The trial now compares how often launches complete at each cut. First, bench_launch --dot
# (a whole reduction a step, from the program or K inline in a native function) on cuda and cpu.
# A pass skips the benchmarks left once DEADLINE seconds (default 470) have gone. DOT=0 skips
# bench_launch; HISTORY=file.tgz starts from the history an earlier call kept (call 2:
# HISTORY=bench/results/session29-2026-12-06/call1/out/history.tgz PASSES=warm DOT=0).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
targets="bench_paper bench_launch"; [ "${E2E:-0}" = 1 ] && targets="$targets test_e2e"
ninja -C build-g $targets > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
if [ "${E2E:-0}" = 1 ]; then
  GRIDSPAN_BACKEND=cuda timeout 120 build-g/tests/test_e2e --gtest_filter='Inline.*' > $OUT/e2e.txt 2>&1
  echo "Inline on cuda rc $?: $(grep -a -c '\[       OK' $OUT/e2e.txt) ok, $(grep -a -c '\[  FAILED  \]' $OUT/e2e.txt) failed lines"
  grep -a -B2 -A8 "Failure" $OUT/e2e.txt | head -30
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
fi
for backend in $([ "${DOT:-1}" = 1 ] && echo cuda cpu); do
  GRIDSPAN_BACKEND=$backend timeout 60 build-g/bench/bench_launch --n 65536 --chunks 1,4 \
    --launches 2000 --runs 3 --inline 1,16 --dot 2>&1 | sed "s/^/$backend /" | tee -a $OUT/dot.txt
done
echo "dot done $(( $(date +%s) - t0 )) s"
export GRIDSPAN_CPU_THREADS=7
mkdir -p $GRIDSPAN_CACHE_DIR/granularity
find $GRIDSPAN_CACHE_DIR/granularity -mindepth 1 -type d -exec rm -rf {} +  # no history
[ -n "$HISTORY" ] && tar -xzf "$HISTORY" -C $GRIDSPAN_CACHE_DIR/granularity
for pass in ${PASSES:-cold warm}; do
  for b in "$@"; do
    [ $(( $(date +%s) - t0 )) -gt ${DEADLINE:-470} ] && { echo "skipped $pass $b"; continue; }
    GRIDSPAN_LOG=info timeout 150 build-g/bench/bench_paper --backend cpu --gpus 2 \
      --bench $b --sizes -5 --sweep 1,2,4,8,16 --runs ${RUNS:-2} --rounds ${ROUNDS:-3} > $OUT/log.txt 2>&1
    echo "cpu $b $pass rc $? at $(( $(date +%s) - t0 )) s"
    grep -a '^sweep' $OUT/log.txt | sed "s/^/$pass /" | tee -a $OUT/sweep.txt | cut -c1-110
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 | sed "s/^/$pass /" >> $OUT/choices.txt
  done
done
tar -czf $OUT/history.tgz -C $GRIDSPAN_CACHE_DIR/granularity .
ls $GRIDSPAN_CACHE_DIR/granularity/*/ | wc -l | sed 's/^/history files: /'
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
