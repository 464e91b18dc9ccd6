#!/usr/bin/env python3
"""Plots bench_paper's granularity sweep (the `sweep ...` lines it prints with --sweep): one
SVG per benchmark and size, throughput against hand-chosen chunks and superblocks per GPU
(log2 axis), with Dask's and Legate's rules as marks at their chunk counts and gridspan's
automatic choice as a dashed level. Plain SVG, no plotting library needed.

    plot_sweep.py OUT_DIR sweep.txt [more.txt ...] [--tag ooc]

Also reads two other sweeps, told apart line by line, so files of all three may be mixed:

- bench_demo's (`bench_demo SCALE [PROBLEM] --sweep 1,2,4,8`, lines `sweep kmeans 32 0.08 s
  ok`): one SVG per problem, runs per second (1 / time) against chunks and superblocks per
  device; the problem's own cut and Dask's and Legate's rules, whose chunk counts the lines do
  not give, are dotted levels (or named failed in the legend). bench_demo prints no size: a
  problem's lines in a later file replace those of an earlier one (another run, maybe at
  another scale).
- bench_arrays' JSON lines with a "chunks" field (`bench_arrays --chunks C`, C = 0 automatic):
  one SVG per benchmark, GB/s against the inputs' chunk count, a line per size, each
  normalised to its best hand choice (= 1.0) with its automatic choice as a dashed level.

    plot_sweep.py OUT_DIR call6/out/demo.txt call7/out/demo.txt --tag demo
    plot_sweep.py OUT_DIR call4/arrays.jsonl --tag arrays

Prints, per benchmark and size, the best hand choice and automatic's throughput against it,
Dask's and Legate's (and the own cut's, where a demo problem is among them; a Markdown table
row each).
"""
import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "arrays"))
from plot import legend_entry  # noqa: E402

LINE = re.compile(r"^sweep (\S+)\s+(.+?)\s+(\d+|dask \d+|legate \d+|automatic)\s+"
                  r"(?:([\d.]+) s\s+([\d.e+-]+) (.+?)\s{2}.*|failed: (.*))$")
DEMO = re.compile(r"^sweep (\S+)\s+(own|\d+|dask|legate|automatic)\s+"
                  r"(?:([\d.]+) s\s+(\S+)|failed: (.*))$")
PAPER_ENTRY = {"axis": "chunks and superblocks per GPU", "per": "a GPU"}
DEMO_ENTRY = {"unit": "runs/s", "axis": "chunks and superblocks per device", "per": "a device",
              "latest_file": True}
ARRAYS_ENTRY = {"unit": "GB/s", "axis": "chunks of the inputs", "per": "chunks", "sizes": True}
LEVELS = {"own": "#9467bd", "dask": "#d62728", "legate": "#2ca02c"}
SIZE_COLOURS = ["#1f77b4", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f"]
W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 360, 80, 150, 40, 50


def parse_paper(text):
    """(key, variant, throughput or None, entry defaults) of a bench_paper line, else None."""
    m = LINE.match(text)
    if not m:
        return None
    bench, size, variant, _, thr, unit, failed = m.groups()
    value = None if failed else float(thr)
    return (bench, size.strip()), variant, value, dict(PAPER_ENTRY, unit=unit)


def parse_demo(text):
    """The same of a bench_demo line (runs per second; a wrong result counts as failed)."""
    m = DEMO.match(text)
    if not m:
        return None
    bench, variant, seconds, check, _ = m.groups()
    value = 1.0 / float(seconds) if check == "ok" and float(seconds) > 0 else None
    return (bench, ""), variant, value, dict(DEMO_ENTRY)


def parse_arrays(text):
    """The same of a bench_arrays JSON line of a chunk sweep (GB/s; chunks 0 is automatic)."""
    if not text.startswith("{"):
        return None
    try:
        r = json.loads(text)
    except ValueError:
        return None
    if not isinstance(r, dict) or not {"bench", "n", "chunks"} <= r.keys():
        return None
    n = r["n"]
    size = f"n=2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"n={n}"
    variant = str(r["chunks"]) if r["chunks"] else "automatic"
    return (r["bench"], size), variant, r.get("gbps") or None, dict(ARRAYS_ENTRY, n=n)


def load(paths):
    """{(bench, size): {"unit": str, "hand": [(chunks, thr)], variant: thr or None, and the
    axis label, the table's per and whether sizes share a plot}}."""
    out = {}
    for path in paths:
        latest = set()  # the keys whose earlier files' lines this file replaces
        for line in open(path, encoding="utf-8", errors="replace"):
            text = line.rstrip("\n")
            parsed = parse_paper(text) or parse_demo(text) or parse_arrays(text)
            if not parsed:
                continue
            key, variant, value, defaults = parsed
            if defaults.get("latest_file") and key not in latest:
                latest.add(key)
                out.pop(key, None)
            entry = out.setdefault(key, dict(defaults, hand=[], unit=defaults["unit"] or ""))
            if defaults["unit"]:
                entry["unit"] = defaults["unit"]
            if variant.isdigit():
                if value is not None:
                    entry["hand"].append((int(variant), value))
            else:
                entry[variant] = value
    return out


def frame(title, x1, y1, xlabel):
    """The SVG's opening, title, grid and axes (chunk counts 1 to 2^x1, log2; 0 to y1), and
    the functions placing a chunk count and a throughput."""
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
    for e in range(0, x1 + 1):
        out.append(f'<text x="{px(2 ** e)}" y="{H - BOTTOM + 18}" text-anchor="middle">'
                   f'{2 ** e}</text>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 10}" text-anchor="middle">'
               f'{xlabel}</text>')
    return out, px, py


def polyline(out, pts, colour, px, py):
    """A line through (chunks, throughput) points, a dot at each."""
    path = " ".join(f"{px(c):.1f},{py(y):.1f}" for c, y in pts)
    out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
    out += [f'<circle cx="{px(c):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for c, y in pts]


def level(out, y, colour, py, dash="6,4"):
    """A dashed level across the plot at throughput y."""
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
               f'stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>')


def x_extent(counts):
    """The log2 axis' last power of two, covering every chunk count (at least 2)."""
    return max(1, math.ceil(math.log2(max(counts or [1]))))


def svg(title, entry):
    hand = sorted(entry["hand"])
    marks = [(v, entry[v]) for v in entry if v.startswith(("dask", "legate")) and " " in v
             and entry[v]]
    levels = [(v, entry[v]) for v in LEVELS if v in entry]
    auto = entry.get("automatic")
    ys = [y for _, y in hand + marks + levels if y] + ([auto] if auto else [])
    xs = [c for c, _ in hand] + [int(v.split()[1]) for v, _ in marks]
    out, px, py = frame(title, x_extent(xs), max(ys) * 1.1,
                        f'{entry["axis"]} ({entry["unit"]} up)')
    polyline(out, hand, "#1f77b4", px, py)
    legend = [("hand-chosen", "#1f77b4", None)]
    for v, y in marks:
        colour = "#d62728" if v.startswith("dask") else "#2ca02c"
        x = px(int(v.split()[1]))
        out.append(f'<rect x="{x - 5:.1f}" y="{py(y) - 5:.1f}" width="10" height="10" '
                   f'fill="none" stroke="{colour}" stroke-width="2"/>')
        legend.append((v, colour, None))
    for v, y in levels:
        if y:
            level(out, y, LEVELS[v], py, "2,3")
        legend.append((v, LEVELS[v], "2,3") if y else (f"{v}: failed", "none", None))
    if auto:
        level(out, auto, "#ff7f0e", py)
        legend.append(("automatic", "#ff7f0e", None))
    for i, (label, colour, dash) in enumerate(legend):
        legend_entry(out, i, label, colour, W, dash)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svg_sizes(title, sized):
    """One benchmark's sizes in one plot: a line per size, each normalised to its best hand
    choice, its automatic choice a dashed level of the same colour."""
    lines = []
    for size, entry in sized:
        best = max(y for _, y in entry["hand"])
        auto = entry.get("automatic")
        lines.append((size, [(c, y / best) for c, y in sorted(entry["hand"])],
                      auto / best if auto else None))
    xs = [c for _, pts, _ in lines for c, _ in pts]
    ys = [y for _, pts, auto in lines for y in [y for _, y in pts] + [auto or 0]]
    out, px, py = frame(title, x_extent(xs), max(ys) * 1.1,
                        f"{sized[0][1]['axis']} (throughput / best hand choice)")
    for i, (size, pts, auto) in enumerate(lines):
        colour = SIZE_COLOURS[i % len(SIZE_COLOURS)]
        polyline(out, pts, colour, px, py)
        if auto:
            level(out, auto, colour, py)
        legend_entry(out, i, size, colour, W)
    legend_entry(out, len(lines), "automatic", "#7f7f7f", W, "6,4")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def ratio(value, best):
    if not value:
        return "failed"
    return f"{value / best:.3f}" if best else "-"


def cell(entry, prefix, best):
    """The table's cell for Dask's or Legate's rule (with its chunk count where known)."""
    name = next((v for v in entry if v.startswith(prefix)), None)
    if name is None:
        return "-"
    return ratio(entry[name], best) + (f" ({name})" if " " in name else "")


def table_row(bench, size, entry, own):
    """The Markdown row of one benchmark and size (with the own cut's column if `own`)."""
    c, best = max(entry["hand"], key=lambda h: h[1]) if entry["hand"] else ("none ran", None)
    per = "chunk" if entry["per"] == "chunks" and c == 1 else entry["per"]
    row = (f"| {bench} | {size or '-'} | {c} {per if best else ''}".rstrip() +
           f" | {ratio(entry.get('automatic'), best)} | ")
    if own:
        row += (ratio(entry["own"], best) if "own" in entry else "-") + " | "
    return row + f"{cell(entry, 'dask', best)} | {cell(entry, 'legate', best)} |"


def write(out_dir, name, text):
    with open(os.path.join(out_dir, name), "w") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("files", nargs="+")
    p.add_argument("--tag", default="", help="added to each SVG's name and title")
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    entries = {k: e for k, e in load(args.files).items() if e["hand"] or e.get("automatic")}
    own = any("own" in e for e in entries.values())
    tag = (f" ({args.tag})" if args.tag else "", f"{'-' + args.tag if args.tag else ''}.svg")
    print("| benchmark | size | best hand choice | automatic |" + (" own cut |" if own else "") +
          " Dask | Legate |")
    print("| --- | --- | --- | --- |" + (" --- |" if own else "") + " --- | --- |")
    grouped = {}
    for (bench, size), entry in entries.items():
        if entry.get("sizes"):
            grouped.setdefault(bench, []).append((size, entry))
        else:
            write(args.out_dir, bench + tag[1], svg(f"{bench} {size}".strip() + tag[0], entry))
        print(table_row(bench, size, entry, own))
    for bench, sized in grouped.items():
        sized = sorted((s for s in sized if s[1]["hand"]), key=lambda s: s[1]["n"])
        if sized:
            write(args.out_dir, bench + tag[1],
                  svg_sizes(f"{bench} float32{tag[0]}: each size over its best hand choice",
                            sized))


if __name__ == "__main__":
    main()
