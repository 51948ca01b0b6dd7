"""Hardware as parts: the named GPUs, hosts, links and runtimes a cost model is composed of.

``parts()`` reads the shipped table (``data/parts/parts.csv``): one row per figure of a
part, with the datasheet (or the estimate) it comes from. ``CostModel.compose(gpu=,
host=, link=, runtime=)`` takes each part's ``CostModel`` fields from it.

Rules:

1. Each kind of part sets its own ``CostModel`` fields, all of them: a ``gpu`` the device
   math and memory figures, a ``host`` the host CPU's, a ``link`` the copy paths', a
   ``runtime`` how kernels are launched. A host may also state descriptive figures
   (``cores``, ``sockets``, ``dram_peak_bandwidth``), a gpu its ``memory_bytes`` and host
   interface (``pcie_gen``, ``pcie_lanes``): not ``CostModel`` fields (``part_facts``
   reads them).
2. Every figure has a source; values are finite numbers (``launch_mode``: a launch mode);
   no (kind, name, field) appears twice. A table that breaks a rule is refused with a
   ``CostModelError`` naming the rows.
3. The table is data, read and never executed; a measured part (``measured:<name>``) is
   not in it but in a measured preset file (``CostModel.compose`` reads it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pandas as pd

from ..file_reading import cached_by_file, finite_number, read_csv_table
from .op_cost import CostModelError

__all__ = ["PART_FIELDS", "PART_KINDS", "DESCRIPTIVE_FIELDS", "part_facts", "part_figures", "part_names", "parts", "parts_path"]

#: The CostModel fields each kind of part sets (rule 1).
PART_FIELDS: dict[str, tuple[str, ...]] = {
    "gpu": ("device_flops_fp64", "device_flops_fp32", "device_flops_bf16", "device_flops_fp8", "device_memory_bandwidth"),
    "host": ("host_flops", "host_memory_bandwidth", "host_op_overhead"),
    "link": ("h2d_bandwidth", "d2h_bandwidth", "d2d_bandwidth", "h2d_latency", "d2h_latency", "d2d_latency",
             "pageable_factor"),
    "runtime": ("launch_mode", "launch_overhead", "executor_overhead", "graph_launch_overhead", "kernel_gap",
                "min_kernel_time"),
}  # fmt: skip
PART_KINDS = tuple(PART_FIELDS)
#: Figures a part may state that no time uses (rule 1).
DESCRIPTIVE_FIELDS: dict[str, tuple[str, ...]] = {
    "host": ("cores", "sockets", "dram_peak_bandwidth"),
    "gpu": ("memory_bytes", "pcie_gen", "pcie_lanes"),
}
_COLUMNS = ("kind", "name", "field", "value", "source")


def parts_path() -> Path:
    """The shipped table: the repository's ``data/parts/parts.csv``."""
    return Path(__file__).resolve().parents[2] / "data" / "parts" / "parts.csv"


def parts(path: Optional[Path] = None) -> pd.DataFrame:
    """The table of parts, one row per figure, checked (rule 2)."""
    return _parts(Path(path) if path is not None else parts_path()).copy()


@cached_by_file
def _parts(path: Path) -> pd.DataFrame:
    table = read_csv_table(path, "table of hardware parts", CostModelError, _COLUMNS)
    problems: list[str] = []
    for i, row in enumerate(table.itertuples(index=False)):
        where = f"row {i + 2} ({row.kind}/{row.name}/{row.field})"
        allowed = PART_FIELDS.get(row.kind)
        if allowed is None:
            problems.append(f"{where}: kind is none of {', '.join(PART_KINDS)}")
            continue
        if row.field not in allowed + DESCRIPTIVE_FIELDS.get(row.kind, ()):
            problems.append(f"{where}: a {row.kind} part sets {', '.join(allowed + DESCRIPTIVE_FIELDS.get(row.kind, ()))}")
        if row.field == "launch_mode":
            if row.value not in ("eager", "graph"):
                problems.append(f"{where}: launch_mode must be eager or graph")
        elif finite_number(row.value) is None:
            problems.append(f"{where}: value {row.value!r} is not a finite number")
        if not row.source.strip():
            problems.append(f"{where}: no source")
    dup = table[table.duplicated(["kind", "name", "field"])]
    problems += [f"{r.kind}/{r.name}/{r.field} is given twice" for r in dup.itertuples(index=False)]
    for (kind, name), group in table[table["kind"].isin(PART_KINDS)].groupby(["kind", "name"]):
        missing = sorted(set(PART_FIELDS[kind]) - set(group["field"]))
        if missing:
            problems.append(f"{kind} part {name!r} lacks {', '.join(missing)}")
    if problems:
        raise CostModelError(f"{path}: " + "; ".join(problems))
    return table


def part_names(kind: str) -> tuple[str, ...]:
    """The names of the shipped parts of ``kind``."""
    _check_kind(kind)
    table = _parts(parts_path())
    return tuple(sorted(set(table.loc[table["kind"] == kind, "name"])))


def _check_kind(kind: str) -> None:
    if kind not in PART_FIELDS:
        raise CostModelError(f"unknown kind of part {kind!r}; valid: {', '.join(PART_KINDS)}")


def part_figures(kind: str, name: str) -> dict[str, Any]:
    """The ``CostModel`` fields the shipped part ``name`` of ``kind`` sets (rule 1)."""
    _check_kind(kind)
    table = _parts(parts_path())
    rows = table[(table["kind"] == kind) & (table["name"] == name)]
    if rows.empty:
        raise CostModelError(
            f"unknown {kind} part {name!r}; valid: {', '.join(part_names(kind))}, or 'measured:<name>' for a measured preset"
        )
    figures: dict[str, Any] = {}
    for row in rows.itertuples(index=False):
        if row.field in PART_FIELDS[kind]:
            figures[row.field] = row.value if row.field == "launch_mode" else float(row.value)
    return figures


def part_facts(kind: str, name: str) -> dict[str, float]:
    """The descriptive figures (rule 1) the shipped part ``name`` of ``kind`` states, e.g. a
    host's ``dram_peak_bandwidth`` or a gpu's ``memory_bytes``; absent ones are left out."""
    part_figures(kind, name)  # refuses an unknown kind or name
    table = _parts(parts_path())
    rows = table[(table["kind"] == kind) & (table["name"] == name)]
    return {r.field: float(r.value) for r in rows.itertuples(index=False) if r.field in DESCRIPTIVE_FIELDS.get(kind, ())}
