#!/bin/bash
# Session 26 (the GPU machine): the inline tests on cuda and the inline launch chains
# (bench_launch, kernels and array steps, 1 and 4 chunks: the batch's tasks now queue their
# inline launches together), then the cpu backend's sweep (two cpu devices of 7 threads) with
# finer cuts judged by each task's share of its device (ShareClock); three interleaved rounds
# of two timed runs a variant (--rounds 3 --runs 2).
# Arguments: finer:benchmark pairs, e.g. 1:hotspot 0:hotspot (finer=0 turns the trial off).
# With E2E=0 the inline tests and the launch chains are skipped. Results are written as each
# benchmark ends.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper bench_launch test_e2e > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
if [ "${E2E:-1}" = 1 ]; then
  GRIDSPAN_BACKEND=cuda timeout 120 build-g/tests/test_e2e --gtest_filter='Inline.*' > $OUT/e2e.txt 2>&1
  echo "Inline on cuda rc $?: $(grep -a -c '\[       OK' $OUT/e2e.txt) ok, $(grep -a -c '\[  FAILED  \]' $OUT/e2e.txt) failed lines"
  grep -a -B2 -A8 "Failure" $OUT/e2e.txt | head -30
  for mode in "" "--arrays"; do
    GRIDSPAN_BACKEND=cuda timeout 60 build-g/bench/bench_launch --n 65536 --chunks 1,4 \
      --launches 5000 --runs 5 --inline 1,4,16 $mode 2>&1 | tee -a $OUT/launch.txt
  done
  echo "launch done $(( $(date +%s) - t0 )) s"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
fi
export GRIDSPAN_CPU_THREADS=7
for item in "$@"; do
  f=${item%%:*}; b=${item#*:}
  GRIDSPAN_FINER_CUTS=$f GRIDSPAN_LOG=info timeout 150 build-g/bench/bench_paper --backend cpu --gpus 2 \
    --bench $b --sizes -5 --sweep 1,2,4,8,16 --runs 2 --rounds 3 > $OUT/log.txt 2>&1
  echo "cpu $b finer=$f rc $? at $(( $(date +%s) - t0 )) s"
  grep -a '^sweep' $OUT/log.txt | sed "s/^/finer=$f /" | tee -a $OUT/sweep.txt | cut -c1-110
  grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 | sed "s/^/finer=$f /" >> $OUT/choices.txt
done
rm -f $OUT/log.txt
echo "done $(( $(date +%s) - t0 )) s"
