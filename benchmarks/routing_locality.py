"""Routing locality: published statistics vs a generated trace, and what they do to an LRU cache.

    python benchmarks/routing_locality.py [--model mixtral_8x7b] [--tokens 16384] [--seed 0]

Prints:

- the published statistics of ``--model`` (``data/routing/locality.csv``, averaged over the
  subsets the paper measured) beside the same statistics measured on a trace
  ``locality_trace`` generated to match them, and the fitted reuse probabilities;
- per trace, the statistics averaged over layers: a uniform trace (every expert equally
  likely, tokens independent), the Zipf trace (exponent 1, independent tokens), the trace
  the capacity sweep replays by default (Zipf 1, reuse 0.3) and the locality-matched one;
- the LRU hit rate of each trace at several cache sizes, and the link traffic it saves
  against streaming every routed expert (streaming bytes / LRU bytes = 1 / (1 - hit rate)).

A few seconds on a laptop CPU (the fit simulates the named layers only).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.moe.cache_policies import replay  # noqa: E402
from workbench.moe.locality import locality_models, locality_trace, measure_locality, model_locality  # noqa: E402
from workbench.moe.routing import synthetic_trace  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mixtral_8x7b", choices=locality_models())
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pd.set_option("display.width", 200)
    started = time.perf_counter()

    published = model_locality(args.model)
    fit = locality_trace(published, args.tokens, args.seed)
    sources = sorted(set(published.rows["source"]))
    print(f"# {args.model}: {published.num_layers} layers, top-{published.top_k} of {published.num_experts} experts; "
          f"published figures from {', '.join(sources)} (mean of subsets: "
          f"{', '.join(sorted(set(published.rows['subset']) - {'all'}))})")
    print(fit.comparison.to_string(index=False))
    named = sorted({int(x) for x in fit.comparison["layer"]})
    print("fitted per named layer: " + "; ".join(
        f"layer {layer}: reuse_first {fit.reuse_first[layer]:.3f}, reuse_rest {fit.reuse_rest[layer]:.3f}" for layer in named))
    print(fit.summary())

    L, E, k, T = published.num_layers, published.num_experts, published.top_k, args.tokens
    traces = {
        "uniform, independent": synthetic_trace(T, L, E, k, zipf=0.0, seed=args.seed),
        "zipf 1, independent": synthetic_trace(T, L, E, k, zipf=1.0, seed=args.seed),
        "zipf 1, reuse 0.3 (sweep default)": synthetic_trace(T, L, E, k, zipf=1.0, reuse=0.3, seed=args.seed),
        "locality-matched": fit.trace,
    }
    stats = pd.DataFrame(
        {name: measure_locality(trace).drop(columns="layer").mean() for name, trace in traces.items()}
    ).T.round(3)
    print(f"\n# statistics averaged over the {L} layers, {T} tokens each")
    print(stats.to_string())

    rows = []
    for slots in sorted({k, k + 1, E // 2, (3 * E) // 4} - {E} | {k}):
        row: dict[str, object] = {"slots_per_layer": slots}
        for name, trace in traces.items():
            hit = replay(trace, "lru", slots, 1).hit_rate()
            row[f"{name}: hit"] = round(hit, 3)
            row[f"{name}: saves"] = f"{1 / (1 - hit):.2f}x" if hit < 1 else "inf"
        rows.append(row)
    print("\n# LRU hit rate per layer cache, and link bytes of streaming over LRU (1 / (1 - hit))")
    print(pd.DataFrame(rows).T.to_string(header=False))
    print(f"\n{time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
