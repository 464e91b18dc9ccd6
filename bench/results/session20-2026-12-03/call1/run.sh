#!/bin/bash
# Session 20, call 1: the unrolled elementwise vector variant and quantize_group (session 19, unmeasured) on cuda:
# tests on cuda, every fused figure and the GPT-2 block beside torch in one run.
cd "$(dirname "$0")/../../../.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr bench_arrays test_array > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=build-arr/bench/bench_arrays
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/tests/test_array --gtest_filter='UnrolledElementwise*:ArrayElementwise*:ArrayRows*:ArrayQuantize*:RowGpuGeometry*:ArrayActivations*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -20
GRIDSPAN_BACKEND=cuda timeout 90 $B --fused --sizes 28 --reps 10 > $OUT/fused_gs.json 2>/dev/null
GRIDSPAN_BACKEND=cuda timeout 60 $B --sizes 28 --reps 10 --only copy add chain_fused > $OUT/elem_gs.json 2>/dev/null
GRIDSPAN_BACKEND=cuda timeout 40 $B --gpt2 --sizes 13 --reps 20 > $OUT/gpt2_gs.json 2>/dev/null
cat $OUT/elem_gs.json $OUT/fused_gs.json $OUT/gpt2_gs.json | grep -o '"bench": "[a-z_0-9]*", "n": [0-9]*.*' | sed 's/"bytes".*"gbps"/gbps/; s/, "backend.*//; s/"n": [0-9]*, //; s/"bench": //; s/"wall_us_per_call"/loop_us/' | tr '\n' ' '; echo
echo "ours $(( $(date +%s) - t0 )) s"
timeout 100 python3 bench/arrays/torch_baseline.py --sizes 28 --gpt2 13 --reps 10 > $OUT/torch.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*' $OUT/torch.json | sed 's/"dtype".*"gpu_ms"/ms/; s/"reps".*//; s/"gbps"/gbps/; s/"bench": //; s/"wall_us_per_call"/loop_us/; s/"n": [0-9]*, //' | tr '\n' ' '; echo
echo "torch $(( $(date +%s) - t0 )) s"
GRIDSPAN_DIFF_PROGRAMS=16 GRIDSPAN_BACKEND=cuda timeout 90 build-arr/tests/test_array --gtest_filter='Differential.RandomPrograms:Differential.UnrolledKernels' > $OUT/diff.txt 2>&1
echo "diff rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/diff.txt | tr '\n' ' ')"
echo "done $(( $(date +%s) - t0 )) s"
