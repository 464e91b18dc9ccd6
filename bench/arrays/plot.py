#!/usr/bin/env python3
"""Plots throughput against size from the JSON lines of bench_arrays, cupy_baseline.py and
numpy_baseline.py: one SVG per benchmark, GB/s (log scale) against log2 n, a line per
library. Plain SVG, no plotting library needed.

    plot.py OUT_DIR gridspan.jsonl cupy.jsonl [numpy.jsonl ...] [--benches add chain_fused ...]

GB/s is each line's "gbps" (bytes over the per-call time: CUDA events for CuPy, launch to
synchronize for gridspan, the wall time on the host). For chain_fused, CuPy's unfused chain
is drawn as well (the same bytes counted), so fused and unfused show side by side.
"""
import argparse
import json
import math
import os

from compare import load

COLOURS = {"gridspan": "#1f77b4", "cupy": "#d62728", "cupy unfused": "#ff9896",
           "numpy": "#2ca02c"}
W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 400, 70, 150, 40, 50


def series(rows, bench):
    """{label: [(log2 n, GB/s)]} for one benchmark."""
    out = {}
    for (b, n, lib), r in rows.items():
        label = lib
        if bench == "chain_fused" and b == "chain_unfused" and lib != "gridspan":
            label = lib + " unfused"
        elif b != bench:
            continue
        if r.get("gbps"):
            out.setdefault(label, []).append((math.log2(n), r["gbps"]))
    return {k: sorted(v) for k, v in out.items()}


def svg(bench, lines):
    xs = [x for pts in lines.values() for x, _ in pts]
    ys = [y for pts in lines.values() for _, y in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    y1 = y1 if y1 > y0 else y0 + 1
    px = lambda x: LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT)  # noqa: E731
    py = lambda y: H - BOTTOM - (math.log10(y) - y0) / (y1 - y0) * (H - TOP - BOTTOM)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{bench}, float32: '
           f'GB/s against n</text>']
    for e in range(y0, y1 + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{10 ** e:g}</text>')
    for x in range(int(x0), int(x1) + 1, 2):
        out.append(f'<text x="{px(x)}" y="{H - BOTTOM + 18}" text-anchor="middle">2^{x}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 10}" text-anchor="middle">'
               'elements</text>')
    for i, (label, pts) in enumerate(sorted(lines.items())):
        colour = COLOURS.get(label, "#7f7f7f")
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        legend_entry(out, i, label, colour)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def legend_entry(out, i, label, colour, width=W, dash=None):
    """The i-th line of the legend right of the plot of `width` (a dashed sample with `dash`)."""
    ly = TOP + 20 * i + 10
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    out.append(f'<line x1="{width - RIGHT + 10}" x2="{width - RIGHT + 30}" y1="{ly}" y2="{ly}" '
               f'stroke="{colour}" stroke-width="2"{dashed}/>')
    out.append(f'<text x="{width - RIGHT + 35}" y="{ly + 4}">{label}</text>')


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("files", nargs="+")
    p.add_argument("--benches", nargs="+",
                   default=["add", "chain_fused", "sum_all", "sum_first", "cumsum_all"])
    args = p.parse_args()
    rows = load(args.files)
    os.makedirs(args.out_dir, exist_ok=True)
    for bench in args.benches:
        lines = series(rows, bench)
        if not lines:
            continue
        path = os.path.join(args.out_dir, f"{bench}.svg")
        with open(path, "w") as f:
            f.write(svg(bench, lines))
        print(path)


if __name__ == "__main__":
    main()
