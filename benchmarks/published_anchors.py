"""Modeled vs published batch-1 decode speeds, every regime.

    python benchmarks/published_anchors.py [--out table.csv]

Fits the regime model's terms on the published table (``data/published/decode_anchors.csv``)
and prints:

- the per-row table (``workbench.anchors.modeled_vs_published``): published and modeled
  tok/s, their ratio, the runtime profile and parts used, or why a row is not modeled;
- for the rows with an expert cache, the routing its hit rate assumed (published per-model
  routing statistics, or uniform routing);
- the ratios by regime (``ratios_by_regime``) against the targets: every regime's median
  within 0.8-1.25, every row within 0.5-2.0;
- every fitted term: its value, the runs it was fitted on and its leave-one-out errors
  (refit without the run, predict it: |predicted / published - 1|), at most 8 terms;
- the memory-bound model (``memory_bound_tok_s``, nothing fitted) for comparison.

Takes a few seconds on a laptop CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.anchors import memory_bound_tok_s, modeled_vs_published, ratios_by_regime  # noqa: E402
from workbench.app.decode_model import regime_model  # noqa: E402

MEDIAN_TARGET = (0.8, 1.25)
ROW_TARGET = (0.5, 2.0)
MAX_FITTED = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--out", type=Path, help="also write the per-row table as CSV")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_colwidth", 70)
    pd.set_option("display.max_rows", 200)

    model = regime_model()
    table = modeled_vs_published()
    shown = table.assign(id=table["id"].str.slice(0, 42))
    print("== modeled vs published (regime model)")
    print(shown[["id", "regime", "published tok/s", "modeled tok/s", "ratio", "runtime profile", "parts"]]
          .to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    cached = table[table["routing"].str.len() > 0]
    print("\n== routing assumed by the expert cache (experts copied in)")
    for row in cached.itertuples(index=False):
        print(f"{row.id[:42]:<42} {row.routing}")
    print("\n== not modeled")
    left = shown[shown["modeled tok/s"].isna()]
    print(left[["id", "not modeled because"]].to_string(index=False))

    by_regime = ratios_by_regime(table)
    print("\n== ratios by regime (modeled / published)")
    print(by_regime.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    ratios = table["ratio"].dropna()
    medians_ok = by_regime["median ratio"].dropna().between(*MEDIAN_TARGET).all()
    rows_ok = int(ratios.between(*ROW_TARGET).sum())
    print(f"\nmedians within {MEDIAN_TARGET}: {'yes' if medians_ok else 'no'}; rows within {ROW_TARGET}: "
          f"{rows_ok} of {len(ratios)} modeled; overall median {ratios.median():.3f}, range {ratios.min():.3f}-{ratios.max():.3f}")

    print(f"\n== fitted terms ({len(model.terms)}, at most {MAX_FITTED})")
    for term in model.terms:
        print(f"{term.name}: {term.value:.4g}  median LOO error {term.median_loo_error:.3f}  (max {max(term.loo_errors):.3f}, "
              f"{len(term.rows)} runs)")
        for run, error in zip(term.rows, term.loo_errors):
            print(f"    {run:<45} LOO error {error:.3f}")

    simple = ratios_by_regime(modeled_vs_published(model=memory_bound_tok_s))
    print("\n== for comparison: memory-bound model (datasheet bandwidth, nothing fitted)")
    print(simple.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out:
        table.to_csv(args.out, index=False)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
