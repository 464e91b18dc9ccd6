#!/bin/bash
# Session 17, call D: unrolled elementwise kernels (4 elements a thread, blocks of 1024) on
# the GPU: tests, then copy/add/chain, the activations and quantize, the GPT-2 block beside torch.
cd "$(dirname "$0")/.."
export GRIDSPAN_CACHE_DIR=$PWD/build-arr/kernel-cache
t0=$(date +%s)
cmake -G Ninja -S . -B build-arr -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_BENCH=ON > /dev/null 2>&1
ninja -C build-arr test_array bench_arrays > $OUT/build.txt 2>&1 || { tail -40 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
GRIDSPAN_BACKEND=cuda timeout 150 build-arr/tests/test_array --gtest_filter='ArrayElementwise.*:UnrolledElementwise.*:ArrayViews.*:ArrayActivations.*:PinnedTransfers.*:MemoryPool.*' > $OUT/tests.txt 2>&1
echo "tests rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr '\n' ' ')"; grep -a -B3 -A8 "Failure" $OUT/tests.txt | head -30
GRIDSPAN_DIFF_PROGRAMS=40 GRIDSPAN_BACKEND=cuda timeout 120 build-arr/tests/test_array --gtest_filter='Differential.RandomPrograms' > $OUT/diff.txt 2>&1
echo "diff rc $? $(grep -aE '^\[  (PASSED|FAILED)' $OUT/diff.txt | tr '\n' ' ')"
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/bench/bench_arrays --sizes 20 28 --reps 20 --only copy add chain_fused > $OUT/size_gs.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*", "n": [0-9]*.*"gbps": [0-9.]*' $OUT/size_gs.json | sed 's/"gpu_ms".*"gbps"/ gbps/'
GRIDSPAN_BACKEND=cuda timeout 150 build-arr/bench/bench_arrays --fused --sizes 28 --reps 20 > $OUT/fused_gs.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*"gbps": [0-9.]*' $OUT/fused_gs.json | sed 's/"n".*"wall_us_per_call"/ wall_us/'
GRIDSPAN_BACKEND=cuda timeout 100 build-arr/bench/bench_arrays --gpt2 --sizes 13 --reps 20 > $OUT/gpt2_gs.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*"wall_us_per_call": [0-9.]*' $OUT/gpt2_gs.json
timeout 150 python3 bench/arrays/torch_baseline.py --sizes 28 --gpt2 13 --reps 20 > $OUT/torch.json 2>/dev/null
grep -o '"bench": "[a-z_0-9]*".*"gpu_ms": [0-9.]*\|"gbps": [0-9.]*' $OUT/torch.json | paste - - | sed 's/"n".*"gpu_ms"/ ms/' | head -9
echo "done $(( $(date +%s) - t0 )) s"
