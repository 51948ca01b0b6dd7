"""Time of place + propagate against graph size (synthetic random DAGs).

Prints, for graphs of about 100, 1,000 and 10,000 ops: median place time, median
propagate time, their sum, copies inserted, delegates, and the growth factor per 10×
more ops (1× per 10× is linear time per op... ~10× is linear in total). Target: 10,000
ops in under 1 s, growth close to linear.

    python benchmarks/propagate_scale.py [--repeats 5] [--sizes 100 1000 10000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import workbench as wb
from workbench.models.examples import synthetic_program

RULES = {"cuda:0": ["aten.mm", "aten.add"], "cuda:1": ["aten.sigmoid"]}


def measure(num_ops: int, repeats: int) -> dict:
    program = synthetic_program(num_ops, seed=num_ops)
    place_times, propagate_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        placed = wb.place(program, RULES)
        t1 = time.perf_counter()
        dg = wb.propagate(placed)
        t2 = time.perf_counter()
        place_times.append(t1 - t0)
        propagate_times.append(t2 - t1)
    place_s, propagate_s = statistics.median(place_times), statistics.median(propagate_times)
    return {
        "ops": program.num_ops(),
        "nodes_out": len(dg.graph.nodes),
        "delegates": len(placed.delegates),
        "copies": len(dg.copies),
        "place_ms": place_s * 1e3,
        "propagate_ms": propagate_s * 1e3,
        "total_ms": (place_s + propagate_s) * 1e3,
        "total_min_ms": min(a + b for a, b in zip(place_times, propagate_times)) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = [measure(n, args.repeats) for n in args.sizes]
    print(f"place + propagate, median of {args.repeats} (rules {RULES})")
    print(f"{'ops':>7} {'nodes out':>9} {'delegates':>9} {'copies':>7} {'place ms':>9} {'propagate ms':>12} {'total ms':>9} {'min ms':>8} {'us/op':>7}")
    for r in rows:
        print(
            f"{r['ops']:>7} {r['nodes_out']:>9} {r['delegates']:>9} {r['copies']:>7} {r['place_ms']:>9.1f} "
            f"{r['propagate_ms']:>12.1f} {r['total_ms']:>9.1f} {r['total_min_ms']:>8.1f} {r['total_ms'] * 1e3 / r['ops']:>7.1f}"
        )
    for a, b in zip(rows, rows[1:]):
        growth = b["total_ms"] / a["total_ms"]
        size = b["ops"] / a["ops"]
        print(f"{a['ops']} -> {b['ops']} ops (x{size:.0f}): time x{growth:.1f} (linear would be x{size:.0f})")
    big = [r for r in rows if r["ops"] >= 10000]
    if big:
        verdict = "PASS" if big[-1]["total_ms"] < 1000 else "FAIL"
        print(f"target 10,000 ops < 1 s: {big[-1]['total_ms']:.0f} ms median -> {verdict}")


if __name__ == "__main__":
    main()
