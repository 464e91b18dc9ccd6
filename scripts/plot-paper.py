#!/usr/bin/python3
"""Plots bench_paper's JSON: one PNG per benchmark, throughput against data size for the
plain CUDA program, gridspan on 1 and 2 GPUs and gridspan out of core on 1 GPU.

    scripts/plot-paper.py bench/results/paper-*.json   # later files override earlier ones
    # writes bench/results/plot-<benchmark>.png (OUT=folder to write elsewhere)
"""
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = [("cuda_s", "plain CUDA (1 GPU)"), ("gridspan_1gpu_s", "gridspan, 1 GPU"),
          ("gridspan_2gpu_s", "gridspan, 2 GPUs"), ("ooc_1gpu_s", "gridspan, 1 GPU, half in memory")]


def main(paths):
    points = defaultdict(dict)  # bench -> (size, series) -> throughput
    units = {}
    by_items = set()  # benchmarks with no data to speak of (MD5, N-Body): size = items
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for row in data["results"]:
            units[row["bench"]] = row["unit"]
            if row["bytes"] < 1e8:
                by_items.add(row["bench"])
            for key, _ in SERIES:
                runs = row.get(key)
                if runs:
                    size = row["items"] if row["bench"] in by_items else row["bytes"] / 1e9
                    points[row["bench"]][(size, key)] = row["items"] / (sum(runs) / len(runs))
    out = os.environ.get("OUT", "bench/results")
    for bench, values in sorted(points.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for key, label in SERIES:
            xs = sorted(b for (b, k) in values if k == key)
            if xs:
                ax.plot(xs, [values[(x, key)] for x in xs], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("work items" if bench in by_items else "data [GB]")
        ax.set_ylabel(units[bench])
        ax.set_title(bench)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        target = os.path.join(out, f"plot-{bench}.png")
        fig.savefig(target, dpi=110)
        plt.close(fig)
        print(target)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
