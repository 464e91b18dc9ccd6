#!/usr/bin/env bash
# Runs the benchmarks whose figures docs/PERFORMANCE.md records; logs go to bench/results/.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/bench/results"
stamp=$(date +%Y-%m-%d)
log="$root/bench/results/cpu-$stamp.txt"
{
  echo "# $(date -u) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "## bench_overhead"
  "$build/bench/bench_overhead" --benchmark_min_time=0.2
  echo "## bench_demo 2"
  "$build/bench/bench_demo" 2
} 2>&1 | tee "$log"
echo "written to $log"
