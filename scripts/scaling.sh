#!/usr/bin/env bash
# Issue 5: the paper's Figure 15 on this machine's GPUs. For every benchmark and GPU count g:
#   - strong scaling: the benchmark's base size step on g GPUs;
#   - weak scaling: size step base + log2(g) on g GPUs (each step doubles the data);
# each as one process with g GPUs and (g > 1) as g MPI ranks of one GPU each: one mpirun
# per benchmark and g times both (bench_paper compares them in one run). The plain CUDA
# program is not run (--skip-cuda): outputs are checked against the known answers and
# between the two modes. JSON per run into $RESULTS_DIR/scaling-<date>/, then the table and
# plots (scripts/plot-scaling.py) into $RESULTS_DIR.
#
#   scripts/scaling.sh                       # every benchmark, g = 1, 2, 4, 8 up to the GPUs here
#   GPUS="1 2" BENCHES="gemm nbody" BASE=4 scripts/scaling.sh
#
# BASE: the base size step of every benchmark; STEPS="bench:step ...": of some (defaults per
# benchmark, below; the sizes that fill one H200 are md5:6 nbody:6 correlator:6 kmeans:6
# hotspot:6 spmv:8 blackscholes:6); RUNS: timed runs after one warm-up (default 3); WEAK=0:
# strong scaling only; TAG: a name for the run, its folder is scaling-<date>-<tag>.
#
# BACKEND=cpu: the same runs on virtual cpu devices in place of GPUs (g = 1, 2, 4, 8 whatever
# the GPUs here; CPU_THREADS threads per device, default the cores / 8), at small size steps
# (below). Under mpirun that is g ranks of one cpu device each: the runtime's partitioning,
# transfers and MPI at 4 and 8 where no machine has that many GPUs. Folder scaling-<date>-cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-paper}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
DATE=$(date +%F)
BACKEND=${BACKEND:-cuda}
[ "$BACKEND" = cpu ] && TAG=${TAG:-cpu}
OUT="$RESULTS_DIR/scaling-$DATE${TAG:+-$TAG}"
RUNS=${RUNS:-3}
BENCHES=${BENCHES:-md5 nbody correlator kmeans hotspot gemm spmv blackscholes}
present=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || true)
[ "$BACKEND" = cpu ] && present=8
if [ -z "${GPUS:-}" ]; then
  GPUS=""
  for g in 1 2 4 8; do [ "$g" -le "$present" ] && GPUS="$GPUS $g"; done
fi
[ -n "$GPUS" ] || { echo "scaling.sh: no GPU here (nvidia-smi lists none)" >&2; exit 1; }
# Base steps: a third to a half of one H200 for the data-bound ones (the weak runs double it
# per doubling of GPUs), a few seconds of work for the compute-bound ones.
declare -A base=([md5]=5 [nbody]=5 [correlator]=5 [kmeans]=5 [hotspot]=5 [gemm]=2 [spmv]=7
                 [blackscholes]=5 [cocluster]=3)
# On cpu devices: about a second per run on one device.
[ "$BACKEND" = cpu ] && base=([md5]=-4 [nbody]=-5 [correlator]=-1 [kmeans]=-4 [hotspot]=-2
                               [gemm]=-5 [spmv]=1 [blackscholes]=-3 [cocluster]=-2)
for pair in ${STEPS:-}; do base[${pair%%:*}]=${pair##*:}; done
log2() { local n=$1 l=0; while [ "$n" -gt 1 ]; do n=$((n / 2)); l=$((l + 1)); done; echo $l; }

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_ENABLE_CUDA=ON \
  -DGRIDSPAN_ENABLE_MPI=ON -DGRIDSPAN_BUILD_TESTS=OFF -DGRIDSPAN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target bench_paper >/dev/null
mkdir -p "$OUT"
mpi_extra=()
if [ "$BACKEND" = cpu ]; then
  threads=$(($(nproc) / 8))
  export GRIDSPAN_CPU_THREADS=${CPU_THREADS:-$((threads > 0 ? threads : 1))}
  mpi_extra=(--oversubscribe -x GRIDSPAN_CPU_THREADS)
  { lscpu; echo "GRIDSPAN_CPU_THREADS=$GRIDSPAN_CPU_THREADS"; } >"$OUT/cpus.txt"
else
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader \
    >"$OUT/gpus.txt" || true
fi
export GRIDSPAN_CACHE_DIR=${GRIDSPAN_CACHE_DIR:-$PWD/$BUILD/kernel-cache}
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
status=0
for b in $BENCHES; do
  s0=${BASE:-${base[$b]:-3}}
  for g in $GPUS; do
    sizes=$s0
    weak=$((s0 + $(log2 "$g")))
    [ "$weak" != "$s0" ] && [ "${WEAK:-1}" != 0 ] && sizes="$s0,$weak"
    json="$OUT/$b-$g.json"
    args=(--bench "$b" "--sizes=$sizes" --gpus "$g" --runs "$RUNS" --skip-cuda --json "$json"
          --backend "$BACKEND")
    echo "+ $b on $g $([ "$BACKEND" = cpu ] && echo "cpu device(s)" || echo "GPU(s)"), size steps $sizes"
    if [ "$g" = 1 ]; then
      "$BUILD/bench/bench_paper" "${args[@]}" || status=1
    else
      mpirun -np "$g" --bind-to none -x GRIDSPAN_CACHE_DIR "${mpi_extra[@]}" \
        "$BUILD/bench/bench_paper" "${args[@]}" || status=1
    fi
  done
done
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 scripts/plot-scaling.py "$OUT" "$RESULTS_DIR" || status=1
else
  echo "scaling.sh: no matplotlib here; plot elsewhere: scripts/plot-scaling.py $OUT $RESULTS_DIR"
fi
exit $status
