"""Expert-cache trace replay: how long all policies take over a full-size trace.

    python benchmarks/trace_replay.py [--tokens 10000] [--repeats 5]

A synthetic trace shaped like the published 35B-A3B model (40 layers, 256 experts, top-8;
Zipf 1.0, reuse 0.3 — synthetic, as every row says) is replayed through LRU, LFU and
static-hot at several slot counts. Printed: the median wall time of ``replay_all`` over
``--repeats`` (after one warm-up call that compiles the LRU/LFU kernel; the compile time
is printed apart), the hit rate and MiB per token of each policy. Target printed with
PASS/FAIL: 10k tokens × 40 layers × 256 experts, all policies, < 1 s at every slot count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

SLOTS = (8, 32, 64, 128, 192)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from workbench.models import MoEConfig
    from workbench.moe import POLICIES, replay_all, slab_bytes, synthetic_trace_for

    config = MoEConfig.full()
    slab = slab_bytes(config)
    start = time.perf_counter()
    trace = synthetic_trace_for(config, args.tokens, zipf=1.0, reuse=0.3, seed=0)
    print(f"{trace}  generated in {time.perf_counter() - start:.2f} s; reuse rate {trace.reuse_rate():.3f}")
    start = time.perf_counter()
    replay_all(trace.head(16), POLICIES, 8, slab)  # compiles (or loads the cached) kernel
    print(f"kernel compile/load: {time.perf_counter() - start:.2f} s (once per installation)\n")

    worst = 0.0
    print(f"{'slots':>5}  {'median s':>8}  " + "  ".join(f"{p:>18}" for p in POLICIES))
    for slots in SLOTS:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            replays = replay_all(trace, POLICIES, slots, slab)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        worst = max(worst, median)
        cells = "  ".join(f"{r.hit_rate():6.3f} {r.bytes_per_token() / 2**20:7.1f} MiB" for r in replays)
        print(f"{slots:>5}  {median:8.3f}  {cells}")
    print("\n(cells: hit rate, MiB over the link per token)")
    ok = worst < 1.0
    print(
        f"target: {args.tokens} tokens × 40 layers × 256 experts, all policies < 1 s: "
        f"worst median {worst:.3f} s — {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
