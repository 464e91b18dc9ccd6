#!/bin/bash
# Session 23, call 2: arrays of one row count bound by memory cut alike (the Correlator's
# samples and visibilities), the out-of-core sweep again up to 128 pieces; and where the time
# of one copy call at 2^24 goes with one chunk against four (a trace of each).
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-g/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-g -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-g bench_paper bench_arrays test_api > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 120 build-g/tests/test_api --gtest_filter='Granularity*' > $OUT/tests.txt 2>&1
echo "granularity rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"
run() {  # tag, timeout, then bench:size pairs; extra arguments in $EXTRA
  local tag=$1 limit=$2; shift 2
  for pair in "$@"; do
    GRIDSPAN_LOG=info timeout $limit build-g/bench/bench_paper --bench ${pair%%:*} --sizes ${pair##*:} \
      --gpus 1 --runs 3 $EXTRA > $OUT/log.txt 2>&1
    echo "$tag ${pair%%:*} rc $?"
    grep -a '^sweep' $OUT/log.txt | tee -a $OUT/$tag.txt | cut -c1-160
    grep -a 'automatic \(work\|distribution\)' $OUT/log.txt | sort -u | cut -c1-300 >> $OUT/choices.txt
  done
}
EXTRA="--sweep 8,16,32,64,128 --out-of-core" run ooc 150 correlator:3 blackscholes:3
echo "ooc done $(( $(date +%s) - t0 )) s"
summary() {  # a trace: per kind of task, count and mean duration; the last call's timeline
  /usr/bin/env python3 - "$1" <<'PY'
import json, sys, collections
d = json.load(open(sys.argv[1]))
ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X"]
by = collections.defaultdict(list)
for e in ev: by[(e.get("cat", ""), e["name"][:40])].append(e["dur"])
for k, v in sorted(by.items()): print(f"  {k[0]:12s} {k[1]:40s} n={len(v):5d} mean={sum(v)/len(v):9.1f} us")
ev.sort(key=lambda e: e["ts"])
last = ev[-12:]
t0 = last[0]["ts"]
for e in last: print(f"  t={e['ts']-t0:9.1f} dur={e['dur']:8.1f} {e.get('cat','')} {e['name'][:60]} tid={e.get('tid')}")
PY
}
for c in 1 4; do
  GRIDSPAN_TRACE=$OUT/trace.json timeout 60 build-g/bench/bench_arrays --sizes 24 --reps 20 --chunks $c \
    --only copy >> $OUT/arrays.jsonl 2> $OUT/log.txt
  echo "copy 2^24 chunks $c rc $?: $(tail -1 $OUT/arrays.jsonl | cut -c1-200)"
  summary $OUT/trace.json
done
rm -f $OUT/log.txt $OUT/trace.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "done $(( $(date +%s) - t0 )) s"
