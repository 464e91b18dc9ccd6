#!/usr/bin/env python3
"""torch and CuPy baselines for gridspan's fused operations (bench_arrays --fused): the
activations (gelu, gelu_tanh, silu, sigmoid, softplus) against a copy in float32, and softmax,
layer_norm, rms_norm and a written-out symmetric quantization over rows of 4096 in float32 and
bfloat16 through torch's fused kernels; softmax, layer_norm and rms_norm written out of CuPy's
operators as well (suffix _cupy_written). One JSON line per (bench, n) on stdout, as
cupy_baseline.py prints them.

gpu_ms is the median over R calls of the CUDA-event time around one call; sync_ms the median
over R calls of the host time from a call's start to the end of its synchronize (what
bench_arrays calls gpu_ms: a single call as a program that waits for it sees it);
wall_us_per_call the host time of a loop of R calls ending with one synchronize, divided by R.
gbps uses gpu_ms and the bytes bench_arrays counts (input read and output written once).

    torch_baseline.py [--sizes 24 28] [--reps 20]
"""
import argparse
import json
import statistics
import sys
import time

ROW = 4096


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def timer(sync, event, fn, reps):
    each = []
    for _ in range(reps):
        start, end = event(), event()
        start.record()
        fn()
        end.record()
        sync()
        each.append(start.elapsed_time(end) if hasattr(start, "elapsed_time")
                    else end_time(start, end))
    alone = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        alone.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return statistics.median(each), (time.perf_counter() - t) * 1e6 / reps, statistics.median(alone)


def end_time(start, end):
    import cupy
    return cupy.cuda.get_elapsed_time(start, end)


def emit(library, bench, n, nbytes, times, reps, dtype):
    ms, us, sync_ms = times
    line = {"library": library, "bench": bench, "n": n, "dtype": dtype, "bytes": nbytes,
            "gpu_ms": ms, "sync_ms": sync_ms, "wall_us_per_call": us,
            "gbps": nbytes / (ms * 1e-3) / 1e9, "reps": reps}
    print(json.dumps(line), flush=True)
    log(f"{library:6s} {bench:22s} n={n:<10d} {ms:9.4f} ms {line['gbps']:8.1f} GB/s")


def run_torch(n, reps):
    import torch
    import torch.nn.functional as F
    sync, event = torch.cuda.synchronize, lambda: torch.cuda.Event(enable_timing=True)
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.rand(n, device="cuda", generator=g) * 2 - 1
    f = 4
    emit("torch", "copy", n, 2 * n * f, timer(sync, event, lambda: x.clone(), reps), reps, "float32")
    acts = {"gelu": lambda: F.gelu(x), "gelu_tanh": lambda: F.gelu(x, approximate="tanh"),
            "silu": lambda: F.silu(x), "sigmoid": lambda: torch.sigmoid(x),
            "softplus": lambda: F.softplus(x)}
    for name, fn in acts.items():
        emit("torch", name, n, 2 * n * f, timer(sync, event, fn, reps), reps, "float32")
    if n < ROW:
        return
    for dtype, suffix in ((torch.float32, ""), (torch.bfloat16, "_bf16")):
        e = 4 if dtype == torch.float32 else 2
        x2 = x.to(dtype).reshape(n // ROW, ROW)
        w = torch.ones(ROW, device="cuda", dtype=dtype)
        b = torch.zeros(ROW, device="cuda", dtype=dtype)
        rows = {"softmax": lambda: torch.softmax(x2, -1),
                "layer_norm": lambda: F.layer_norm(x2, (ROW,), w, b, 1e-5)}
        if hasattr(F, "rms_norm"):
            rows["rms_norm"] = lambda: F.rms_norm(x2, (ROW,), w, 1e-5)

        def quantize():  # written out: torch has no fused symmetric quantization
            scale = x2.abs().amax(-1, keepdim=True).float() / 127
            return torch.round(x2.float() / scale).to(torch.int8), scale
        rows["quantize"] = quantize
        for name, fn in rows.items():
            nbytes = n * (e + 1) + 4 * (n // ROW) if name == "quantize" else 2 * n * e
            emit("torch", name + suffix, n, nbytes, timer(sync, event, fn, reps), reps, str(dtype))


def run_cupy_written(n, reps):
    import cupy as cp
    sync = cp.cuda.Device().synchronize
    x = cp.random.RandomState(7).uniform(-1, 1, n, dtype=cp.float32).reshape(n // ROW, ROW)
    w, b = cp.ones(ROW, cp.float32), cp.zeros(ROW, cp.float32)

    def softmax():
        e = cp.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def layer_norm():
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / cp.sqrt(var + 1e-5) * w + b

    def rms_norm():
        return x / cp.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w

    for name, fn in (("softmax", softmax), ("layer_norm", layer_norm), ("rms_norm", rms_norm)):
        emit("cupy", name + "_cupy_written", n, 2 * n * 4, timer(sync, cp.cuda.Event, fn, reps),
             reps, "float32")


def run_matmul(n, reps):
    """n x n times n x n in float32 (no TF32) and bfloat16; bytes are the flops (2 n^3)."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    sync, event = torch.cuda.synchronize, lambda: torch.cuda.Event(enable_timing=True)
    for dtype, name in ((torch.float32, "matmul_f32"), (torch.bfloat16, "matmul_bf16")):
        a = (torch.rand(n, n, device="cuda") * 2 - 1).to(dtype)
        b = (torch.rand(n, n, device="cuda") * 2 - 1).to(dtype)
        emit("torch", name, n, 2 * n ** 3, timer(sync, event, lambda: a @ b, reps), reps, str(dtype))


def run_gpt2(tokens, reps):
    """A GPT-2-style block on (tokens, 768) in torch eager, as bench_arrays --gpt2 times it:
    layer_norm -> matmul (768 x 3072) -> gelu (tanh) -> matmul (3072 x 768) -> residual add;
    float32 without TF32, and bfloat16. "bytes" are the flops of the two products."""
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    sync, event = torch.cuda.synchronize, lambda: torch.cuda.Event(enable_timing=True)
    d, h = 768, 3072
    for dtype, name in ((torch.float32, "gpt2_f32"), (torch.bfloat16, "gpt2_bf16")):
        x = (torch.rand(tokens, d, device="cuda") * 2 - 1).to(dtype)
        w1 = ((torch.rand(d, h, device="cuda") * 2 - 1) * 0.036).to(dtype)
        w2 = ((torch.rand(h, d, device="cuda") * 2 - 1) * 0.018).to(dtype)
        g = torch.ones(d, device="cuda", dtype=dtype)
        b = torch.zeros(d, device="cuda", dtype=dtype)

        def block():
            y = F.layer_norm(x, (d,), g, b, 1e-5)
            return x + F.gelu(y @ w1, approximate="tanh") @ w2

        emit("torch", name, tokens, 4 * tokens * d * h, timer(sync, event, block, reps), reps,
             str(dtype))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[24, 28])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--matmul", type=int, nargs="*", default=[],
                    help="also matmul of n x n for these log2 n")
    ap.add_argument("--gpt2", type=int, nargs="*", default=[],
                    help="also a GPT-2-style block on (2^k tokens, 768) for these k")
    args = ap.parse_args()
    for k in args.matmul:
        run_matmul(1 << k, args.reps)
    for k in args.gpt2:
        run_gpt2(1 << k, args.reps)
    for k in args.sizes:
        run_torch(1 << k, args.reps)
        if (1 << k) >= ROW:
            run_cupy_written(1 << k, args.reps)


if __name__ == "__main__":
    main()
