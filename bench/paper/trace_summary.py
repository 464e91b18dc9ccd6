#!/usr/bin/env python3
"""Summarises a gridspan trace (GRIDSPAN_TRACE=file.json) of an out-of-core run: per kind of
event (execute, reload, spill, evict, pin, ...) the count, the time and the bytes, then over
the span of the kernels how long kernels ran, how long data moved, and how long both did at
once, i.e. how well transfers overlapped compute.

    trace_summary.py trace.json [--after-us T] [--last F]
    (--after-us: only events starting after T; --last: only the last fraction F of the span of
    the kernels, e.g. 0.5 to leave out a warm-up run)

Then, per direction (reload: host to device; spill: device to host, write-behinds included), how long at least one
such copy ran, the rate while one did, and the spread of single copies' times.
"""
import argparse
import collections
import json

MOVES = ("reload", "spill", "write-behind", "evict", "read", "write")


def union(spans):
    """Merged, sorted [start, end) intervals."""
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(spans):
    return sum(e - s for s, e in spans)


def intersect(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--after-us", type=float, default=0.0)
    p.add_argument("--last", type=float, default=1.0)
    args = p.parse_args()
    with open(args.trace) as f:
        d = json.load(f)
    events = [e for e in (d["traceEvents"] if isinstance(d, dict) else d)
              if e.get("ph") == "X" and e["ts"] >= args.after_us]
    execs = [e for e in events if e.get("cat") == "execute"]
    if execs and args.last < 1.0:
        first = min(e["ts"] for e in execs)
        last = max(e["ts"] + e["dur"] for e in execs)
        cut = last - args.last * (last - first)
        events = [e for e in events if e["ts"] >= cut]
    kinds = collections.defaultdict(lambda: [0, 0.0, 0])
    for e in events:
        k = kinds[e.get("cat", "?")]
        k[0] += 1
        k[1] += e.get("dur", 0.0)
        k[2] += e.get("args", {}).get("bytes", 0)
    print(f"{'kind':<12} {'events':>7} {'ms':>10} {'MB':>10}")
    for cat, (n, us, b) in sorted(kinds.items()):
        print(f"{cat:<12} {n:>7} {us / 1e3:>10.2f} {b / 1e6:>10.1f}")
    kernels = union((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "execute")
    moves = union((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in MOVES)
    if not kernels:
        return print("no kernels in the trace")
    span = kernels[-1][1] - kernels[0][0]
    both = length(intersect(kernels, moves))
    print(f"span of the kernels {span / 1e3:.2f} ms: kernels {length(kernels) / span:.1%}, "
          f"moves {length(moves) / span:.1%}, both at once {both / span:.1%}, "
          f"neither {1 - length(union(kernels + moves)) / span:.1%}")
    # Copies out: spills (evictions) and write-behinds (copies of chunks that stay resident).
    ways = {"reload": [e for e in events if e.get("cat") == "reload"],
            "spill": [e for e in events if e.get("cat") in ("spill", "write-behind")]}
    for kind, those in ways.items():
        direction(kind, those, span)
    busy = {k: union((e["ts"], e["ts"] + e["dur"]) for e in v) for k, v in ways.items()}
    print(f"reload and spill at once {length(intersect(busy['reload'], busy['spill'])) / span:.1%} "
          f"of the span")


def direction(kind, events, span):
    """One direction's busy time over the span, its rate while busy, its copies' spread."""
    if not events:
        return print(f"{kind}: none")
    busy = length(union((e["ts"], e["ts"] + e["dur"]) for e in events))
    moved = sum(e.get("args", {}).get("bytes", 0) for e in events)
    durs = sorted(e["dur"] / 1e3 for e in events)
    q = lambda f: durs[min(len(durs) - 1, int(f * len(durs)))]
    print(f"{kind}: busy {busy / span:.1%} of the span, {moved / busy / 1e3:.1f} GB/s while busy; "
          f"{len(durs)} copies, ms min {durs[0]:.2f} median {q(0.5):.2f} p90 {q(0.9):.2f} "
          f"max {durs[-1]:.2f}")


if __name__ == "__main__":
    main()
