#!/usr/bin/env bash
# Every run of docs/PERFORMANCE.md's paper tables in one call on the GPU machine: builds
# bench_paper once (scripts/paper-bench.sh), then
#   - each benchmark at the largest size step whose plain-CUDA program fits one H200
#     (overhead, 2-GPU speedup, bandwidth fractions),
#   - the out-of-core runs (half of the data in device memory) at a size step that keeps
#     host staging modest,
#   - smaller sizes for the throughput curves (plots), and sizes beyond one GPU's memory
#     on two GPUs (the plain program cannot hold them; its failure is recorded).
# JSON per group goes to $RESULTS_DIR (default bench/results), named paper-<date>-<group>.json.
#
#   scripts/paper-all.sh                  # everything
#   PAPER_GROUPS="large" scripts/paper-all.sh   # only the in-core runs at the largest sizes
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-bench/results}
DATE=$(date +%F)
mkdir -p "$RESULTS_DIR"
RUN_GROUPS=${PAPER_GROUPS:-large ooc sweep beyond}

# bench:size step. Largest that fits: Black-Scholes s=6 is 86 GB, HotSpot s=6 103 GB, K-Means
# s=6 43 GB, SpMV s=8 35 GB, Correlator s=6 43 GB; MD5 and N-Body are compute-bound (their
# size is work, not data); GEMM and co-clustering are held to sizes that run in seconds.
LARGE="md5:6 nbody:6 correlator:6 kmeans:6 hotspot:6 gemm:2 spmv:8 blackscholes:6 cocluster:4"
OOC="correlator:3 kmeans:3 hotspot:2 gemm:2 spmv:4 blackscholes:3 cocluster:2"
SWEEP="blackscholes:0,1,3,4 hotspot:0,1,3,4 kmeans:0,1,3,4 spmv:0,2,4,6 correlator:0,1,3,4 md5:0,2,4"
BEYOND="blackscholes:7 kmeans:8 spmv:10"

bench() {  # group, then bench:size pairs; extra bench_paper arguments in $EXTRA
  local group=$1
  shift
  for pair in "$@"; do
    local name=${pair%%:*} size=${pair##*:}
    RESULTS="$RESULTS_DIR/paper-$DATE-$group-$name.json" scripts/paper-bench.sh \
      --bench "$name" --sizes "$size" $EXTRA
  done
}

for group in $RUN_GROUPS; do
  case $group in
    large) EXTRA="--gpus 1,2" bench large $LARGE ;;
    ooc) EXTRA="--gpus 1 --out-of-core" bench ooc $OOC ;;
    sweep) EXTRA="--gpus 1,2" bench sweep $SWEEP ;;
    beyond) EXTRA="--gpus 2 --pieces 4" bench beyond $BEYOND ;;  # chunks that fit
    *) echo "paper-all: unknown group $group (large, ooc, sweep, beyond)" >&2; exit 2 ;;
  esac
done
