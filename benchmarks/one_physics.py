"""One physics: the simulated timeline and the decode timer, side by side, on every layout shown.

    python benchmarks/one_physics.py [--quick] [--out one_physics.csv]

For the full-size 35B-A3B program (shape-only), every strategy the walkthrough compares
(its prefetching ones at the measured hit rate) and every strategy setting of the
capacity sweep's quick grid (its caches at a stated hit rate), on every machine the
walkthrough and the sweep time them on (the deployment runtime on each link), it prints:

- ``sim_us``: the span of the event simulator's timeline of one call (``estimate``,
  kernels writing their planned memory);
- ``timer_us``: the decode timer's time of the same plan (``time_decode(layout_of(plan))``),
  and ``ratio`` = sim / timer;
- the work each charges (kernels, host ops and copies before any overlap: the same
  ``machine.costs`` over the same steps) and their ratio;
- the named effects of the schedule: ``unseen_overlap_us`` (what the simulator's schedule
  hides that the timer's overlap rule does not see: a copy of an input issued ahead of the
  layers that wait for it, host work beside device work that does not need it) and
  ``binding_us`` (the simulator's copies of the call's inputs into their slots, the
  caller's in a decode token);
- ``ratio_after_effects``: sim against the timer with those effects set beside it.

Every figure is modeled (the deployment cost model's parts and runtime profile; the
prefetch hit rate is measured on random weights). Its last lines: the work ratio and the
ratio after the named effects (what is left when only the costs are compared: 1 when the
two charge the same costs), then ``max |ratio-1| = X``, the raw ratio of the two step
times — the schedule's overlap the timer's rule does not see included.

``--quick`` checks the walkthrough's strategies on one link (a minute on a laptop CPU);
the whole run takes a few minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.app import walkthrough as wt  # noqa: E402
from workbench.csv_files import write_csv  # noqa: E402
from workbench.models import MoEConfig  # noqa: E402
from workbench.moe.strategies import strategy_variants  # noqa: E402
from workbench.speed.agreement import agreement  # noqa: E402
from workbench.sweeps import quick_grid  # noqa: E402
from workbench.sweeps.reuse import planned  # noqa: E402
from workbench.sweeps.source import ConfigSource  # noqa: E402

#: The hit rate the quick grid's expert caches are checked at (any rate in [0, 1] is a layout;
#: the sweep's own rates come from its routing replay).
CACHE_HIT_RATE = 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the walkthrough's strategies on PCIe Gen5 only")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as CSV")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    started = time.perf_counter()
    config = MoEConfig.full()
    source = ConfigSource(config)
    prefetch_rate = wt.full_size_hit_rate(config)
    links = ("pcie_gen5",) if args.quick else wt.LINKS
    checked: list[tuple[str, object, float]] = []
    for strategy in strategy_variants(prefetch=True):
        label = f"walkthrough: {strategy.variant}" + (" (skip copies)" if strategy.skip_copies else "")
        checked.append((label, strategy, prefetch_rate if strategy.prefetch else 0.0))
    if not args.quick:
        for spec in quick_grid(config):
            strategy = spec.build()
            cache = "cache" in spec.name
            rate = CACHE_HIT_RATE if cache else (prefetch_rate if strategy.prefetch else 0.0)
            checked.append((f"sweep: {spec.label}", strategy, rate))
    rows = []
    print(f"prefetch hit rate {prefetch_rate:.3f} (measured on random weights); caches at {CACHE_HIT_RATE}")
    for label, strategy, rate in checked:
        plan = planned(source.program(strategy.prefetch), strategy, "greedy")
        for link in links:
            found = agreement(plan, wt.deployment_cost_model(link), prefetch_hit_rate=rate)
            row = {
                "layout": label, "machine": found.cost_model, "hit_rate": round(rate, 3),
                "sim_us": round(found.sim_us, 1), "timer_us": round(found.timer_us, 1), "ratio": round(found.ratio, 4),
                "sim_work_us": round(found.sim_work_us, 1), "timer_work_us": round(found.timer_work_us, 1),
                "work_ratio": round(found.work_ratio, 4), "unseen_overlap_us": round(found.unseen_overlap_us, 1),
                "binding_us": round(found.binding_us, 1), "ratio_after_effects": round(found.ratio_after_effects, 4),
            }  # fmt: skip
            rows.append(row)
            print(f"{label:<58} {link:<10} sim {row['sim_us']:>10.1f} timer {row['timer_us']:>10.1f} "
                  f"ratio {row['ratio']:.3f}  work {row['work_ratio']:.4f}  unseen overlap {row['unseen_overlap_us']:>8.1f} "
                  f"binding {row['binding_us']:>6.1f}  after {row['ratio_after_effects']:.4f}", flush=True)  # fmt: skip
    table = pd.DataFrame(rows)
    if args.out is not None:
        write_csv(table, args.out)
    print(f"{len(rows)} layouts checked in {time.perf_counter() - started:.0f} s")
    print(f"median ratio {table['ratio'].median():.3f}; median after effects {table['ratio_after_effects'].median():.4f}")
    # With the named effects set beside the timer, what is left is the work the two charge
    # differently (agreement rule 4): 0 when they charge the same costs.
    print(f"max |work ratio-1| = {(table['work_ratio'] - 1).abs().max():.4f}; "
          f"max |ratio after the named effects - 1| = {(table['ratio_after_effects'] - 1).abs().max():.4f}")
    print(f"max |ratio-1| = {(table['ratio'] - 1).abs().max():.4f}")


if __name__ == "__main__":
    main()
