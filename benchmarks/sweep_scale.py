"""Budget sweep at full size: wall time with 1 and 2 worker processes, memory per worker.

    python benchmarks/sweep_scale.py [--workers 1 2] [--links pcie_gen4 pcie_gen5 nvlink_c2c]

The published 35B-A3B configuration (shape-only: no weights) is swept over partial
offload of every depth 0..40, expert caches of 8, 16, 32, 64, 96, 128, 160 and 192 slots
per layer × LRU, LFU, static-hot (hit rates from a synthetic trace, labelled so) and the
four fixed strategies, under three links: 69 strategy settings × 3 links = 207 points (one
point = one strategy setting estimated under one link). For each worker count: the wall time of the whole sweep (each
worker captures the program once), the median seconds per strategy setting, and the
peak resident memory of every worker process. Checked and printed with PASS/FAIL: at
least 200 points; the same best-per-budget table for every worker count; every best
row within its budget.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


def grid(config) -> dict:
    E = config.num_experts
    return {
        "all_on_device": {},
        "experts_on_host": {},
        "expert_streaming": {"prefetch": [False, True]},
        "partial_offload": {"n_host_layers": list(range(config.num_hidden_layers + 1))},
        "expert_cache": {"slots_per_layer": [E // 32, E // 16, E // 8, E // 4, 3 * E // 8, E // 2, 5 * E // 8, 3 * E // 4],
                         "policy": ["lru", "lfu", "static_hot"]},
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--links", nargs="+", default=["pcie_gen4", "pcie_gen5", "nvlink_c2c"])
    args = parser.parse_args()

    from workbench.models import MoEConfig
    from workbench.sweeps import DEFAULT_BUDGETS_GIB, process_pool, sweep

    config = MoEConfig.full()
    strategies = grid(config)
    results = {}
    for n in args.workers:
        start = time.perf_counter()
        with process_pool(n) as pool:
            result = sweep(config, DEFAULT_BUDGETS_GIB, args.links, strategies, pool)
        wall = time.perf_counter() - start
        results[n] = result
        per_task = statistics.median(result.workers["busy_s"] / result.workers["tasks"])
        print(f"\n{n} worker(s): {len(result.points)} points ({len(result.points) // len(args.links)} plans × "
              f"{len(args.links)} links) in {wall:.1f} s; median {per_task:.2f} s per plan (all links)")  # fmt: skip
        print(result.workers.to_string(index=False))
    first = results[args.workers[0]]
    print("\nbest per budget:")
    cols = ["budget_GiB", "link", "fits", "label", "device_GiB", "tok/s", "link_MiB/token", "hit_rate_source"]
    print(first.best[cols].to_string(index=False))
    if len(results) > 1:
        base = results[args.workers[0]].seconds
        for n, r in results.items():
            print(f"speed-up with {n} worker(s): {base / r.seconds:.2f}×")
    enough = len(first.points) >= 200
    same = all(r.best.equals(first.best) for r in results.values())
    within = bool((first.best["device_bytes"].dropna() <= first.best["budget_GiB"][first.best["fits"]] * 2**30).all())
    print(f"\n≥ 200 points: {'PASS' if enough else 'FAIL'}; same best table for every worker count: "
          f"{'PASS' if same else 'FAIL'}; best rows within budget: {'PASS' if within else 'FAIL'}")  # fmt: skip
    return 0 if enough and same and within else 1


if __name__ == "__main__":
    raise SystemExit(main())
