"""Side-by-side: the workbench's copies vs ExecuTorch's ``PropagateDevicePass``.

For one model, one placement (``{device: [op patterns]}``) and one setting of the two skip
flags, both systems place the same ops on the same devices and insert their copies; the
result says how many of each kind each inserted and how many bytes they move per call, or
what ExecuTorch said when it refused or crashed.

The ExecuTorch side runs ``workbench.compare.lowering`` and reads the copy nodes off the
final graph. ``executorch`` is optional: it is imported inside the functions, and a
missing package raises ``ExecuTorchNotInstalled``.

Rules:
1. Both sides place the same ops with the workbench's own ``place`` (see ``lowering``),
   so the delegates are the same unless the two decompositions differ;
   ``CopyComparison.same_delegates`` checks it.
2. Malformed rules (``node:`` patterns included, see ``settings``), a model
   ``torch.export`` cannot capture and a failure of the workbench's own code inside the
   partitioner raise; anything ExecuTorch raises after export is a result
   (``ExecuTorchCopies.error``), not an exception.
3. Counts and bytes cover copies inserted per call; parameters the workbench keeps resident
   are reported by ``DeviceGraph.constant_bytes``, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import torch
import torch.utils._pytree as pytree

from ..graph_values import tensor_nbytes, value_of
from ..capture import capture
from ..devices import Device
from ..executorch.dependency import executorch_api
from ..place import place
from ..propagate import propagate
from .cases import COPY_CASES, Case
from .lowering import (
    ET_COPY_KINDS,
    DelegateOps,
    delegate_ops,
    error_text,
    lower,
    rule_partitioner,
    short_op_name,
)
from .settings import (
    CrossCheckInputError,
    CrossCheckTypeError,
    FLAG_SETTINGS,
    FrozenRules,
    as_input_tuple,
    check_settings,
    freeze_rules,
    parse_edge_rules,
    rules_text,
)

__all__ = [
    "CopyComparison",
    "ETCopy",
    "ExecuTorchCopies",
    "compare_case",
    "compare_copies",
    "compare_settings",
    "comparison_table",
    "executorch_copies",
    "executorch_copies_for",
]

# --- results -----------------------------------------------------------------------


@dataclass(frozen=True)
class ETCopy:
    """One copy node in ExecuTorch's final graph."""

    name: str
    kind: str  # "h2d" | "d2h" (ExecuTorch has no direct device-to-device copy)
    value: str  # the node whose value it copies
    nbytes: int | None  # None when the node carries neither a spec nor a value


@dataclass(frozen=True)
class ExecuTorchCopies:
    """What ExecuTorch inserted for one placement, or why it did not.

    Invariants:
    1. ``error is None`` exactly when the pipeline reached a final program; then
       ``copies`` lists every ``_h2d_copy``/``_d2h_copy`` node of its graph, in order.
    2. ``stage`` names the pipeline step that raised (``to_edge``, ``to_backend``,
       ``to_executorch``), else None.
    """

    copies: tuple[ETCopy, ...]
    delegates: tuple[DelegateOps, ...]  # as the partitioner tagged them
    error: str | None = None  # "<exception type>: <first line of its message>"
    stage: str | None = None
    detail: str | None = field(default=None, repr=False)  # the whole message

    @property
    def ok(self) -> bool:
        return self.error is None

    def copy_counts(self) -> dict[str, int] | None:
        """``{"h2d": n, "d2h": n}``, or None when ExecuTorch failed."""
        if not self.ok:
            return None
        counts = {"h2d": 0, "d2h": 0}
        for c in self.copies:
            counts[c.kind] += 1
        return counts

    def copy_bytes(self) -> dict[str, int] | None:
        """Bytes moved per call per kind, or None when failed or a size is unreadable."""
        sized = [(c.kind, c.nbytes) for c in self.copies if c.nbytes is not None]
        if not self.ok or len(sized) < len(self.copies):
            return None
        moved = {"h2d": 0, "d2h": 0}
        for kind, nbytes in sized:
            moved[kind] += nbytes
        return moved

    @property
    def total(self) -> int | None:
        return len(self.copies) if self.ok else None


@dataclass(frozen=True)
class CopyComparison:
    """One row of the side-by-side: a case, its placement and flags, both systems' copies."""

    model: str
    rules: FrozenRules  # (device, patterns); devices normalized
    skip_h2d: bool
    skip_d2h: bool
    wb_counts: Mapping[str, int]  # copies per call, every kind (h2d, d2h, d2d)
    wb_bytes: Mapping[str, int]  # bytes per call, every kind
    wb_resident_bytes: Mapping[Device, int]  # device → parameter bytes held there (no copy)
    wb_delegates: tuple[DelegateOps, ...]
    wb_equals_eager: bool  # the propagated graph, run, returns the eager output
    et: ExecuTorchCopies

    @property
    def wb_total(self) -> int:
        return sum(self.wb_counts.values())

    @property
    def wb_total_bytes(self) -> int:
        return sum(self.wb_bytes.values())

    @property
    def et_total(self) -> int | None:
        return self.et.total

    @property
    def et_total_bytes(self) -> int | None:
        moved = self.et.copy_bytes()
        return None if moved is None else sum(moved.values())

    @property
    def same_delegates(self) -> bool:
        """Both sides formed the same delegates (device and ops, in order)."""
        return [d.signature() for d in self.wb_delegates] == [d.signature() for d in self.et.delegates]

    @property
    def rules_text(self) -> str:
        return rules_text(self.rules)

    def row(self) -> dict[str, Any]:
        """A flat dict for a DataFrame row."""
        et_counts = self.et.copy_counts() or {}
        return {
            "case": self.model,
            "rules": self.rules_text,
            "skip_h2d": self.skip_h2d,
            "skip_d2h": self.skip_d2h,
            "delegates": len(self.wb_delegates),
            "same_delegates": self.same_delegates,
            "wb_h2d": self.wb_counts["h2d"],
            "wb_d2h": self.wb_counts["d2h"],
            "wb_d2d": self.wb_counts["d2d"],
            "wb_copies": self.wb_total,
            "wb_bytes": self.wb_total_bytes,
            "wb_resident": sum(n for dev, n in self.wb_resident_bytes.items() if dev != "cpu"),
            "wb_eager_ok": self.wb_equals_eager,
            "et_h2d": et_counts.get("h2d"),
            "et_d2h": et_counts.get("d2h"),
            "et_copies": self.et_total,
            "et_bytes": self.et_total_bytes,
            "et_error": self.et.error,
        }


# --- the ExecuTorch side --------------------------------------------------------


def executorch_copies(
    model: torch.nn.Module,
    example_inputs: tuple,
    rules: Mapping[str, Sequence[str] | str],
    skip_h2d: bool = False,
    skip_d2h: bool = False,
) -> ExecuTorchCopies:
    """Lower ``model`` with ExecuTorch under ``rules`` and read the copies it inserted.

    Args:
        model, example_inputs: as for ``torch.export.export``.
        rules: ``{device: [op patterns]}`` as ``workbench.place`` takes them.
        skip_h2d, skip_d2h: ExecuTorch's ``skip_h2d_for_method_inputs`` /
            ``skip_d2h_for_method_outputs``, paired (as its docs ask) with not planning
            graph inputs / outputs.

    Raises ``ExecuTorchNotInstalled`` without executorch, ``PlacementError`` for malformed
    rules; an ExecuTorch refusal or crash is returned in ``.error``.
    """
    return executorch_copies_for(model, example_inputs, rules, ((skip_h2d, skip_d2h),))[0]


def executorch_copies_for(
    model: torch.nn.Module,
    example_inputs: tuple,
    rules: Mapping[str, Sequence[str] | str],
    settings: Sequence[tuple[bool, bool]] = FLAG_SETTINGS,
) -> tuple[ExecuTorchCopies, ...]:
    """``executorch_copies`` for each ``(skip_h2d, skip_d2h)`` in ``settings``.

    The flags act only in ``to_executorch``, so the model is exported, converted to edge
    and partitioned once; each setting finishes its own deep copy of that program.
    """
    parse_edge_rules(rules)  # bad rules fail here, before ExecuTorch is imported
    settings = check_settings(settings)
    partitioner = rule_partitioner(rules)

    def read(program: Any, _config: Any) -> ExecuTorchCopies:
        graph = program.exported_program().graph_module.graph
        return ExecuTorchCopies(_read_copies(graph), partitioner.delegates)

    def failed(exc: BaseException, stage: str, _config: Any) -> ExecuTorchCopies:
        error, detail = error_text(exc)
        return ExecuTorchCopies((), partitioner.delegates, error, stage, detail)

    return tuple(lower(model, example_inputs, partitioner, settings, read, failed))


def _read_copies(graph: torch.fx.Graph) -> tuple[ETCopy, ...]:
    copies = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        kind = ET_COPY_KINDS.get(short_op_name(node))
        if kind is None:
            continue
        source = node.args[0] if node.args else None
        value = source.name if isinstance(source, torch.fx.Node) else str(source)
        copies.append(ETCopy(node.name, kind, value, _et_nbytes(node)))
    return tuple(copies)


def _et_nbytes(node: torch.fx.Node) -> int | None:
    spec = node.meta.get("spec")
    if spec is not None and hasattr(spec, "nbytes"):
        return int(spec.nbytes())
    val = value_of(node)
    return tensor_nbytes(val) if isinstance(val, torch.Tensor) else None


def compare_copies(
    model: torch.nn.Module,
    example_inputs: tuple,
    rules: Mapping[str, Sequence[str] | str],
    skip_h2d: bool = False,
    skip_d2h: bool = False,
    *,
    name: str | None = None,
) -> CopyComparison:
    """Place ``model`` by ``rules`` in both systems and compare the copies they insert.

    The workbench side: ``capture(decompose=True)`` → ``place`` → ``propagate`` with the
    same flags, and a run of the propagated graph against eager PyTorch. The ExecuTorch
    side: ``executorch_copies``.
    """
    return compare_settings(model, example_inputs, rules, ((skip_h2d, skip_d2h),), name=name)[0]


def compare_settings(
    model: torch.nn.Module,
    example_inputs: tuple,
    rules: Mapping[str, Sequence[str] | str],
    settings: Sequence[tuple[bool, bool]] = FLAG_SETTINGS,
    *,
    name: str | None = None,
) -> tuple[CopyComparison, ...]:
    """``compare_copies`` for each ``(skip_h2d, skip_d2h)`` in ``settings`` (all four by default)."""
    parsed = parse_edge_rules(rules)  # refuse bad rules before either side runs
    settings = check_settings(settings)
    inputs = as_input_tuple(example_inputs)
    executorch_api()  # fail fast, before the workbench side, when executorch is missing
    program = capture(model, inputs, decompose=True)
    placement = place(program, rules)
    with torch.no_grad():
        eager = model(*inputs)
    et_results = executorch_copies_for(model, inputs, rules, settings)
    delegates = delegate_ops(placement)
    rows = []
    for (skip_h2d, skip_d2h), et_result in zip(settings, et_results):
        dg = propagate(
            placement,
            skip_h2d_for_method_inputs=skip_h2d,
            skip_d2h_for_method_outputs=skip_d2h,
        )
        with torch.no_grad():
            equal = _outputs_equal(dg.module()(*inputs), eager)
        rows.append(
            CopyComparison(
                model=name or type(model).__name__,
                rules=freeze_rules(parsed),
                skip_h2d=skip_h2d,
                skip_d2h=skip_d2h,
                wb_counts=dg.copy_counts(),
                wb_bytes=dg.copy_bytes(),
                wb_resident_bytes=dict(dg.constant_bytes),
                wb_delegates=delegates,
                wb_equals_eager=equal,
                et=et_result,
            )
        )
    return tuple(rows)


def compare_case(case: Case, settings: Sequence[tuple[bool, bool]] = FLAG_SETTINGS) -> tuple[CopyComparison, ...]:
    """``compare_settings`` on one of ``workbench.compare.COPY_CASES``."""
    if not isinstance(case, Case):
        raise CrossCheckTypeError(
            f"compare_case takes a workbench.compare.Case (see COPY_CASES), got {type(case).__name__}"
        )
    if not case.rules:
        raise CrossCheckInputError(
            f"case {case.name!r} places nothing on a device, so there are no copies to compare; "
            f"the copy cases are {', '.join(c.name for c in COPY_CASES)}"
        )
    return compare_settings(case.model(), case.example_inputs(), case.rules, settings, name=case.name)


def comparison_table(cases: Iterable[CopyComparison]) -> pd.DataFrame:
    """One row per comparison (see ``CopyComparison.row`` for the columns)."""
    rows = []
    for item in cases:
        if not isinstance(item, CopyComparison):
            raise CrossCheckTypeError(
                f"comparison_table takes CopyComparison results (from compare_copies or "
                f"compare_case), got {type(item).__name__}"
            )
        rows.append(item.row())
    return pd.DataFrame(rows)


def _outputs_equal(got: Any, want: Any) -> bool:
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    if got_spec != want_spec:
        return False
    for g, w in zip(got_leaves, want_leaves):
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor) or g.shape != w.shape:
                return False
            # the decomposed graph (addmm for linear) may round differently from eager
            if not torch.allclose(g, w, rtol=1e-5, atol=1e-6):
                return False
        elif g != w:
            return False
    return True
