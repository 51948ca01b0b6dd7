"""One physics: the simulated timeline and the decode timer, side by side, on every layout shown.

    python benchmarks/one_physics.py [--quick] [--out one_physics.csv]

For the full-size 35B-A3B program (shape-only), every strategy the walkthrough compares
(its prefetching ones at the measured hit rate) and every strategy setting of the
capacity sweep's quick grid (its caches at a stated hit rate), on every machine the
walkthrough and the sweep time them on (the deployment runtime on each link), and the
walkthrough's strategies again under eager launches (notebook 04's other launch mode),
it prints:

- ``sim_us``: the span of the event simulator's timeline of one decode token
  (``estimate``, kernels writing their planned memory, the call's inputs in their slots);
- ``timer_us``: the decode timer's time of the same plan (``time_decode(layout_of(plan))``),
  and ``ratio`` = sim / timer;
- the work each charges (kernels, host ops and copies before any overlap: the same
  ``machine.costs`` over the same steps, summed from the timeline's events and from the
  layout's op groups) and their ratio;
- the named effects, beside both: ``totals_us``, the timer's rule over totals on the
  same layout (the rule a layout from facts is timed by), and ``schedule_overlap_us``, what
  the schedule hides that that rule cannot see (copies issued ahead of the layers that
  wait for them, host work beside device work that does not need it, kernel gaps
  absorbed while a kernel waits); ``binding_us``, what binding the call's inputs into
  their slots first adds to the simulated span (the session's calling convention).

Every figure is modeled (the deployment cost model's parts and runtime profile; the
prefetch hit rate is measured on random weights). Its last lines: the work ratio, the
totals rule against the schedule, then ``max |ratio-1| = X``.

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
    machines = [(wt.deployment_cost_model(link), link) for link in links]
    eager = [(wt.deployment_cost_model("pcie_gen5").with_launch_mode("eager"), "pcie_gen5 eager")]
    rows = []
    print(f"prefetch hit rate {prefetch_rate:.3f} (measured on random weights); caches at {CACHE_HIT_RATE}")
    for label, strategy, rate in checked:
        plan = planned(source.program(strategy.prefetch), strategy, "greedy")
        for model, machine in machines + (eager if label.startswith("walkthrough") else []):
            found = agreement(plan, model, prefetch_hit_rate=rate)
            row = {
                "layout": label, "machine": found.cost_model, "launch": found.launch_mode, "hit_rate": round(rate, 3),
                "sim_us": round(found.sim_us, 1), "timer_us": round(found.timer_us, 1), "ratio": round(found.ratio, 4),
                "sim_work_us": round(found.sim_work_us, 1), "timer_work_us": round(found.timer_work_us, 1),
                "work_ratio": round(found.work_ratio, 4), "totals_us": round(found.totals_us, 1),
                "schedule_overlap_us": round(found.schedule_overlap_us, 1), "binding_us": round(found.binding_us, 1),
            }  # fmt: skip
            rows.append(row)
            print(f"{label:<58} {machine:<16} sim {row['sim_us']:>10.1f} timer {row['timer_us']:>10.1f} "
                  f"ratio {row['ratio']:.4f}  work {row['work_ratio']:.4f}  totals rule {row['totals_us']:>10.1f} "
                  f"(schedule overlap {row['schedule_overlap_us']:>8.1f})  binding {row['binding_us']:>6.1f}", flush=True)  # fmt: skip
    table = pd.DataFrame(rows)
    if args.out is not None:
        write_csv(table, args.out)
    totals = table["totals_us"] / table["timer_us"]
    print(f"{len(rows)} layouts checked in {time.perf_counter() - started:.0f} s")
    print(f"max |work ratio-1| = {(table['work_ratio'] - 1).abs().max():.4f}; the totals rule over the schedule: "
          f"median {totals.median():.3f}, range {totals.min():.3f}-{totals.max():.3f}")
    print(f"max |ratio-1| = {(table['ratio'] - 1).abs().max():.4f}")


if __name__ == "__main__":
    main()
