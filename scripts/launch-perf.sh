#!/usr/bin/env bash
# Where a launch's time goes, on a GPU machine with perf: bench_launch built with frame
# pointers, recorded (perf record -g --call-graph fp) for each variant of settings, and the
# reports written as text to $OUTDIR (the recordings stay in $BUILD).
#
#   VARIANTS="GRIDSPAN_LAUNCH_THREAD=1 GRIDSPAN_LAUNCH_THREAD=0" scripts/launch-perf.sh
#   ARGS="--chunks 4" scripts/launch-perf.sh       # the chain and the waits of four chunks
#
# ARGS goes to bench_launch (default: the waits alone, one chunk: --waits-only --chunks 1
# --launches 400000 --runs 1, long enough that start-up is a small share). A variant sets
# several settings with commas. The GPU machines have no perf: run scripts/perf-bundle.sh
# on the build machine and carry build-perftool (put on PATH here when present). Reports
# per variant: each thread's share, and for the launching thread (bench_launch) and the
# lanes' completion threads (gs-cuda-lane) and the launch thread (gs-cuda-launch) their
# functions by self and by inclusive time.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build-perftool/perf ] && PATH=$PWD/build-perftool:$PATH
OUTDIR=${OUTDIR:-bench/results/launch-perf-$(date +%F)}
BUILD=${BUILD:-build-launch-fp}
ARGS=${ARGS:---waits-only --chunks 1 --launches 400000 --runs 1}
mkdir -p "$OUTDIR"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_ENABLE_CUDA=ON \
  -DGRIDSPAN_BUILD_TESTS=OFF -DGRIDSPAN_BUILD_BENCH=ON \
  -DCMAKE_CXX_FLAGS="-fno-omit-frame-pointer -g" >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target bench_launch >/dev/null
export GRIDSPAN_CACHE_DIR=$PWD/$BUILD/kernel-cache
"$BUILD/bench/bench_launch" --chunks 1 --launches 1000 --runs 1 >/dev/null  # compiles once
for variant in ${VARIANTS:-default}; do
  tag=$(echo "$variant" | tr ',=' '-_')
  settings=()
  [ "$variant" = default ] || IFS=, read -ra settings <<<"$variant"
  echo "== $variant: bench_launch $ARGS"
  # shellcheck disable=SC2086 # ARGS is a list of arguments
  env "${settings[@]}" perf record -F 20000 -g --call-graph fp -o "$BUILD/$tag.data" \
    "$BUILD/bench/bench_launch" $ARGS 2>&1 | grep -v "^\[ perf"
  for comm in bench_launch gs-cuda-lane gs-cuda-launch; do
    for mode in self children; do
      flag=$([ $mode = self ] && echo --no-children || echo --children)
      perf report -i "$BUILD/$tag.data" --comm "$comm" "$flag" --sort sym -g none --stdio \
        2>/dev/null | awk '/%/ && n++ < 150' >"$OUTDIR/$tag-$comm-$mode.txt"
    done
  done
  perf report -i "$BUILD/$tag.data" --no-children --sort comm --stdio -g none 2>/dev/null |
    grep "%" >"$OUTDIR/$tag-threads.txt"
  cat "$OUTDIR/$tag-threads.txt"
done
