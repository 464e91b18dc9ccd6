#!/bin/bash
# Session 21, call 2: the host time of cuBLAS's gemm (the GPT-2 block's first product) called
# in gridspan's way and in torch's, hot and cold, and torch's own ops' host times.
cd "$(dirname "$0")/../../../.."
D=bench/results/session21-2026-12-04/call2
nvcc -O2 -o /tmp/cublas_host $D/cublas_host.cpp -lcublas || exit 1
/tmp/cublas_host | tee $OUT/cublas_host.txt
python3 $D/torch_host.py 2>&1 | tee $OUT/torch_host.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cuda.preferred_blas_library())"
ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null; python3 -c "import torch,os; print(os.path.dirname(torch.__file__))"; ls /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib 2>/dev/null | head
