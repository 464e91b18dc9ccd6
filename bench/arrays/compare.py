#!/usr/bin/env python3
"""Puts the JSON lines of bench_arrays (gridspan), cupy_baseline.py and numpy_baseline.py side by
side: one table per benchmark and size, with each library's times, GB/s and fraction of the copy
bandwidth measured in that library's own run, then gridspan's time as a ratio of each other's.

    compare.py gridspan.jsonl cupy.jsonl numpy.jsonl [--base gridspan]

Lines are told apart by their "library" field (a later line with the same library, bench and n
replaces an earlier one). Times: gpu_ms (CUDA events, per call) and wall_us_per_call; a ratio is
given for each of the two that both libraries report. Lines that are not JSON are skipped.
"""
import argparse
import json


def load(paths):
    rows = {}
    for path in paths:
        with open(path) as f:
            for text in f:
                try:
                    r = json.loads(text)
                except ValueError:
                    continue
                if isinstance(r, dict) and {"library", "bench", "n"} <= r.keys():
                    rows[(r["bench"], r["n"], r["library"])] = r
    return rows


def seconds(r):
    """The time GB/s is computed from: the GPU time where there is one, else the wall time."""
    return r["gpu_ms"] * 1e-3 if r.get("gpu_ms") is not None else r["wall_us_per_call"] * 1e-6


def gbps(r):
    if r.get("gbps") is not None:
        return r["gbps"]
    return r["bytes"] / seconds(r) / 1e9 if r.get("bytes") else None


ORDER = ["copy", "add", "chain_unfused", "chain_fused", "sum_all", "sum_last", "sum_first"]


def fmt(x, width, prec):
    return f"{'-':>{width}}" if x is None else f"{x:{width}.{prec}f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--base", default="gridspan", help="the library whose ratios are printed")
    args = p.parse_args()
    rows = load(args.files)
    seen = list(dict.fromkeys(b for b, _, _ in rows))
    benches = [b for b in ORDER if b in seen] + [b for b in seen if b not in ORDER]
    libs = sorted({lib for _, _, lib in rows}, key=lambda lib: (lib != args.base, lib))
    for bench in benches:
        for n in sorted({n for b, n, _ in rows if b == bench}):
            here = [(lib, rows[(bench, n, lib)]) for lib in libs if (bench, n, lib) in rows]
            print(f"\n{bench}  n = 2^{n.bit_length() - 1} = {n}")
            print(f"  {'library':14s} {'gpu ms':>10s} {'wall us/call':>13s} {'GB/s':>9s} "
                  f"{'of copy':>8s}")
            for lib, r in here:
                copy = rows.get(("copy", n, lib))
                g, gc = gbps(r), gbps(copy) if copy else None
                print(f"  {lib:14s} {fmt(r.get('gpu_ms'), 10, 4)} "
                      f"{fmt(r.get('wall_us_per_call'), 13, 1)} {fmt(g, 9, 2)} "
                      f"{fmt(g / gc if g and gc else None, 8, 2)}")
            base = rows.get((bench, n, args.base))
            for lib, r in here:
                if base is None or lib == args.base:
                    continue
                ratios = [f"{base[k] / r[k]:.2f}x {what}"
                          for k, what in (("gpu_ms", "gpu time"), ("wall_us_per_call", "wall"))
                          if base.get(k) is not None and r.get(k) is not None]
                print(f"  {args.base}/{lib}: " + (", ".join(ratios) or "no common time"))


if __name__ == "__main__":
    main()
