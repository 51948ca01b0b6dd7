"""Side-by-side: the workbench's copies vs ExecuTorch's ``PropagateDevicePass``.

For one model, one placement (``{device: [op patterns]}``) and one setting of the two skip
flags, both systems place the same ops on the same devices and insert their copies; the
result says how many of each kind each inserted and how many bytes they move per call, or
what ExecuTorch said when it refused or crashed.

The ExecuTorch side runs its own pipeline: ``torch.export`` → ``to_edge`` →
``to_backend`` with ``RulePartitioner`` → ``to_executorch`` with non-CPU memory planning,
and reads the copy nodes off the final graph. ``executorch`` is optional: it is imported
inside the functions, and a missing package raises ``ExecuTorchNotInstalled``.

Rules:
1. Both sides match op patterns by the aten op name (an edge op is matched by the aten op
   it wraps, so ``aten.add`` claims ``aten.add.Tensor`` on both) and group same-device ops
   into delegates with the workbench's own ``place``, so the delegates are the same
   unless the two decompositions differ; ``CopyComparison.same_delegates`` checks it.
2. ``node:`` patterns are refused: node names differ between the two graphs.
3. One ``DelegationSpec`` per device: the demo ``ExecutorBackend`` (it accepts any
   subgraph) with ``CompileSpec("target_device", b"<device>")``.
4. Malformed rules, a model ``torch.export`` cannot capture and a failure of the
   workbench's own code inside the partitioner raise; anything ExecuTorch raises after
   export is a result (``ExecuTorchCopies.error``), not an exception.
5. Counts and bytes cover copies inserted per call; parameters the workbench keeps resident
   are reported by ``DeviceGraph.constant_bytes``, not here.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd
import torch
import torch.utils._pytree as pytree

from ..capture import Program, capture
from ..graph_values import wrapped_overload, packet_name, tensor_nbytes, value_of
from ..place import Placement, PlacementError, parse_rules, place
from ..propagate import propagate
from .models import Case
from ..errors import WorkbenchError

__all__ = [
    "INSTALL_HINT",
    "FLAG_LABELS",
    "FLAG_SETTINGS",
    "CopyComparison",
    "DelegateOps",
    "ETCopy",
    "ExecuTorchCopies",
    "ExecuTorchNotInstalled",
    "compare_case",
    "compare_copies",
    "compare_settings",
    "comparison_table",
    "executorch_available",
    "executorch_copies",
    "executorch_copies_for",
    "rule_partitioner",
]

INSTALL_HINT = "pip install executorch==1.5.1"

#: Every (skip_h2d, skip_d2h) setting, in the order tables show them, with its short label.
FLAG_LABELS: Mapping[tuple[bool, bool], str] = {
    (False, False): "none",
    (True, False): "skip-h2d",
    (False, True): "skip-d2h",
    (True, True): "both",
}
FLAG_SETTINGS: tuple[tuple[bool, bool], ...] = tuple(FLAG_LABELS)

#: Name of the CompileSpec key ExecuTorch's PropagateDevicePass reads a delegate's device from.
TARGET_DEVICE_KEY = "target_device"

# The demo backend that lowers any subgraph; a test-tree path, so the likeliest to move
# between ExecuTorch versions.
_BACKEND_MODULE = "executorch.exir.backend.test.demos.rpc.executor_backend_preprocess"


class ExecuTorchNotInstalled(WorkbenchError, ImportError):
    """The optional ``executorch`` package is not importable."""


def executorch_available() -> bool:
    """True when ``executorch`` (with its exir compiler) can be imported."""
    try:
        _et()
    except ExecuTorchNotInstalled:
        return False
    return True


# Loggers that report optional native kernels missing on a CPU-only machine and a torch
# deprecation while ExecuTorch imports: noise around the cross-check, never its result.
_NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def _quiet(names: Sequence[str] = ()):
    """Ignore warnings, and log only errors on the loggers ``names``, inside the block."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@functools.cache
def _et() -> Any:
    """The ExecuTorch names this module uses, imported once, on first use."""
    try:
        import importlib

        with _quiet(_NOISY_LOGGERS):
            import executorch.exir  # noqa: F401 - the first import is where the noise is

        from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
        from executorch.exir.backend.compile_spec_schema import CompileSpec
        from executorch.exir.backend.partitioner import (
            DelegationSpec,
            Partitioner,
            PartitionResult,
        )
        from executorch.exir.passes import MemoryPlanningPass
        from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig

        backend = importlib.import_module(_BACKEND_MODULE).ExecutorBackend
    except ImportError as exc:
        raise ExecuTorchNotInstalled(
            f"the ExecuTorch cross-check needs the optional package executorch "
            f"({type(exc).__name__}: {exc}); install it with: {INSTALL_HINT}"
        ) from exc
    return types.SimpleNamespace(
        EdgeCompileConfig=EdgeCompileConfig,
        ExecutorchBackendConfig=ExecutorchBackendConfig,
        to_edge=to_edge,
        CompileSpec=CompileSpec,
        DelegationSpec=DelegationSpec,
        Partitioner=Partitioner,
        PartitionResult=PartitionResult,
        MemoryPlanningPass=MemoryPlanningPass,
        PropagateDeviceConfig=PropagateDeviceConfig,
        ExecutorBackend=backend,
    )


# --- results -----------------------------------------------------------------------


@dataclass(frozen=True)
class DelegateOps:
    """One delegate as a partitioner formed it: its device and the aten ops inside."""

    device: str
    ops: tuple[str, ...]  # aten op names without overload, in graph order

    def signature(self) -> tuple[str, tuple[str, ...]]:
        """Device and ops with view-copy variants folded (edge ``permute_copy`` = ``permute``)."""
        return self.device, tuple(_fold_copy_variant(op) for op in self.ops)


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
        if not self.ok or any(c.nbytes is None for c in self.copies):
            return None
        moved = {"h2d": 0, "d2h": 0}
        for c in self.copies:
            moved[c.kind] += c.nbytes
        return moved

    @property
    def total(self) -> int | None:
        return len(self.copies) if self.ok else None


@dataclass(frozen=True)
class CopyComparison:
    """One row of the side-by-side: a case, its placement and flags, both systems' copies."""

    model: str
    rules: tuple[tuple[str, tuple[str, ...]], ...]  # (device, patterns); devices normalized
    skip_h2d: bool
    skip_d2h: bool
    wb_counts: Mapping[str, int]  # {"h2d", "d2h", "d2d"} → copies per call
    wb_bytes: Mapping[str, int]  # same keys → bytes per call
    wb_resident_bytes: Mapping[str, int]  # device → parameter bytes held there (no copy)
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
        return _rules_text(self.rules)

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
            "wb_resident": sum(
                n for dev, n in self.wb_resident_bytes.items() if dev != "cpu"
            ),
            "wb_eager_ok": self.wb_equals_eager,
            "et_h2d": et_counts.get("h2d"),
            "et_d2h": et_counts.get("d2h"),
            "et_copies": self.et_total,
            "et_bytes": self.et_total_bytes,
            "et_error": self.et.error,
        }


# --- the partitioner ---------------------------------------------------------------


def rule_partitioner(rules: Mapping[str, Sequence[str] | str]) -> Any:
    """An ExecuTorch ``Partitioner`` that delegates what ``workbench.place(rules)`` would.

    Each delegate the workbench's ``place`` forms on the edge program becomes one tagged
    partition; all partitions of a device share that device's ``DelegationSpec``. After
    ``partition`` ran, ``.delegates`` lists them as ``DelegateOps``.
    """
    return _partitioner_class()(rules)


@functools.cache
def _partitioner_class() -> type:
    et = _et()

    class RulePartitioner(et.Partitioner):
        """Delegates the ops a workbench rule mapping places, one spec per device."""

        def __init__(self, rules: Mapping[str, Sequence[str] | str]) -> None:
            super().__init__()
            _parse_edge_rules(rules)  # refuse what cannot be cross-checked before lowering
            self.rules = rules
            self.delegates: tuple[DelegateOps, ...] = ()
            self.failure: Exception | None = None  # raised by our own code, not ExecuTorch's

        def partition(self, exported_program):  # noqa: ANN001, ANN201 - ExecuTorch's signature
            try:
                program = Program.from_exported(exported_program, shape_only=False)
                placement = place(program, self.rules)  # edge ops are named like the aten ops they wrap
            except Exception as exc:
                self.failure = exc
                raise
            nodes = {n.name: n for n in exported_program.graph_module.graph.nodes}
            specs, tags = {}, {}
            for delegate in placement.delegates:
                device = str(delegate.device)
                if device not in specs:
                    specs[device] = et.DelegationSpec(
                        et.ExecutorBackend.__name__,
                        [et.CompileSpec(TARGET_DEVICE_KEY, device.encode("utf-8"))],
                    )
                tag = f"wb_{delegate.name}"
                for name in delegate.nodes:
                    nodes[name].meta["delegation_tag"] = tag
                tags[tag] = specs[device]
            self.delegates = _delegate_ops(placement)
            return et.PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    return RulePartitioner


def _parse_edge_rules(rules: Mapping) -> list[tuple[Any, str, str, str]]:
    if not isinstance(rules, Mapping):
        raise PlacementError(
            "the ExecuTorch cross-check takes rules as a mapping {device: [op patterns]}, such as "
            f"{{'cuda:0': ['aten.add']}}; got {type(rules).__name__}"
        )
    parsed = parse_rules(rules)
    for _device, kind, _glob, original in parsed:
        if kind == "node":
            raise PlacementError(
                f"pattern {original!r}: 'node:' patterns cannot be cross-checked, because node "
                "names differ between the workbench's graph and ExecuTorch's edge graph; use op "
                "patterns ('aten.add') or module patterns ('module:layers.*')"
            )
    return parsed


def _delegate_ops(placement: Placement) -> tuple[DelegateOps, ...]:
    nodes = {n.name: n for n in placement.program.graph.nodes}
    out = []
    for d in placement.delegates:
        ops = []
        for name in d.nodes:
            node = nodes[name]
            if wrapped_overload(node.target) is not None:
                ops.append(packet_name(node))
        out.append(DelegateOps(str(d.device), tuple(ops)))
    return tuple(out)


def _fold_copy_variant(op: str) -> str:
    # to_edge replaces view ops by their "_copy" variants (permute → permute_copy)
    return op.removesuffix("_copy")


# --- the two pipelines -------------------------------------------------------------


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
    _parse_edge_rules(rules)  # bad rules fail here, before ExecuTorch is imported
    settings = _check_settings(settings)
    partitioner = rule_partitioner(rules)

    def read(program: Any, _config: Any) -> ExecuTorchCopies:
        graph = program.exported_program().graph_module.graph
        return ExecuTorchCopies(_read_copies(graph), partitioner.delegates)

    def failed(exc: BaseException, stage: str, _config: Any) -> ExecuTorchCopies:
        error, detail = _error_text(exc)
        return ExecuTorchCopies((), partitioner.delegates, error, stage, detail)

    return tuple(_lower(model, example_inputs, partitioner, settings, read, failed))


def _backend_config(et: Any, skip_h2d: bool, skip_d2h: bool) -> Any:
    """``to_executorch``'s config for one flag setting, the same for every cross-check."""
    return et.ExecutorchBackendConfig(
        enable_non_cpu_memory_planning=True,
        propagate_device_config=et.PropagateDeviceConfig(
            skip_h2d_for_method_inputs=skip_h2d,
            skip_d2h_for_method_outputs=skip_d2h,
        ),
        # as PropagateDeviceConfig's docs ask: the caller owns skipped inputs/outputs
        memory_planning_pass=et.MemoryPlanningPass(
            alloc_graph_input=not skip_h2d, alloc_graph_output=not skip_d2h
        ),
    )


def _lower(
    model: torch.nn.Module,
    example_inputs: Any,
    partitioner: Any,
    settings: Sequence[tuple[bool, bool]],
    read: Callable[[Any, Any], Any],
    failed: Callable[[BaseException, str, Any], Any],
) -> list:
    """ExecuTorch's pipeline: ``torch.export`` → ``to_edge`` → ``to_backend(partitioner)``
    (skipped when None) once, then ``to_executorch`` per ``(skip_h2d, skip_d2h)``.

    Each setting gives ``read(program, config)``, or ``failed(exc, stage, config)`` when
    ExecuTorch raised (every setting fails alike when ``to_edge`` or ``to_backend`` did); a
    failure of the workbench's own code inside the partitioner is raised instead.
    """
    et = _et()
    configs = [_backend_config(et, skip_h2d, skip_d2h) for skip_h2d, skip_d2h in settings]
    exported = torch.export.export(model, _as_tuple(example_inputs))
    stage = "to_edge"
    with _quiet():  # ExecuTorch's deprecation chatter is not part of the result
        try:
            program = et.to_edge(exported, compile_config=et.EdgeCompileConfig(_check_ir_validity=False))
            if partitioner is not None:
                stage = "to_backend"
                program = program.to_backend(partitioner)
        except Exception as exc:  # any failure inside ExecuTorch is the answer we report
            if partitioner is not None and partitioner.failure is not None:
                raise partitioner.failure  # the workbench failed, not ExecuTorch
            return [failed(exc, stage, config) for config in configs]
        results = []
        for config in configs:
            lowered = copy.deepcopy(program) if len(configs) > 1 else program
            try:
                final = lowered.to_executorch(config)
            except Exception as exc:  # a refusal or crash of to_executorch is a result
                results.append(failed(exc, "to_executorch", config))
            else:
                results.append(read(final, config))
    return results


def _error_text(exc: BaseException) -> tuple[str, str]:
    """``("<exception type>: <first line>", whole message)``: InternalError appends a dump
    of the whole graph; its first line is the message."""
    text = str(exc).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}", text


#: ExecuTorch's names for ops the workbench names otherwise.
_ET_OP_ALIASES = {
    "_h2d_copy": "h2d_copy",
    "_d2h_copy": "d2h_copy",
    "_clone_dim_order": "clone",
    "_to_dim_order_copy": "_to_copy",
}

#: The kind of each ExecuTorch copy op, by ``_short_op_name``.
_ET_COPY_KINDS = {"h2d_copy": "h2d", "d2h_copy": "d2h"}


def _short_op_name(node: torch.fx.Node) -> str:
    """An op's name without namespace or overload (``aten.addmm.out`` → ``addmm``; an edge
    op is named by the aten op it wraps), ExecuTorch's under the workbench's names."""
    name = packet_name(node).rsplit(".", 1)[-1]
    return _ET_OP_ALIASES.get(name, name)


def _read_copies(graph: torch.fx.Graph) -> tuple[ETCopy, ...]:
    copies = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        kind = _ET_COPY_KINDS.get(_short_op_name(node))
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
    parsed = _parse_edge_rules(rules)  # refuse bad rules before either side runs
    settings = _check_settings(settings)
    inputs = _as_tuple(example_inputs)
    _et()  # fail fast, before the workbench side, when executorch is missing
    program = capture(model, inputs, decompose=True)
    placement = place(program, rules)
    with torch.no_grad():
        eager = model(*inputs)
    et_results = executorch_copies_for(model, inputs, rules, settings)
    delegates = _delegate_ops(placement)
    rows = []
    for (skip_h2d, skip_d2h), et_result in zip(settings, et_results):
        dg = propagate(
            placement, skip_h2d_for_method_inputs=skip_h2d, skip_d2h_for_method_outputs=skip_d2h
        )
        with torch.no_grad():
            equal = _outputs_equal(dg.module()(*inputs), eager)
        rows.append(
            CopyComparison(
                model=name or type(model).__name__,
                rules=_freeze_rules(parsed),
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


def compare_case(
    case: Case, settings: Sequence[tuple[bool, bool]] = FLAG_SETTINGS
) -> tuple[CopyComparison, ...]:
    """``compare_settings`` on one of ``workbench.compare.models.CASES``."""
    if not isinstance(case, Case):
        raise TypeError(
            f"compare_case takes a workbench.compare.models.Case, got {type(case).__name__}"
        )
    return compare_settings(
        case.model(), case.example_inputs(), case.rules, settings, name=case.name
    )


def _check_settings(settings: Any) -> tuple[tuple[bool, bool], ...]:
    out = []
    for item in settings:
        if not (isinstance(item, tuple) and len(item) == 2 and all(isinstance(f, bool) for f in item)):
            raise ValueError(
                f"a flag setting is a pair of bools (skip_h2d, skip_d2h), such as (True, False); "
                f"got {item!r}"
            )
        out.append(item)
    if not out:
        raise ValueError("settings is empty; give at least one (skip_h2d, skip_d2h) pair")
    return tuple(out)


def comparison_table(cases: Iterable[CopyComparison]) -> pd.DataFrame:
    """One row per comparison (see ``CopyComparison.row`` for the columns)."""
    rows = []
    for item in cases:
        if not isinstance(item, CopyComparison):
            raise TypeError(
                f"comparison_table takes CopyComparison results (from compare_copies or "
                f"compare_case), got {type(item).__name__}"
            )
        rows.append(item.row())
    return pd.DataFrame(rows)


def _rules_text(rules: Iterable[tuple[str, Sequence[str]]]) -> str:
    return "; ".join(f"{dev}: {', '.join(pats)}" for dev, pats in rules)


def _freeze_rules(parsed: list) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out: dict[str, list[str]] = {}
    for device, _kind, _glob, original in parsed:
        out.setdefault(str(device), []).append(original)
    return tuple((dev, tuple(pats)) for dev, pats in out.items())


def _as_tuple(example_inputs: Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    raise TypeError(
        f"example_inputs must be a tuple of inputs (or a single tensor), got "
        f"{type(example_inputs).__name__}"
    )


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
