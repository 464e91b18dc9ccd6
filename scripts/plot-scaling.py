#!/usr/bin/python3
"""Tables and plots of scripts/scaling.sh's runs (issue 5, the paper's Figure 15).

    scripts/plot-scaling.py bench/results/scaling-<date> bench/results

reads <folder>/<bench>-<g>.json (bench_paper's JSON: on 1 GPU `gridspan_1gpu_s`; under
mpirun with g ranks `gridspan_<g>gpu_s` for the ranks and `gridspan_1proc_<g>gpu_s` for one
process with g GPUs) and writes, into the second folder,
  - scaling-<date>.json: per benchmark and GPU count, the strong-scaling speedup (base size
    on g GPUs against 1 GPU) and the weak-scaling efficiency (size base + log2 g on g GPUs:
    throughput / (g x the 1-GPU throughput)), for one process and for one rank per GPU;
  - plot-scaling-throughput.png (throughput against data size, a panel per benchmark),
    plot-scaling-strong.png and plot-scaling-weak.png;
and prints the table as Markdown.
"""
import json
import os
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COMPUTE_BOUND = {"md5", "nbody", "correlator", "kmeans"}
TARGET = {"gemm": 0.75, "spmv": 0.75}  # weak-scaling efficiency at 8 GPUs; others 0.90


def mean(xs):
    return sum(xs) / len(xs)


def load(folder):
    """bench -> list of (g, mode, size label, bytes, items, unit, seconds, check); and the
    backend the runs used (cuda, or cpu: virtual cpu devices in place of GPUs)."""
    runs = defaultdict(list)
    backend = "cuda"
    for name in sorted(os.listdir(folder)):
        m = re.fullmatch(r"(\w+)-(\d+)\.json", name)
        if not m:
            continue
        bench, g = m.group(1), int(m.group(2))
        with open(os.path.join(folder, name)) as f:
            data = json.load(f)
        backend = data.get("backend", backend)
        for row in data["results"]:
            common = (row["size"], row["bytes"], row["items"], row["unit"], row.get("check", ""))
            if g == 1 and "gridspan_1gpu_s" in row:
                runs[bench].append((1, "process", *common[:4], mean(row["gridspan_1gpu_s"]),
                                    common[4]))
                runs[bench].append((1, "ranks", *common[:4], mean(row["gridspan_1gpu_s"]),
                                    common[4]))
            if g > 1 and f"gridspan_{g}gpu_s" in row:
                runs[bench].append((g, "ranks", *common[:4], mean(row[f"gridspan_{g}gpu_s"]),
                                    common[4]))
            if g > 1 and f"gridspan_1proc_{g}gpu_s" in row:
                runs[bench].append((g, "process", *common[:4],
                                    mean(row[f"gridspan_1proc_{g}gpu_s"]), common[4]))
    return runs, backend


def analyse(runs):
    table = {}
    for bench, rs in runs.items():
        one = [r for r in rs if r[0] == 1]
        if not one:
            continue
        base = min(one, key=lambda r: r[3])  # the base size: the 1-GPU run
        t1, tp1 = base[6], base[4] / base[6]
        entry = {"base_size": base[2], "base_bytes": base[3], "one_gpu_s": t1, "modes": {}}
        for mode in ("process", "ranks"):
            per_g = {}
            for g in sorted({r[0] for r in rs}):
                mine = [r for r in rs if r[0] == g and r[1] == mode]
                strong = [r for r in mine if r[2] == base[2]]
                # The weak run is the other size of that GPU count's runs (1 GPU: the base).
                weak = [r for r in mine if r[2] != base[2]] if g > 1 else strong
                per_g[g] = {
                    "strong_speedup": t1 / strong[0][6] if strong else None,
                    "weak_size": weak[0][2] if weak else None,
                    "weak_efficiency": (weak[0][4] / weak[0][6]) / (g * tp1) if weak else None,
                    "checks": sorted({r[7] for r in mine}),
                }
            entry["modes"][mode] = per_g
        table[bench] = entry
    return table


def fmt(x, pct=False):
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.2f}×"


def main(folder, out_dir):
    runs, backend = load(folder)

    def devices(g):
        return f"{g} " + ("GPU" if backend == "cuda" else "cpu device") + ("s" if g > 1 else "")
    if not runs:
        sys.exit(f"plot-scaling: no <bench>-<g>.json in {folder}")
    table = analyse(runs)
    date = os.path.basename(os.path.normpath(folder)).removeprefix("scaling-")
    tag = re.fullmatch(r"\d{4}-\d\d-\d\d(-(.+))?", date)
    prefix = "plot-scaling-" + (tag.group(2) + "-" if tag and tag.group(2) else "")
    with open(os.path.join(out_dir, f"scaling-{date}.json"), "w") as f:
        json.dump(table, f, indent=1)
    gpus = sorted({g for e in table.values() for g in e["modes"]["process"]})
    print("| benchmark | base size | " + " | ".join(
        f"strong {devices(g)} (process / ranks) | weak {devices(g)} (process / ranks)" for g in gpus
        if g > 1) + " |")
    print("|---|---|" + "---|---|" * (len(gpus) - 1))
    for bench, e in table.items():
        cells = []
        for g in gpus:
            if g == 1:
                continue
            p, r = e["modes"]["process"].get(g, {}), e["modes"]["ranks"].get(g, {})
            cells.append(f"{fmt(p.get('strong_speedup'))} / {fmt(r.get('strong_speedup'))}")
            cells.append(f"{fmt(p.get('weak_efficiency'), True)} / "
                         f"{fmt(r.get('weak_efficiency'), True)}")
        print(f"| {bench} | {e['base_size']} | " + " | ".join(cells) + " |")

    # Throughput against data size, a panel per benchmark.
    names = sorted(runs)
    cols = 4
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, bench in zip(axes.flat, names):
        series = defaultdict(list)
        # Benchmarks with no data to speak of (MD5, N-Body) grow by their work.
        by_items = max(r[3] for r in runs[bench]) < 1e9
        for g, mode, size, nbytes, items, unit, t, _ in runs[bench]:
            if g == 1 and mode == "ranks":
                continue
            label = devices(g) if g == 1 else f"{devices(g)}, " + (
                "one process" if mode == "process" else "one rank each")
            series[label].append((items if by_items else nbytes / 1e9, items / t))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_title(bench)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"problem size ({runs[bench][0][5].split('/')[0]})" if by_items
                      else "data (GB)")
        ax.set_ylabel(f"{runs[bench][0][5]}")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, prefix + "throughput.png"), dpi=110)

    # Strong speedups and weak efficiencies, bars per benchmark.
    has_weak = any(m.get(g, {}).get("weak_efficiency") is not None for e in table.values()
                   for m in e["modes"].values() for g in gpus if g > 1)
    for key, title, fname, ideal in (
            ("strong_speedup", f"strong scaling: speedup over {devices(1)}", "strong.png", None),
            ("weak_efficiency", "weak scaling: efficiency (1 = perfect)", "weak.png", 1.0)):
        if key == "weak_efficiency" and not has_weak:
            continue
        fig, ax = plt.subplots(figsize=(10, 3.8))
        bars = [(g, mode) for g in gpus if g > 1 for mode in ("process", "ranks")]
        width = 0.8 / max(1, len(bars))
        for k, (g, mode) in enumerate(bars):
            ys = [table[b]["modes"][mode].get(g, {}).get(key) or 0 for b in names]
            ax.bar([i + k * width for i in range(len(names))], ys, width,
                   label=f"{devices(g)}, " + ("one process" if mode == "process" else "one rank each"))
        for g in gpus:
            if g > 1 and ideal is None:
                ax.axhline(g, color="grey", lw=0.5, ls="--")
        if ideal is not None:
            ax.axhline(0.9, color="grey", lw=0.5, ls="--")
            ax.axhline(0.75, color="grey", lw=0.5, ls=":")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, prefix + fname), dpi=110)
    # Where the targets stand at the largest GPU count run.
    g = max(gpus)
    for bench, e in table.items():
        for mode in ("process", "ranks"):
            eff = e["modes"][mode].get(g, {}).get("weak_efficiency")
            want = TARGET.get(bench, 0.90 if bench in COMPUTE_BOUND else None)
            if eff is not None and want is not None:
                print(f"{bench} {mode} weak efficiency at {devices(g)}: {100 * eff:.1f}% "
                      f"(target at 8 GPUs: {100 * want:.0f}%)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
