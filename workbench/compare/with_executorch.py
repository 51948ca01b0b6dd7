"""``compare_with_executorch``: one model, one placement, both systems, every difference explained.

The ExecuTorch side is lowered with ``workbench.compare.lowering`` and imported with
``workbench.executorch.from_executorch`` (ExecuTorch's own placement, copies and buffers);
the workbench side is ``capture(decompose=True)`` → ``place`` → ``propagate`` → ``plan``
(``best``, at ExecuTorch's alignment) under the same rules and skip flags.

Rules:
1. One table, one row per quantity: copies and bytes copied per call by kind, buffer
   bytes per device (with both sides' lower bounds), constant bytes per device.
2. Every row where the two sides differ says why in plain words: the ExecuTorch patterns
   behind it (``workbench.executorch.patterns``: per-edge copies, copies through the host,
   parameters copied to a device, materialised views, unread outputs) with their counts
   and bytes, the workbench's delegate internals, and the planners' results against
   their lower bounds. A copy difference the patterns do not account for is called
   unexplained, with its size.
3. An ExecuTorch refusal or crash is a result (its stage and message fill the reasons),
   not an exception; malformed rules and flags raise before anything runs.
4. Both programs are modeled alike for the timelines: the same cost model, every result
   written in place (``estimate(..., in_place_writes=True)``), so the two timelines differ
   by placement, copies and memory, not by how the workbench's own executor stores results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pandas as pd
import torch

from ..capture import capture
from ..devices import CopyKind, Device, host_first
from ..executorch.imported import ExecuTorchEstimate, ImportedProgram, from_executorch
from ..executorch.patterns import PATTERNS, Pattern, find_patterns
from ..place import place
from ..planning.memory_plan import MemoryPlan
from ..propagate import DeviceGraph
from ..runtime import Timeline, estimate
from .arenas import workbench_plan, workbench_tensors
from .lowering import error_text, lower, rule_partitioner
from .settings import (
    FrozenRules,
    as_input_tuple,
    check_settings,
    freeze_rules,
    parse_edge_rules,
    rules_text,
)

__all__ = ["SideBySide", "compare_with_executorch"]

COLUMNS = [
    "quantity", "of", "executorch", "workbench", "executorch_lower_bound", "workbench_lower_bound",
    "difference", "reason",
]  # fmt: skip


@dataclass(frozen=True, eq=False)
class SideBySide:
    """Both systems on one model, placement and flag setting (see the module's rules)."""

    model: str
    rules: FrozenRules
    skip_h2d: bool
    skip_d2h: bool
    alignment: int  # ExecuTorch's memory-planning alignment, used on both sides
    executorch: Optional[ImportedProgram]  # None when ExecuTorch refused or crashed
    et_error: Optional[str]  # "<exception type>: <first line>" when it did
    et_stage: Optional[str]  # the pipeline step that raised
    patterns: tuple[Pattern, ...]  # what ExecuTorch spends that the workbench avoids
    workbench: MemoryPlan  # the workbench's plan (``best``) of the same placement
    workbench_internal: Mapping[Device, int]  # device → bytes planned inside multi-op delegates
    executorch_estimate: Optional[ExecuTorchEstimate]  # ExecuTorch's program, modeled
    workbench_timeline: Timeline  # the workbench's plan, modeled alike (same cost model, results written in place)

    @property
    def workbench_graph(self) -> DeviceGraph:
        """The workbench's propagated graph (the one its plan placed)."""
        return self.workbench.device_graph

    @property
    def rules_text(self) -> str:
        return rules_text(self.rules)

    def table(self) -> pd.DataFrame:
        """Rule 1's table: one row per quantity, with the reason for every difference."""
        rows = self._copy_rows() + self._memory_rows()
        table = pd.DataFrame(rows, columns=COLUMNS)
        for column in (
            "executorch",
            "workbench",
            "executorch_lower_bound",
            "workbench_lower_bound",
            "difference",
        ):
            table[column] = table[column].astype("Int64")
        return table

    # -- rows -------------------------------------------------------------------------

    def _copy_rows(self) -> list[dict[str, Any]]:
        dg = self.workbench_graph
        p = self.executorch.program if self.executorch is not None else None
        rows = []
        for quantity, counted in (("copies per call", True), ("bytes copied per call", False)):
            wb = dg.copy_counts() if counted else dg.copy_bytes()
            et = (p.copy_counts() if counted else p.copy_bytes()) if p is not None else None
            for kind in CopyKind:
                reason = self._copy_reason(kind, counted)
                rows.append(self._row(quantity, str(kind), et[kind] if et else None, wb[kind], None, None, reason))
        return rows

    def _memory_rows(self) -> list[dict[str, Any]]:
        p = self.executorch.program if self.executorch is not None else None
        et_arena = p.arena_bytes if p is not None else {}
        et_bound = p.lower_bound(self.alignment) if p is not None else {}
        et_constants = p.constant_bytes if p is not None else {}
        plan = self.workbench
        devices = host_first([*plan.arena_bytes, *et_arena, *plan.constant_bytes, *et_constants])
        rows = []
        for d in devices:
            et, et_lb = (et_arena.get(d, 0), et_bound.get(d, 0)) if p is not None else (None, None)
            wb, wb_lb = plan.arena_bytes.get(d, 0), plan.lower_bound.get(d, 0)
            rows.append(self._row("buffer bytes", str(d), et, wb, et_lb, wb_lb, self._buffer_reason(d)))
        for d in devices:
            et = et_constants.get(d, 0) if p is not None else None
            wb = plan.constant_bytes.get(d, 0)
            rows.append(self._row("constant bytes", str(d), et, wb, None, None, self._constant_reason(d)))
        return rows

    def _row(
        self,
        quantity: str,
        of: str,
        et: Optional[int],
        wb: int,
        et_lb: Optional[int],
        wb_lb: Optional[int],
        reason: str,
    ) -> dict[str, Any]:
        difference = None if et is None else et - wb
        if et is None:
            reason = f"ExecuTorch failed in {self.et_stage}: {self.et_error}"
        elif difference == 0:
            reason = ""
        return dict(zip(COLUMNS, (quantity, of, et, wb, et_lb, wb_lb, difference, reason)))

    # -- reasons (rule 2) ---------------------------------------------------------------

    def _copy_reason(self, kind: CopyKind, counted: bool) -> str:
        parts, explained = [], 0
        for key, group in _by_key(p for p in self.patterns if p.copies.get(kind)).items():
            amount = sum(p.copies[kind] for p in group) if counted else sum(_kind_bytes(p, kind) for p in group)
            explained += amount
            parts.append(f"{PATTERNS[key]}: {_amount(amount, counted)} — " + "; ".join(p.detail for p in group))
        if kind is CopyKind.D2D:
            parts.append(
                "ExecuTorch has no device-to-device copy: it goes through the host (see copies through the host)"
            )
        elif self.executorch is not None:
            p, dg = self.executorch.program, self.workbench_graph
            et, wb = (p.copy_counts(), dg.copy_counts()) if counted else (p.copy_bytes(), dg.copy_bytes())
            left = et[kind] - wb[kind] - explained
            if left:
                parts.append(f"unexplained: {_amount(left, counted)}")
        return " | ".join(parts)

    def _buffer_reason(self, device: Device) -> str:
        parts = []
        if self.executorch is not None:
            tensors = {t.name: t for t in self.executorch.program.tensors.values()}
            for key, group in _by_key(self.patterns).items():
                planned = (tensors[name] for pattern in group for name in pattern.tensors)
                nbytes = sum(t.nbytes for t in planned if t.device == device)
                if nbytes:
                    parts.append(f"{PATTERNS[key]} (ExecuTorch only): {nbytes:,} B")
        internal = self.workbench_internal.get(device, 0)
        if internal:
            parts.append(
                f"delegate internals (the workbench only): {internal:,} B planned inside multi-op delegates, "
                "which ExecuTorch leaves to the backend"
            )
        if self.executorch is not None:
            p, plan = self.executorch.program, self.workbench
            parts.append(
                f"planning: ExecuTorch's greedy {p.arena_bytes.get(device, 0):,} B for its tensors (their lower "
                f"bound {p.lower_bound(self.alignment).get(device, 0):,} B); the workbench's best "
                f"{plan.arena_bytes.get(device, 0):,} B (lower bound {plan.lower_bound.get(device, 0):,} B)"
            )
        return " | ".join(parts)

    def _constant_reason(self, device: Device) -> str:
        if device.is_host:
            return (
                "ExecuTorch's program holds its constants on the host (weights a backend took into its "
                "delegate are inside the delegate's payload, not counted); the workbench counts every "
                "parameter on each device that uses it"
            )
        return (
            f"the workbench keeps the parameters used on {device} resident there, loaded once; ExecuTorch "
            "keeps them in the program and copies what a device delegate reads (see parameters copied to a device)"
        )


def _by_key(patterns: Any) -> dict[str, list[Pattern]]:
    out: dict[str, list[Pattern]] = {}
    for p in patterns:
        out.setdefault(p.key, []).append(p)
    return out


def _kind_bytes(pattern: Pattern, kind: CopyKind) -> int:
    """Bytes a copy pattern moves per call with copies of ``kind``."""
    total = sum(pattern.copies.values())
    return pattern.nbytes * pattern.copies.get(kind, 0) // total if total else 0


def _amount(amount: int, counted: bool) -> str:
    return f"{amount} cop{'y' if amount == 1 else 'ies'}" if counted else f"{amount:,} B"


# --- running both sides ------------------------------------------------------------------


def compare_with_executorch(
    model: torch.nn.Module,
    example_inputs: Any,
    rules: Mapping[str, Sequence[str] | str],
    flags: tuple[bool, bool] = (False, False),
    *,
    name: Optional[str] = None,
) -> SideBySide:
    """Lower ``model`` with ExecuTorch and plan it with the workbench under the same
    ``rules`` and ``flags`` = ``(skip_h2d, skip_d2h)``; see the module's rules.

    Raises ``PlacementError`` for malformed rules, ``CrossCheckInputError`` for bad flags,
    ``ExecuTorchNotInstalled`` without executorch.
    """
    parsed = parse_edge_rules(rules)
    ((skip_h2d, skip_d2h),) = check_settings((flags,))
    inputs = as_input_tuple(example_inputs)
    partitioner = rule_partitioner(rules)

    def read(program: Any, config: Any) -> tuple[Optional[ImportedProgram], int, Optional[str], Optional[str]]:
        return (
            from_executorch(program),
            int(config.memory_planning_pass.alignment),
            None,
            None,
        )

    def failed(
        exc: BaseException, stage: str, config: Any
    ) -> tuple[Optional[ImportedProgram], int, Optional[str], Optional[str]]:
        return (
            None,
            int(config.memory_planning_pass.alignment),
            error_text(exc)[0],
            stage,
        )

    imported, alignment, error, stage = lower(model, inputs, partitioner, [(skip_h2d, skip_d2h)], read, failed)[0]
    placement = place(capture(model, inputs, decompose=True), rules)
    dg, plan = workbench_plan(placement, skip_h2d, skip_d2h, "best", alignment)
    internal: dict[Device, int] = {}
    for t in workbench_tensors(plan, dg, placement):
        if t.internal:
            internal[t.device] = internal.get(t.device, 0) + t.nbytes
    return SideBySide(
        model=name or type(model).__name__,
        rules=freeze_rules(parsed),
        skip_h2d=skip_h2d,
        skip_d2h=skip_d2h,
        alignment=alignment,
        executorch=imported,
        et_error=error,
        et_stage=stage,
        patterns=find_patterns(imported.program) if imported is not None else (),
        workbench=plan,
        workbench_internal=internal,
        executorch_estimate=imported.estimate() if imported is not None else None,
        workbench_timeline=estimate(plan, in_place_writes=True),
    )
