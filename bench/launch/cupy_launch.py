#!/usr/bin/env python3
"""The kernel of bench_launch as a CuPy ElementwiseKernel, timed the same way: a chain of
dependent launches then one synchronize, and a launch followed by synchronize.

    cupy_launch.py [--n 65536] [--launches 20000] [--runs 5] [--json out.json]
"""
import argparse
import json
import statistics
import time

import cupy as cp
import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1 << 16)
    p.add_argument("--launches", type=int, default=20000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    k = cp.ElementwiseKernel("float32 x", "float32 y", "y = y * 0.5f + x", "axpy_half")
    rng = np.random.default_rng(12345)
    x = cp.asarray(rng.uniform(-1, 1, a.n).astype(np.float32))
    y = cp.asarray(rng.uniform(-1, 1, a.n).astype(np.float32))
    stream = cp.cuda.get_current_stream()
    for _ in range(100):  # warm: compiled, memory pooled
        k(x, y)
    stream.synchronize()
    chain, chain_cpu, wait, wait_launch = [], [], [], []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        cpu0 = time.thread_time()
        for _ in range(a.launches):
            k(x, y)
        chain_cpu.append((time.thread_time() - cpu0) / a.launches)
        stream.synchronize()
        chain.append((time.perf_counter() - t0) / a.launches)
        waits = max(1, a.launches // 4)
        in_launch = 0.0
        t0 = time.perf_counter()
        for _ in range(waits):
            l0 = time.perf_counter()
            k(x, y)
            in_launch += time.perf_counter() - l0
            stream.synchronize()
        wait.append((time.perf_counter() - t0) / waits)
        wait_launch.append(in_launch / waits)
    # y tends to 2x (see bench_launch): the result must be there.
    if not cp.allclose(y, 2 * x, rtol=1e-5, atol=1e-6):
        raise SystemExit("CuPy's result is not 2x")
    out = {"n": a.n, "launches": a.launches, "runs": a.runs,
           "chain_us": statistics.median(chain) * 1e6,
           "chain_thread_cpu_us": statistics.median(chain_cpu) * 1e6,
           "wait_us": statistics.median(wait) * 1e6,
           "wait_launch_us": statistics.median(wait_launch) * 1e6}
    print(f"cupy     {a.n:10d} {out['chain_us']:22.2f} {out['chain_thread_cpu_us']:22.2f} "
          f"{out['wait_us']:22.2f} {out['wait_launch_us']:14.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
