#!/usr/bin/env python3
"""Plots bench_paper's granularity sweep (the `sweep ...` lines it prints with --sweep): one
SVG per benchmark and size, throughput against hand-chosen chunks and superblocks per GPU
(log2 axis), with Dask's and Legate's rules as marks at their chunk counts and gridspan's
automatic choice as a dashed level. Plain SVG, no plotting library needed.

    plot_sweep.py OUT_DIR sweep.txt [more.txt ...] [--tag ooc]

Prints, per benchmark, the best hand choice and automatic's throughput against it, Dask's
and Legate's (a Markdown table row each).
"""
import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "arrays"))
from plot import legend_entry  # noqa: E402

LINE = re.compile(r"^sweep (\S+)\s+(.+?)\s+(\d+|dask \d+|legate \d+|automatic)\s+"
                  r"(?:([\d.]+) s\s+([\d.e+-]+) (.+?)\s{2}.*|failed: (.*))$")
W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 360, 80, 150, 40, 50


def load(paths):
    """{(bench, size): {"unit": str, "hand": [(chunks, thr)], variant: thr or None}}."""
    out = {}
    for path in paths:
        for line in open(path, encoding="utf-8", errors="replace"):
            m = LINE.match(line.rstrip("\n"))
            if not m:
                continue
            bench, size, variant, _, thr, unit, failed = m.groups()
            entry = out.setdefault((bench, size.strip()), {"hand": [], "unit": unit or ""})
            value = None if failed else float(thr)
            if unit:
                entry["unit"] = unit
            if variant.isdigit():
                if value is not None:
                    entry["hand"].append((int(variant), value))
            else:
                entry[variant] = value
    return out


def svg(title, entry):
    hand = sorted(entry["hand"])
    marks = [(v, entry[v]) for v in entry if v.startswith(("dask", "legate")) and entry[v]]
    auto = entry.get("automatic")
    ys = [y for _, y in hand] + [y for _, y in marks] + ([auto] if auto else [])
    xs = [c for c, _ in hand] + [int(v.split()[1]) for v, _ in marks]
    x0, x1 = 0, max(1, math.ceil(math.log2(max(xs))))
    y1 = max(ys) * 1.1
    px = lambda c: LEFT + math.log2(c) / x1 * (W - LEFT - RIGHT)  # noqa: E731
    py = lambda y: H - BOTTOM - y / y1 * (H - TOP - BOTTOM)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for k in range(5):
        y = y1 * k / 4
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(y)}" y2="{py(y)}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py(y) + 4}" text-anchor="end">{y:.3g}</text>')
    for e in range(x0, x1 + 1):
        out.append(f'<text x="{px(2 ** e)}" y="{H - BOTTOM + 18}" text-anchor="middle">'
                   f'{2 ** e}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 10}" text-anchor="middle">'
               f'chunks and superblocks per GPU ({entry["unit"]} up)</text>')
    path = " ".join(f"{px(c):.1f},{py(y):.1f}" for c, y in hand)
    out.append(f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    out += [f'<circle cx="{px(c):.1f}" cy="{py(y):.1f}" r="3" fill="#1f77b4"/>' for c, y in hand]
    legend = [("hand-chosen", "#1f77b4")]
    for v, y in marks:
        colour = "#d62728" if v.startswith("dask") else "#2ca02c"
        x = px(int(v.split()[1]))
        out.append(f'<rect x="{x - 5:.1f}" y="{py(y) - 5:.1f}" width="10" height="10" '
                   f'fill="none" stroke="{colour}" stroke-width="2"/>')
        legend.append((v, colour))
    if auto:
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(auto):.1f}" y2="{py(auto):.1f}" '
                   f'stroke="#ff7f0e" stroke-width="2" stroke-dasharray="6,4"/>')
        legend.append(("automatic", "#ff7f0e"))
    for i, (label, colour) in enumerate(legend):
        legend_entry(out, i, label, colour, W)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def ratio(value, best):
    return f"{value / best:.3f}" if value else "failed"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("files", nargs="+")
    p.add_argument("--tag", default="", help="added to each SVG's name and title")
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    print("| benchmark | size | best hand choice | automatic | Dask | Legate |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (bench, size), entry in load(args.files).items():
        if not entry["hand"] and not entry.get("automatic"):
            continue
        title = f"{bench} {size}" + (f" ({args.tag})" if args.tag else "")
        name = f"{bench}{'-' + args.tag if args.tag else ''}.svg"
        with open(os.path.join(args.out_dir, name), "w") as f:
            f.write(svg(title, entry))
        c, best = max(entry["hand"], key=lambda h: h[1])
        dask = next((v for v in entry if v.startswith("dask")), None)
        legate = next((v for v in entry if v.startswith("legate")), None)
        print(f"| {bench} | {size} | {c} a GPU | {ratio(entry.get('automatic'), best)} | "
              f"{ratio(entry.get(dask), best)} ({dask}) | {ratio(entry.get(legate), best)} "
              f"({legate}) |")


if __name__ == "__main__":
    main()
