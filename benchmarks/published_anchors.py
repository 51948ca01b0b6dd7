"""The decode model against every published batch-1 run it was not fitted to.

    python benchmarks/published_anchors.py [--out table.csv] [--skip-graph]

Reads the published table (``data/published/decode_anchors.csv``) into structured parts,
and prints:

- the headline: leave-one-source-out, per regime — each source's runs predicted by the
  terms fitted without any of them (``regime_model.leave_one_source_out``): runs,
  sources, modeled, the median and range of predicted / published, the share within
  0.5-2.0, the interval factor and how often the nested interval covers a held-out run —
  against the targets (median within 0.8-1.25 in every regime with at least 4 modeled
  sources; at least 80% of rows within 0.5-2.0; coverage at least 80% with a factor of
  at most 2);
- every held-out row, and the rows not modeled with why;
- the ordering of every pair of runs on one machine that differ in placement or runtime;
- llmfit's formula on the same rows, side by side;
- the fitted terms (in sample: each with its leave-one-out error, or its prior);
- unless ``--skip-graph``: ExecuTorch's two A100 runs laid out from the built-in graph and
  from the runs' facts, timed by the same function (the two agree within 5%).

Takes about a minute on a laptop CPU (the folds refit every term; the graph capture adds
about 10 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.speed.regime_model import regime_model  # noqa: E402
from workbench.speed.validation import ordering, peer_table, regime_table  # noqa: E402
from workbench.speed.published_runs import published_runs  # noqa: E402
from workbench.csv_files import write_csv  # noqa: E402

MEDIAN_TARGET = (0.8, 1.25)
ROW_TARGET = 0.8  # share of held-out rows within 0.5-2.0
COVERAGE_TARGET, FACTOR_TARGET = 0.8, 2.0
ORDERING_TARGET = 0.9
MIN_SOURCES = 4


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="also write the held-out per-row table as CSV")
    parser.add_argument("--skip-graph", action="store_true", help="skip the graph-vs-facts check (a shape-only capture)")
    args = parser.parse_args()
    pd.set_option("display.width", 220)
    pd.set_option("display.max_colwidth", 60)
    pd.set_option("display.max_rows", 300)
    started = time.perf_counter()
    runs = published_runs()
    model = regime_model()
    held = list(model.out_of_sample)
    print(f"fitted and held out every source in {time.perf_counter() - started:.1f} s ({len(runs)} runs, "
          f"{len({r.source for r in runs})} sources)")

    table = regime_table(held)
    print("\n== held out (leave one source out): predicted / published per regime -- the headline")
    print(table.to_string(index=False, float_format=_fmt))
    judged = table[(table["regime"] != "all") & (table["sources modeled"] >= MIN_SOURCES)]
    overall = table[table["regime"] == "all"].iloc[0]
    pairs = ordering(held)
    checks = {
        f"median within {MEDIAN_TARGET} in every regime with >= {MIN_SOURCES} modeled sources":
            bool(judged["median ratio"].between(*MEDIAN_TARGET).all()),
        f">= {ROW_TARGET:.0%} of held-out rows within 0.5-2.0": bool(overall["within 0.5-2"] >= ROW_TARGET),
        f"intervals cover >= {COVERAGE_TARGET:.0%} of held-out rows": bool(overall["covered"] >= COVERAGE_TARGET),
        f"every interval factor <= {FACTOR_TARGET}": bool((table["interval ×/÷"].dropna() <= FACTOR_TARGET).all()),
        f"same-machine pairs ordered >= {ORDERING_TARGET:.0%}": bool(len(pairs) and pairs["ordered"].mean() >= ORDERING_TARGET),
    }  # fmt: skip
    for what, ok in checks.items():
        print(f"  {'met ' if ok else 'MISSED'}  {what}")

    by_id = {r.id: r for r in runs}
    rows = pd.DataFrame([{"id": o.id, "regime": o.regime, "source": o.source, "runtime": o.runtime, "published tok/s": o.published,
                          "held-out tok/s": o.predicted, "held-out ratio": o.ratio,
                          "in-sample tok/s": model.predict(by_id[o.id]).tok_s} for o in held if o.predicted is not None])  # fmt: skip
    print("\n== every held-out row")
    print(rows.to_string(index=False, float_format=_fmt))
    print("\n== not modeled")
    for o in held:
        if o.predicted is None:
            print(f"  {o.id:<46} {o.why[:150]}")

    print(f"\n== same-machine pairs (same GPU, host and model; another placement or runtime): "
          f"{int(pairs['ordered'].sum())} of {len(pairs)} ordered as published")
    print(pairs.to_string(index=False, float_format=_fmt))

    print("\n== llmfit's formula on the same rows (workbench: held out; llmfit: nothing fitted to these runs)")
    print(peer_table(held, runs).to_string(index=False, float_format=_fmt))

    print(f"\n== fitted terms, in sample ({len(model.terms)}): each with its leave-one-out error over the runs it was fitted on")
    for term in model.terms:
        if term.prior:
            print(f"  {term.name}: {term.value:.4g} -- its prior: {len(term.rows)} runs depend on it, fewer than a fit needs")
            continue
        print(f"  {term.name}: {term.value:.4g} on {len(term.rows)} runs, median leave-one-out error {term.median_loo_error:.3f} "
              f"(max {max(term.loo_errors):.3f})")

    if not args.skip_graph:
        from workbench.app.anchors import anchors_table

        print("\n== one physics, two ways in: ExecuTorch's A100 runs laid out from the built-in graph (int4) and from facts")
        anchors = anchors_table(model=model)
        print(anchors.to_string(index=False))
        agree = (anchors["graph ms/token"] / anchors["facts ms/token"] - 1).abs().max()
        print(f"graph vs facts: largest difference {agree:.1%} (target <= 5%)")
    if args.out:
        write_csv(rows, args.out)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
