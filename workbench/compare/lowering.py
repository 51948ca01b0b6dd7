"""ExecuTorch's device pipeline, run on a model under workbench placement rules.

``torch.export`` → ``to_edge`` → ``to_backend`` with ``rule_partitioner`` → ``to_executorch``
with non-CPU memory planning and ``PropagateDeviceConfig``: the one lowering every
cross-check and side-by-side of ``workbench.compare`` runs, and the names it reads back
(delegates as the partitioner formed them, ExecuTorch's op names under the workbench's).

Rules:
1. The partitioner matches op patterns by the aten op name (an edge op is matched by the
   aten op it wraps, so ``aten.add`` claims ``aten.add.Tensor`` on both sides) and groups
   same-device ops into delegates with the workbench's own ``place``, so the delegates
   are the workbench's unless the two decompositions differ.
2. One ``DelegationSpec`` per device: the demo ``ExecutorBackend`` (it accepts any
   subgraph) with ``CompileSpec("target_device", b"<device>")``.
3. The model is exported, converted to edge and partitioned once; each flag setting
   finishes its own deep copy of that program with ``to_executorch``, graph inputs /
   outputs planned unless the matching skip flag hands them to the caller.
4. A model ``torch.export`` cannot capture and a failure of the workbench's own code
   inside the partitioner raise; anything ExecuTorch raises after export is a result,
   handed to the caller's ``failed`` with the stage that raised.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

import torch

from ..graph_values import packet_name, wrapped_overload
from ..capture import Program
from ..executorch.dependency import executorch_api, quiet_executorch
from ..place import Placement, place
from .settings import as_input_tuple, parse_edge_rules

__all__ = [
    "ET_COPY_KINDS",
    "TARGET_DEVICE_KEY",
    "DelegateOps",
    "backend_config",
    "delegate_ops",
    "error_text",
    "lower",
    "rule_partitioner",
    "short_op_name",
]

#: Name of the CompileSpec key ExecuTorch's PropagateDevicePass reads a delegate's device from.
TARGET_DEVICE_KEY = "target_device"

#: ExecuTorch's names for ops the workbench names otherwise.
_ET_OP_ALIASES = {
    "_h2d_copy": "h2d_copy",
    "_d2h_copy": "d2h_copy",
    "_clone_dim_order": "clone",
    "_to_dim_order_copy": "_to_copy",
}

#: The kind of each ExecuTorch copy op, by ``short_op_name``.
ET_COPY_KINDS: Mapping[str, str] = {"h2d_copy": "h2d", "d2h_copy": "d2h"}

Result = TypeVar("Result")


@dataclass(frozen=True)
class DelegateOps:
    """One delegate as a partitioner formed it: its device and the aten ops inside."""

    device: str
    ops: tuple[str, ...]  # aten op names without overload, in graph order

    def signature(self) -> tuple[str, tuple[str, ...]]:
        """Device and ops with view-copy variants folded (edge ``permute_copy`` = ``permute``)."""
        # to_edge replaces view ops by their "_copy" variants (permute → permute_copy)
        return self.device, tuple(op.removesuffix("_copy") for op in self.ops)


def delegate_ops(placement: Placement) -> tuple[DelegateOps, ...]:
    """The delegates of a placement as ``DelegateOps`` (getitems and the like left out)."""
    nodes = {n.name: n for n in placement.program.graph.nodes}
    out = []
    for d in placement.delegates:
        ops = tuple(packet_name(nodes[name]) for name in d.nodes if wrapped_overload(nodes[name].target) is not None)
        out.append(DelegateOps(str(d.device), ops))
    return tuple(out)


def rule_partitioner(rules: Mapping[str, Sequence[str] | str]) -> Any:
    """An ExecuTorch ``Partitioner`` that delegates what ``workbench.place(rules)`` would.

    Each delegate the workbench's ``place`` forms on the edge program becomes one tagged
    partition; all partitions of a device share that device's ``DelegationSpec``
    (rules 1, 2). After ``partition`` ran, ``.delegates`` lists them as ``DelegateOps``.
    """
    return _partitioner_class()(rules)


def _partitioner_class() -> type:
    et = executorch_api()

    class RulePartitioner(et.Partitioner):  # type: ignore[name-defined]
        """Delegates the ops a workbench rule mapping places, one spec per device."""

        def __init__(self, rules: Mapping[str, Sequence[str] | str]) -> None:
            super().__init__()
            parse_edge_rules(rules)  # refuse what cannot be cross-checked before lowering
            self.rules = rules
            self.delegates: tuple[DelegateOps, ...] = ()
            self.failure: Exception | None = None  # raised by our own code, not ExecuTorch's

        def partition(self, exported_program: Any) -> Any:
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
            self.delegates = delegate_ops(placement)
            return et.PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    return RulePartitioner


def backend_config(skip_h2d: bool = False, skip_d2h: bool = False) -> Any:
    """``to_executorch``'s config for one flag setting: non-CPU memory planning on, the
    skip flags paired (as ``PropagateDeviceConfig``'s docs ask) with not planning the
    graph inputs / outputs the caller then owns (rule 3)."""
    et = executorch_api()
    return et.ExecutorchBackendConfig(
        enable_non_cpu_memory_planning=True,
        propagate_device_config=et.PropagateDeviceConfig(
            skip_h2d_for_method_inputs=skip_h2d,
            skip_d2h_for_method_outputs=skip_d2h,
        ),
        memory_planning_pass=et.MemoryPlanningPass(alloc_graph_input=not skip_h2d, alloc_graph_output=not skip_d2h),
    )


def lower(
    model: torch.nn.Module,
    example_inputs: Any,
    partitioner: Any,
    settings: Sequence[tuple[bool, bool]],
    read: Callable[[Any, Any], Result],
    failed: Callable[[BaseException, str, Any], Result],
) -> list[Result]:
    """ExecuTorch's pipeline: ``torch.export`` → ``to_edge`` → ``to_backend(partitioner)``
    (skipped when None) once, then ``to_executorch`` per ``(skip_h2d, skip_d2h)`` (rule 3).

    Each setting gives ``read(program, config)`` with the ``ExecutorchProgramManager``, or
    ``failed(exc, stage, config)`` when ExecuTorch raised (every setting fails alike when
    ``to_edge`` or ``to_backend`` did); a failure of the workbench's own code inside the
    partitioner is raised instead (rule 4).
    """
    et = executorch_api()
    configs = [backend_config(skip_h2d, skip_d2h) for skip_h2d, skip_d2h in settings]
    exported = torch.export.export(model, as_input_tuple(example_inputs))
    stage = "to_edge"
    with quiet_executorch():  # ExecuTorch's deprecation chatter is not part of the result
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


def error_text(exc: BaseException) -> tuple[str, str]:
    """``("<exception type>: <first line>", whole message)``: InternalError appends a dump
    of the whole graph; its first line is the message."""
    text = str(exc).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}", text


def short_op_name(node: torch.fx.Node) -> str:
    """An op's name without namespace or overload (``aten.addmm.out`` → ``addmm``; an edge
    op is named by the aten op it wraps), ExecuTorch's under the workbench's names."""
    name = packet_name(node).rsplit(".", 1)[-1]
    return _ET_OP_ALIASES.get(name, name)
