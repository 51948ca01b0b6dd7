"""Benchmark: copies per call, the workbench vs ExecuTorch's device propagation.

For every cross-check case (``workbench.compare.COPY_CASES``) and every setting of the
two skip flags, both systems place the same ops on the same devices; the table prints
the copies each inserts (h2d / d2h / d2d) and the bytes they move per call, or what
ExecuTorch said when it refused or crashed. Then, per case, the figures that sum it up.

    python benchmarks/executorch_copies.py

Needs the optional package ``executorch``; without it the script says how to install it
and exits 0.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings

import pandas as pd

from workbench.compare import (
    COPY_CASES,
    FLAG_LABELS,
    INSTALL_HINT,
    CopyComparison,
    compare_case,
    comparison_table,
    executorch_available,
)

def _display(results: list[CopyComparison]) -> pd.DataFrame:
    """The comparison table, trimmed to what fits a terminal."""
    table = comparison_table(results)
    table["flags"] = [FLAG_LABELS[(r.skip_h2d, r.skip_d2h)] for r in results]
    table["wb_resident"] = table["wb_resident"].where(table["wb_resident"] > 0, 0)
    table["saved"] = [
        None if r.et_total is None else r.et_total - r.wb_total for r in results
    ]
    table["et_says"] = [_short(r.et.error) for r in results]
    columns = [
        "case", "flags", "delegates", "wb_h2d", "wb_d2h", "wb_d2d", "wb_bytes", "wb_resident",
        "et_h2d", "et_d2h", "et_bytes", "saved", "et_says",
    ]  # fmt: skip
    out = table[columns].copy()
    for col in ("et_h2d", "et_d2h", "et_bytes", "saved"):
        out[col] = out[col].astype("Int64")
    return out


def _short(error: str | None, width: int = 48) -> str:
    if error is None:
        return ""
    return error if len(error) <= width else error[: width - 1] + "…"


def _summary(results: list[CopyComparison]) -> list[str]:
    lines = []
    for case in COPY_CASES:
        rows = [r for r in results if r.model == case.name]
        ran = [r for r in rows if r.et.ok]
        refused = len(rows) - len(ran)
        if ran:
            ratio = statistics.median(r.et_total / r.wb_total for r in ran if r.wb_total)
            saved = statistics.median(r.et_total_bytes - r.wb_total_bytes for r in ran)
            figures = (
                f"over the {len(ran)} settings ExecuTorch ran: median copies ET/WB {ratio:.2f}, "
                f"median bytes saved per call {saved:,.0f}"
            )
        else:
            figures = "ExecuTorch produced no program"
        extra = f"; ExecuTorch failed {refused}/{len(rows)}" if refused else ""
        eager = "all" if all(r.wb_equals_eager for r in rows) else "NOT all"
        lines.append(f"  {case.name:<16} {figures}{extra}; workbench = eager in {eager} settings")
    return lines


def main() -> int:
    # torch.export's own deprecation notice, printed once per capture: not a result
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning)
    if not executorch_available():
        print(f"executorch is not installed; for this cross-check run: {INSTALL_HINT}")
        return 0
    start = time.perf_counter()
    results: list[CopyComparison] = []
    for case in COPY_CASES:
        results.extend(compare_case(case))
    elapsed = time.perf_counter() - start

    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    pd.set_option("display.max_colwidth", 60)
    print("Copies per call: workbench (wb) vs ExecuTorch 1.5.1 PropagateDevicePass (et)")
    print("bytes = bytes copied per call; wb_resident = parameter bytes the workbench keeps on")
    print("the device (loaded once, never copied); saved = et copies - wb copies\n")
    rules = {r.model: r.rules_text for r in results}
    for case in COPY_CASES:
        print(f"- {case.name}: {case.shows}  [{rules[case.name]}]")
    print()
    print(_display(results).to_string(index=False))
    print()
    print("Per case:")
    print("\n".join(_summary(results)))
    failures = {r.et.error for r in results if r.et.error}
    if failures:
        print("\nExecuTorch errors in full (first line):")
        for error in sorted(failures):
            print(f"  {error}")
    worse = [r for r in results if r.et.ok and r.wb_total > r.et_total]
    print(
        f"\n{len(results)} comparisons in {elapsed:.1f} s; workbench copies more than ExecuTorch in "
        f"{len(worse)}"
    )
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
