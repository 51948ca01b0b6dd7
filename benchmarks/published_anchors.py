"""The decode model against every published batch-1 run it was not fitted to.

    python benchmarks/published_anchors.py [--out table.csv] [--skip-graph]

Reads the published table (``data/published/decode_anchors.csv``) into structured parts,
and prints:

- the headline: leave-one-runtime-out (LORO), per regime — each engine's runs (all its
  profiles: versions, builds, launch modes) predicted by the terms fitted without any of
  them (``regime_model.leave_one_runtime_out``): runs, sources, engines, modeled, the
  median and range of predicted / published, the share within 0.5-2.0, the interval at
  the nominal level and how often the nested interval covers a held-out run — against
  the targets (at least 85% of modeled runs within 0.5-2; every regime's median within
  0.8-1.25; coverage within 10 points of the nominal level; every runtime profile with a
  modeled run);
- second, the same held out by source (LOSO);
- per runtime profile: both hold-outs, the evidence its intervals are earned on
  (``speed.evidence``) and how often those earned intervals cover its held-out runs;
- every held-out row, and the rows not modeled with why;
- the ordering of every pair of runs of one model that differ in one setting only, per
  setting;
- llmfit's formula on the same rows, side by side;
- the fitted terms (in sample: each with its leave-one-out error, or its prior);
- unless ``--skip-graph``: ExecuTorch's two A100 runs laid out from the built-in graph and
  from the runs' facts, timed by the same function (the two agree within 5%).

Takes about a minute and a half on a laptop CPU (the folds refit every term; the graph
capture adds about 10 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.machine.runtime_profiles import runtime_profiles  # noqa: E402
from workbench.speed.evidence import INTERVAL_LEVEL, earned_coverage  # noqa: E402
from workbench.speed.regime_model import regime_model  # noqa: E402
from workbench.speed.validation import ordering, ordering_by_setting, peer_table, profile_table, regime_table  # noqa: E402
from workbench.speed.published_runs import published_runs  # noqa: E402
from workbench.csv_files import write_csv  # noqa: E402

MEDIAN_TARGET = (0.8, 1.25)
ROW_TARGET = 0.85  # share of LORO-held-out modeled runs within 0.5-2.0
COVERAGE_SLACK = 0.10  # coverage within this many points of the nominal level


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

    unseen = list(model.out_of_runtime)
    loro = regime_table(unseen, "engine")
    print(f"\n== held out by engine (leave one runtime out): predicted / published per regime -- the headline; "
          f"intervals at the nominal {INTERVAL_LEVEL:.0%}, coverage nested (each engine judged by the others' errors)")
    print(loro.to_string(index=False, float_format=_fmt))
    loso = regime_table(held, "source")
    print("\n== held out by source (leave one source out): the runtime's other sources stay in the fit")
    print(loso.to_string(index=False, float_format=_fmt))
    profiles = profile_table(held, unseen, runtime_profiles())
    print("\n== per runtime profile: both hold-outs, the evidence its intervals are earned on, their nested coverage")
    print(profiles.to_string(index=False, float_format=_fmt))
    judged = earned_coverage(held, unseen)
    earned = sum(c for c, _ in judged.values()) / len(judged)
    by_label: dict[str, list[bool]] = {}
    for covered, label in judged.values():
        by_label.setdefault("validated on its own sources" if label.startswith("validated on") and
                            int(label.split()[2]) >= 3 else "widened runtime errors", []).append(covered)
    print(f"earned intervals cover {earned:.1%} of {len(judged)} held-out runs (nominal {INTERVAL_LEVEL:.0%}): " +
          "; ".join(f"{k} {sum(v) / len(v):.1%} of {len(v)}" for k, v in by_label.items()))
    overall = loro[loro["regime"] == "all"].iloc[0]
    regimes = loro[(loro["regime"] != "all") & (loro["modeled"] > 0)]
    pairs = ordering(held)
    coverage_gap = (regimes["covered"] - INTERVAL_LEVEL).abs()
    checks = {
        f"LORO: >= {ROW_TARGET:.0%} of modeled runs within 0.5-2.0 ({overall['within 0.5-2']:.1%})":
            bool(overall["within 0.5-2"] >= ROW_TARGET),
        f"LORO: every regime's median within {MEDIAN_TARGET} ({', '.join(f'{m:.2f}' for m in regimes['median ratio'])})":
            bool(regimes["median ratio"].between(*MEDIAN_TARGET).all()),
        f"LORO: every regime's nested coverage within {COVERAGE_SLACK:.0%} of {INTERVAL_LEVEL:.0%} "
        f"({', '.join(f'{c:.0%}' for c in regimes['covered'])})": bool((coverage_gap <= COVERAGE_SLACK).all()),
        f"earned intervals: coverage within {COVERAGE_SLACK:.0%} of {INTERVAL_LEVEL:.0%} ({earned:.1%})":
            abs(earned - INTERVAL_LEVEL) <= COVERAGE_SLACK,
        f"every runtime profile has a modeled run (none: {', '.join(profiles.loc[profiles['modeled'] == 0, 'profile']) or '-'})":
            bool((profiles["modeled"] > 0).all()),
    }  # fmt: skip
    for what, ok in checks.items():
        print(f"  {'met ' if ok else 'MISSED'}  {what}")
    for name in profiles.loc[profiles["modeled"] == 0, "profile"]:  # why each profile still lacks a modeled run
        named = [o for o in held if o.runtime == name]
        why = "; ".join(sorted({o.why for o in named})) if named else "no run in the published table names it"
        print(f"          {name}: {len(named)} run{'s' if len(named) != 1 else ''}, none modeled -- {why[:170]}")
    by_id = {r.id: r for r in runs}
    unseen_by_id = {o.id: o for o in unseen}
    rows = pd.DataFrame([{"id": o.id, "regime": o.regime, "source": o.source, "runtime": o.runtime, "published tok/s": o.published,
                          "held-out tok/s": o.predicted, "held-out ratio": o.ratio, "LORO ratio": unseen_by_id[o.id].ratio,
                          "in-sample tok/s": model.predict(by_id[o.id]).tok_s} for o in held if o.predicted is not None])  # fmt: skip
    print("\n== every held-out row")
    print(rows.to_string(index=False, float_format=_fmt))
    print("\n== not modeled")
    for o in held:
        if o.predicted is None:
            print(f"  {o.id:<46} {o.why[:150]}")

    print(f"\n== pairs of one model that differ in one setting (held out by source): "
          f"{int(pairs['ordered'].sum())} of {len(pairs)} ordered as published")
    print(ordering_by_setting(pairs).to_string(index=False, float_format=_fmt))
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
