#!/usr/bin/env bash
# The paper's benchmarks of two source trees side by side in one run on a GPU machine, so a
# change that should leave speed alone is measured against what came before (issue 13):
# builds bench_paper of BEFORE (a source tree, e.g. `git archive <commit> | tar -x -C .base`)
# and of this tree, then runs every benchmark at its size step with the two builds in turn,
# ROUNDS times, each run against plain CUDA in the same process. JSON per run and a table
# (summary.txt) go to $OUTDIR.
#
#   scripts/before-after.sh .base                  # the largest sizes that fit one H200
#   scripts/before-after.sh .base md5:6 spmv:8     # some benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
shift
pairs=${*:-md5:6 nbody:6 correlator:6 kmeans:6 hotspot:5 gemm:2 spmv:8 blackscholes:6}
OUTDIR=${OUTDIR:-bench/results/before-after-$(date +%F)}
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-3}
mkdir -p "$OUTDIR"
for tree in "$before" .; do
  cmake -S "$tree" -B "$tree/build-paper" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGRIDSPAN_ENABLE_CUDA=ON -DGRIDSPAN_BUILD_TESTS=OFF -DGRIDSPAN_BUILD_BENCH=ON >/dev/null
  cmake --build "$tree/build-paper" -j "$(nproc)" --target bench_paper >/dev/null
done
nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm --format=csv,noheader || true
for round in $(seq "$ROUNDS"); do
  for pair in $pairs; do
    name=${pair%%:*} size=${pair##*:}
    for which in before after; do
      tree=$([ $which = before ] && echo "$before" || echo .)
      GRIDSPAN_CACHE_DIR=$PWD/$tree/build-paper/kernel-cache "$tree/build-paper/bench/bench_paper" \
        --bench "$name" --sizes "$size" --gpus 1 --runs "$RUNS" \
        --json "$OUTDIR/$which-$name-$round.json" >/dev/null
    done
  done
done
/usr/bin/env python3 - "$OUTDIR" <<'PY' | tee "$OUTDIR/summary.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*-*-*.json"))):
    which, name, _ = os.path.basename(path)[:-5].split("-")
    for r in json.load(open(path))["results"]:
        row = rows.setdefault(name, {"size": r["size"], "before": [], "after": []})
        cuda = r.get("cuda_s") or [float("nan")] * len(r["gridspan_1gpu_s"])
        row[which] += list(zip(cuda, r["gridspan_1gpu_s"]))
print("benchmark | size | plain CUDA | gridspan before | gridspan after | overhead before | "
      "overhead after | after / before")
for name, row in rows.items():
    b, a = row["before"], row["after"]
    med = lambda runs, i: statistics.median(x[i] for x in runs)
    over = lambda runs: statistics.median(g / c - 1 for c, g in runs) * 100
    print(f"{name} | {row['size']} | {med(a, 0) * 1e3:.2f} ms | {med(b, 1) * 1e3:.2f} ms | "
          f"{med(a, 1) * 1e3:.2f} ms | {over(b):+.2f}% | {over(a):+.2f}% | "
          f"{med(a, 1) / med(b, 1):.4f}")
PY
