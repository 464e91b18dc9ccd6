#!/bin/bash
# Session 16, call D: the fused operations on the GPU (tests), their figures beside torch and
# CuPy written out; the new device contract test.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr test_array test_backend bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 200 build-arr/tests/test_array --gtest_filter='ArrayActivations.*:ArrayRows.*:ArrayQuantize.*:RowGpuGeometry.*' > $OUT/tests.txt 2>&1
echo "array rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B2 -A10 "Failure" $OUT/tests.txt | head -60
timeout 60 build-arr/tests/test_backend --gtest_filter='*LaunchesInAStream*:*IdleDevice*:*LaunchThreadSleeps*' > $OUT/backend.txt 2>&1
echo "backend rc $? $(grep -aE '^\[  (PASSED|FAILED)|SKIPPED \] [0-9]' $OUT/backend.txt | tr '\n' ' ')"; grep -a -A10 "Failure" $OUT/backend.txt | head -30
echo "tests $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 200 build-arr/bench/bench_arrays --fused --sizes 24 28 --reps 20 > $OUT/fused_gs.json 2> $OUT/fused_gs.err
echo "bench rc $?"; tail -3 $OUT/fused_gs.err
GRIDSPAN_BACKEND=cuda timeout 200 build-arr/bench/bench_arrays --matmul --sizes 13 --reps 10 >> $OUT/fused_gs.json 2>> $OUT/fused_gs.err
echo "matmul bench rc $?"; tail -3 $OUT/fused_gs.err
timeout 240 python3 bench/arrays/torch_baseline.py --sizes 24 28 --reps 20 --matmul 13 > $OUT/fused_torch.json 2> $OUT/fused_torch.err
echo "torch rc $?"; tail -5 $OUT/fused_torch.err
python3 - $OUT/fused_gs.json $OUT/fused_torch.json <<'PY'
import json, sys
rows = {}
for f in sys.argv[1:]:
    for line in open(f):
        if line.startswith("{"):
            d = json.loads(line); rows.setdefault((d["bench"].replace("_cupy_written", ""), d["n"]), {})[d["library"] + ("_w" if "written" in d["bench"] else "")] = d["gbps"]
for (b, n), v in sorted(rows.items(), key=lambda x: (x[0][1], x[0][0])):
    print(f"{b:18s} 2^{n.bit_length()-1}  " + "  ".join(f"{k} {x:8.1f}" for k, x in sorted(v.items())))
PY
echo "done $(( $(date +%s) - t0 )) s"
# matmul on cuBLAS (tests) and its figure beside torch
GRIDSPAN_BACKEND=cuda timeout 120 build-arr/tests/test_array --gtest_filter='ArrayMatmul.*' > $OUT/matmul.txt 2>&1
echo "matmul rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/matmul.txt | tr '\n' ' ')"; grep -a -B2 -A10 "Failure\|rror" $OUT/matmul.txt | head -40
