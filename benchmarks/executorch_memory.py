"""Benchmark: arena bytes per device, the workbench's planner vs ExecuTorch's.

For every arena case (``workbench.compare.ARENA_CASES``: small models on the host only
and with one-op device delegates) and each skip-flag setting, both systems plan the
non-constant memory of every device; the table prints, per device:

- ``et``: ExecuTorch 1.5.1's bytes (``non_const_buffer_sizes``; its default greedy at
  alignment 16, non-CPU memory planning on),
- ``wb_greedy`` / ``wb_best``: the workbench's plans of the same placement and flags at
  the same alignment, and ``lb``, their lower bound,
- ``et/wb``: ExecuTorch's bytes over the workbench's ``best``,
- ``wb@et``: the workbench's ``best`` on ExecuTorch's own tensors and lifetimes (the
  algorithms alone, same input), and ``et_lb`` their lower bound,
- one-sided bytes: tensors one side plans and the other does not, by reason (views
  ExecuTorch materializes, unread outputs, per-argument copies …).

    python benchmarks/executorch_memory.py            # every flag setting of the placed cases
    python benchmarks/executorch_memory.py --quick    # the plain setting only

Needs the optional package ``executorch``; without it the script says how to install it
and exits 0. Exits 1 when the workbench's ``best`` is above ExecuTorch's bytes on a
comparable arena, or a difference is unexplained.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections import Counter
from typing import Sequence

import pandas as pd

from workbench.compare import (
    ARENA_CASES,
    FLAG_LABELS,
    FLAG_SETTINGS,
    INSTALL_HINT,
    ArenaComparison,
    arena_table,
    case,
    compare_arena_case,
    compare_arenas,
    executorch_available,
)

_SHORT_REASONS = {
    "view_copy": "views",
    "unread_output": "unread",
    "per_argument_copy": "per-arg h2d",
    "resident_weight": "weights",
    "through_host": "via host",
    "delegate_internal": "internal",
    "unexplained": "UNEXPLAINED",
}


def _reasons(r: ArenaComparison, device: str) -> str:
    parts = []
    for side, tag in (("executorch", "et"), ("workbench", "wb")):
        for reason, nbytes in r.one_sided_bytes(side, device).items():
            parts.append(f"{tag} {_SHORT_REASONS.get(reason, reason)} {nbytes}")
    return ", ".join(parts)


def _display(results: list[ArenaComparison]) -> pd.DataFrame:
    table = arena_table(results)
    reasons = [_reasons(r, row["device"]) for r in results for row in r.rows()]
    out = pd.DataFrame(
        {
            "case": table["case"],
            "rules": table["rules"],
            "flags": [FLAG_LABELS[(h, d)] for h, d in zip(table["skip_h2d"], table["skip_d2h"])],
            "device": table["device"] + table["comparable"].map({True: "", False: "*"}),
            "et": table["et_bytes"].astype("Int64"),
            "wb_greedy": table["wb_greedy"],
            "wb_best": table["wb_best"],
            "lb": table["wb_lower_bound"],
            "et/wb": table["et_over_wb"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}"),
            "wb@et": table["wb_best_on_et_tensors"].astype("Int64"),
            "et_lb": table["et_tensors_lower_bound"].astype("Int64"),
            "one-sided bytes": reasons,
        }
    )
    errors = table["et_error"].fillna("").map(lambda e: e if len(e) <= 60 else e[:59] + "…")
    out.loc[errors != "", "one-sided bytes"] = "ET failed: " + errors[errors != ""]
    return out


def _summary(results: list[ArenaComparison]) -> tuple[list[str], bool]:
    rows = [(r, row) for r in results for row in r.rows() if row["et_bytes"] is not None]
    comparable = [(r, row) for r, row in rows if row["comparable"]]
    worse = [row for _, row in comparable if row["wb_best"] > row["et_bytes"]]
    unexplained = sum(len(r.unexplained) for r in results)
    lines = []
    for device_kind in ("cpu", "device"):
        group = [row for _, row in comparable if (row["device"] == "cpu") == (device_kind == "cpu")]
        if not group:
            continue
        ratios = [row["et_bytes"] / row["wb_best"] for row in group if row["wb_best"]]
        lines.append(
            f"  {device_kind:<6} arenas: {len(group)} compared; workbench best <= ExecuTorch in "
            f"{sum(row['wb_best'] <= row['et_bytes'] for row in group)}/{len(group)}; ExecuTorch/best "
            f"median {statistics.median(ratios):.2f}x, max {max(ratios):.2f}x; best at its lower bound in "
            f"{sum(row['wb_best'] == row['wb_lower_bound'] for row in group)}/{len(group)}"
        )
    algo = [(row["wb_best_on_et_tensors"], row["et_bytes"]) for _, row in rows]
    lines.append(
        f"  same tensors (ExecuTorch's own lifetimes): workbench best below ExecuTorch's greedy in "
        f"{sum(a < e for a, e in algo)}/{len(algo)}, equal in {sum(a == e for a, e in algo)}, above in "
        f"{sum(a > e for a, e in algo)}"
    )
    totals: Counter = Counter()
    for r in results:
        for t in r.one_sided:
            totals[(t.side, t.reason or "unexplained")] += t.nbytes
    for (side, reason), nbytes in sorted(totals.items()):
        lines.append(f"  planned by {side} only: {reason:<18} {nbytes:>9,} bytes")
    failed = sum(not r.et.ok for r in results)
    lines.append(f"  ExecuTorch failed in {failed}/{len(results)} comparisons; unexplained differences: {unexplained}")
    return lines, not worse and not unexplained


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="placed cases with the plain flag setting only")
    args = parser.parse_args(argv)
    # torch.export's own deprecation notice, printed once per capture: not a result
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning)
    if not executorch_available():
        print(f"executorch is not installed; for this cross-check run: {INSTALL_HINT}")
        return 0
    settings = ((False, False),) if args.quick else FLAG_SETTINGS
    start = time.perf_counter()
    results: list[ArenaComparison] = []
    for c in ARENA_CASES:
        results.extend(compare_arena_case(c, settings if c.rules else ((False, False),)))
    weights = case("param_on_device")  # weights as delegate arguments: crash or per-call copies
    for skip_h2d, skip_d2h in settings:
        results.append(
            compare_arenas(weights.model(), weights.example_inputs(), weights.rules, skip_h2d, skip_d2h,
                           name=weights.name)
        )  # fmt: skip
    elapsed = time.perf_counter() - start

    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 20)
    pd.set_option("display.max_colwidth", 70)
    print("Arena bytes per device: ExecuTorch 1.5.1 MemoryPlanningPass (et) vs workbench (wb)")
    print(f"alignment {results[0].alignment} on both sides; inputs/outputs planned unless a skip flag")
    print("hands them to the caller; '*' = a device arena with multi-op delegates (not comparable:")
    print("ExecuTorch leaves delegate internals to the backend)\n")
    print(_display(results).to_string(index=False))
    print()
    lines, ok = _summary(results)
    print("Summary:")
    print("\n".join(lines))
    print(f"\n{len(results)} comparisons in {elapsed:.1f} s: {'PASS' if ok else 'FAIL'} "
          "(workbench best <= ExecuTorch on every comparable arena, every difference explained)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
