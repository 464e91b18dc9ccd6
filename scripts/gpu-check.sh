#!/usr/bin/env bash
# The cuda backend's check, for a machine with NVIDIA GPUs and the CUDA toolkit: builds with
# the cuda backend, runs the whole test suite on it (GRIDSPAN_BACKEND=cuda, so a test never
# falls back to the cpu backend), the demo, then compute-sanitizer's memcheck and racecheck
# on the end-to-end tests. Logs go to $LOGS (default build-gpu/logs).
#
#   scripts/gpu-check.sh            # everything
#   SANITIZE=0 scripts/gpu-check.sh # without compute-sanitizer
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
LOGS=${LOGS:-$BUILD/logs}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$LOGS"
status=0
step() { echo "== $*"; }

step "configure and build ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRIDSPAN_ENABLE_CUDA=ON \
  -DGRIDSPAN_BUILD_BENCH=OFF >"$LOGS/configure.log" 2>&1 || { cat "$LOGS/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" >"$LOGS/build.log" 2>&1 || { tail -50 "$LOGS/build.log"; exit 1; }
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true

export GRIDSPAN_BACKEND=cuda
export GRIDSPAN_CACHE_DIR=$PWD/$BUILD/kernel-cache
step "test suite on the cuda backend"
(cd "$BUILD" && ctest --output-on-failure -j "${CTEST_JOBS:-8}" --timeout 900) >"$LOGS/ctest.log" 2>&1 || status=1
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Exception" "$LOGS/ctest.log" | tail -40

# In one process, so without GpuFault.* (its fault ends the context for every later test).
for variant in GRIDSPAN_COMPLETION_POLL_US=20 GRIDSPAN_LAUNCH_THREAD=0 GRIDSPAN_LAUNCH_IDLE_DIRECT=0; do
  step "end-to-end tests with $variant"
  env "$variant" "$BUILD/tests/test_e2e" --gtest_brief=1 --gtest_filter=-GpuFault.* \
    >"$LOGS/e2e-$variant.log" 2>&1 || status=1
  tail -3 "$LOGS/e2e-$variant.log"
done

step "demo on the cuda backend"
"$BUILD/gridspan" demo >"$LOGS/demo.log" 2>&1 || status=1
tail -8 "$LOGS/demo.log"

if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  # racecheck follows every shared-memory access, so it gets the launch tests only.
  for tool in memcheck racecheck; do
    filter=${MEMCHECK_FILTER:-*-GpuFault.*}
    [ $tool = racecheck ] && filter=${RACECHECK_FILTER:-Launch.*}
    step "compute-sanitizer --tool $tool on the end-to-end tests ($filter)"
    GRIDSPAN_FUZZ_PROGRAMS=${SANITIZE_PROGRAMS:-10} timeout "${SANITIZE_TIMEOUT:-300}" \
      compute-sanitizer --tool "$tool" --error-exitcode 99 --target-processes all \
      "$BUILD/tests/test_e2e" --gtest_filter="$filter" >"$LOGS/sanitizer-$tool.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$LOGS/sanitizer-$tool.log" | tail -5
    echo "exit status $rc"
  done
fi
echo "== gpu-check: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
