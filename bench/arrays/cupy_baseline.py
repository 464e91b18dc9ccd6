#!/usr/bin/env python3
"""CuPy baseline for gridspan's array benchmarks: copy, add, an elementwise chain (unfused and
through cupy.fuse), three sums and two cumsums, float32, on one GPU; one JSON line per (bench, n) on stdout.

gpu_ms is the median over R calls of the CUDA-event time around one call (the device synchronized
before each call and before the events are read); wall_us_per_call is the host time of a loop of R
calls ending with one synchronize, divided by R (it includes launch overhead). gbps uses gpu_ms.
Each op is checked once against a float64 NumPy reference before it is timed.

    cupy_baseline.py [--sizes 12 16 20 24 28] [--reps 20] [--seed 1234] [--dry-run]

--dry-run runs the same code with NumPy standing in for CuPy and perf_counter for CUDA events,
so that the script can be exercised on a machine without a GPU (its figures mean nothing).
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np

ROW = 4096  # row length of the 2-D sums


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Gpu:
    """CuPy on the current device, CUDA events around each call."""

    def __init__(self):
        import cupy
        self.xp, self.fuse = cupy, cupy.fuse()
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        self.labels = {"library": "cupy", "cupy": cupy.__version__,  # NEP 50 from CuPy 14
                       "device": name.decode() if isinstance(name, bytes) else name}

    def sync(self):
        self.xp.cuda.Device().synchronize()

    def rand(self, seed, n):
        return self.xp.random.RandomState(seed).uniform(-1.0, 1.0, n, dtype=np.float32)

    def host(self, x):
        return self.xp.asnumpy(x)

    def call_ms(self, fn):
        start, end = self.xp.cuda.Event(), self.xp.cuda.Event()
        start.record()
        fn()
        end.record()
        self.sync()
        return self.xp.cuda.get_elapsed_time(start, end)


class DryRun:
    """NumPy standing in for CuPy, perf_counter for events: the same code paths without a GPU."""

    def __init__(self):
        self.xp, self.fuse = np, (lambda f: f)
        self.labels = {"library": "cupy-dry-run", "cupy": "dry-run numpy " + np.__version__,
                       "device": "cpu (dry run)"}

    def sync(self):
        pass

    def rand(self, seed, n):
        return np.random.default_rng(seed).uniform(-1.0, 1.0, n).astype(np.float32)

    def host(self, x):
        return np.asarray(x)

    def call_ms(self, fn):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def make_chain(xp):
    def chain(a, b, c):
        return xp.tanh(a * b + c) * 0.5 - a
    return chain


def cases(be, n, a, b, c, out):
    """Yields (name, bytes counted, the timed call, check) where check(result of the call) gives
    (result on the host, its float64 NumPy reference, the scale errors are relative to: max |ref|
    for elementwise results, checked on a strided sample of ~2^16 elements; for sums, the sum of
    |a| over the same elements, checked in full)."""
    xp = be.xp
    chain, fused = make_chain(xp), be.fuse(make_chain(xp))
    s = slice(None, None, max(1, n >> 16))
    h = {k: be.host(v[s]).astype(np.float64) for k, v in (("a", a), ("b", b), ("c", c))}
    elem = lambda got, ref: (be.host(got[s]), ref, np.abs(ref).max())  # noqa: E731
    full = be.host(a).astype(np.float64)
    chain_ref = np.tanh(h["a"] * h["b"] + h["c"]) * 0.5 - h["a"]
    yield "copy", 2 * n * 4, lambda: xp.copyto(out, a), lambda r: elem(out, h["a"])
    yield "add", 3 * n * 4, lambda: xp.add(a, b, out=out), lambda r: elem(out, h["a"] + h["b"])
    yield "chain_unfused", 4 * n * 4, lambda: chain(a, b, c), lambda r: elem(r, chain_ref)
    yield "chain_fused", 4 * n * 4, lambda: fused(a, b, c), lambda r: elem(r, chain_ref)
    yield "sum_all", n * 4, lambda: xp.sum(a), \
        lambda r: (be.host(r), full.sum(), np.abs(full).sum())
    if n >= 2 * ROW:
        a2, f2 = a.reshape(n // ROW, ROW), full.reshape(n // ROW, ROW)
        for name, axis in (("sum_last", 1), ("sum_first", 0)):
            yield name, n * 4, (lambda ax=axis: a2.sum(axis=ax)), \
                (lambda r, ax=axis: (be.host(r), f2.sum(axis=ax), np.abs(f2).sum(axis=ax)))
    # Scans: every prefix against float64, relative to the prefix sums of |a|.
    yield "cumsum_all", 2 * n * 4, lambda: xp.cumsum(a), \
        lambda r: (be.host(r), np.cumsum(full), np.cumsum(np.abs(full)).clip(1.0))
    if n >= 2 * ROW:
        yield "cumsum_last", 2 * n * 4, lambda: xp.cumsum(a2, axis=1), \
            lambda r: (be.host(r), np.cumsum(f2, axis=1), np.cumsum(np.abs(f2), axis=1).clip(1.0))


def check(name, n, got, ref, scale, tol=1e-5):
    err = float(np.max(np.abs(np.asarray(got, np.float64) - ref) / scale))
    if not err <= tol:
        raise SystemExit(f"{name} n={n}: error {err:.3g} > {tol} against NumPy")
    return err


def time_call(be, fn, reps, warmups=3):
    """{"gpu_ms": median event time of one call, "wall_us_per_call": loop of reps calls + one
    synchronize, per call}, and the seconds GB/s is computed from."""
    for _ in range(warmups):
        fn()
    be.sync()
    gpu_ms = statistics.median(be.call_ms(fn) for _ in range(reps))
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    be.sync()
    wall_us = (time.perf_counter() - t0) / reps * 1e6
    return {"gpu_ms": gpu_ms, "wall_us_per_call": wall_us}, gpu_ms * 1e-3


def run(be, sizes, reps, seed, timer=time_call, skip=()):
    """Checks then times every case at every size; prints one JSON line each."""
    for k in sizes:
        n = 1 << k
        a, b, c = (be.rand(seed + i, n) for i in range(3))
        out = be.xp.empty_like(a)
        assert float(be.xp.abs(a).max()) > 0, "random input is all zeros"
        copy_gbps, chains = None, {}
        for name, nbytes, fn, ref in cases(be, n, a, b, c, out):
            if name in skip:
                continue
            r = fn()
            be.sync()
            if name.startswith("chain"):
                assert r.dtype == np.float32, f"{name} gives {r.dtype} ({be.labels})"
                chains[name] = r
            err = check(name, n, *ref(r), tol=1e-4 if name.startswith("cumsum") else 1e-5)
            del r
            times, seconds = timer(be, fn, reps)
            gbps = nbytes / seconds / 1e9
            copy_gbps = copy_gbps or gbps  # copy comes first
            line = {"bench": name, "n": n, "dtype": "float32", "bytes": nbytes, **times,
                    "gbps": gbps, "frac_of_copy": gbps / copy_gbps, "reps": reps, "seed": seed,
                    **be.labels}
            print(json.dumps(line), flush=True)
            log(f"2^{k:<2} {name:14s}", *(f"{key} {v:<9.4g}" for key, v in times.items()),
                f"{gbps:8.2f} GB/s  err {err:.1e}")
        if len(chains) == 2:
            u, f = chains["chain_unfused"], chains["chain_fused"]
            rel = float(be.xp.abs(f - u).max() / be.xp.abs(u).max())
            assert rel <= 1e-6, f"fused and unfused chains differ by {rel:.3g} of max |x|"
            log(f"2^{k:<2} fused vs unfused: {rel:.1e} of max |x|")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[12, 16, 20, 24, 28], help="log2 n")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    be = DryRun() if args.dry_run else Gpu()
    log(f"{be.labels}, seed {args.seed}, reps {args.reps}")
    run(be, args.sizes, args.reps, args.seed)


if __name__ == "__main__":
    main()
