#!/usr/bin/env python3
"""NumPy baseline for gridspan's array benchmarks: the cases of cupy_baseline.py (copy, add, the
elementwise chain op by op with its temporaries, sum_all, sum_last, sum_first; no fused chain),
float32, on the host in one thread; one JSON line per (bench, n) on stdout.

wall_us_per_call is the median over R calls of the wall time of one call (after 3 warm-ups);
gbps uses it. Each op is checked once against a float64 reference first, as in cupy_baseline.py.

    /usr/bin/python3 numpy_baseline.py [--sizes 16 20 24] [--reps 5] [--seed 1234]
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ from importing cupy_baseline
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # NumPy's ufuncs and sums are single-threaded; keep anything else so

import argparse  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402

from cupy_baseline import DryRun, log, run  # noqa: E402


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


class Host(DryRun):
    def __init__(self):
        super().__init__()
        self.labels = {"library": "numpy", "numpy": np.__version__, "cpu": cpu_model(),
                       "threads": 1}


def wall_median(be, fn, reps, warmups=3):
    for _ in range(warmups):
        fn()
    us = statistics.median(be.call_ms(fn) for _ in range(reps)) * 1e3
    return {"wall_us_per_call": us}, us * 1e-6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[16, 20, 24], help="log2 n")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    be = Host()
    log(f"{be.labels}, seed {args.seed}, reps {args.reps}")
    run(be, args.sizes, args.reps, args.seed, timer=wall_median, skip={"chain_fused"})


if __name__ == "__main__":
    main()
