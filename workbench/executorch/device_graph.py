"""An imported ExecuTorch program as a real ``DeviceGraph``: every view and export works on it.

``to_device_graph(program)`` builds the fx graph the workbench's stages read: one node per
ExecuTorch call, with ``meta["val"]`` meta tensors of exactly ExecuTorch's shapes and
dtypes, the copies as the workbench's copy ops with a ``CopyRecord`` each, the delegates
as the placement's delegates, and every value on the device ExecuTorch gave it.

Rules:
1. Placeholders: the program's constants, then its inputs, then its state (a mutable
   buffer read before any call writes it), each named as in ``ExecuTorchProgram``.
2. A kernel whose operator torch knows becomes its functional overload
   (``aten::addmm.out`` → ``aten.addmm.default``) over the same arguments (a factory's
   ``dtype`` from ExecuTorch's output, its ``device`` left to the caller), when that
   reproduces ExecuTorch's output shapes on meta tensors; any other kernel, and every
   delegate, becomes ``workbench::executorch_call(_one)`` carrying its output shapes.
3. An ``et_copy`` becomes ``workbench::h2d_copy`` / ``d2h_copy`` of the value it reads,
   with a ``CopyRecord`` saying which ExecuTorch instruction it is.
4. A view ExecuTorch elided is an ``aten.view`` of its base, placed before its first reader.
5. Several outputs of one call are read through ``getitem`` nodes named like the tensors.
6. Each delegate call is a one-node delegate of the placement on its device; kernels run
   on the host; a value lives where ExecuTorch planned it. The skip flags are read off the
   program: inputs supplied on a device, outputs returned on one.
7. The graph is wrapped in a ``torch.export.ExportedProgram`` (default verifier), marked
   shape-only: the program's weights are not loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any, Optional

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)

from ..capture import Program
from ..copy_ops import OP_FOR_KIND
from ..devices import CopyKind, Device
from ..place import Delegate, Placement
from ..propagate import CopyRecord, DeviceGraph
from .errors import UnsupportedProgram
from .operators import argument_count, functional_overload, torch_overload
from .opaque_calls import DTYPES, EXECUTORCH_CALL, EXECUTORCH_CALL_ONE, output_spec
from .program import ExecuTorchProgram, ProgramCall, ProgramTensor, TensorList

__all__ = ["to_device_graph"]


def to_device_graph(program: ExecuTorchProgram) -> DeviceGraph:
    """The imported program as a ``DeviceGraph`` (see the module's rules)."""
    builder = _GraphBuilder(program)
    graph = builder.build()
    exported = _exported(program, graph, builder)
    wrapped = Program(exported, shape_only=True)
    graph = wrapped.graph  # the ExportedProgram's own graph (rule 7)
    node_device = {n.name: builder.device[n.name] for n in graph.nodes if n.op != "output"}
    delegates, node_delegate = [], {}
    for call in program.delegate_calls:
        members = (call.name, *builder.getitems.get(call.name, ()))
        delegates.append(Delegate(call.name, call.device, members))
        node_delegate.update(dict.fromkeys(members, call.name))
    placement = Placement(
        program=wrapped,
        op_device={n.name: node_device[n.name] for n in graph.nodes if n.op == "call_function"},
        delegates=tuple(delegates),
        node_delegate=node_delegate,
        unmatched=(),
    )
    users = {n.name: n.users for n in graph.nodes}
    outputs = tuple(program.tensors[i].name for i in program.outputs if i in program.tensors)
    copies = tuple(
        dataclasses.replace(record, consumers=_consumers(users[record.name], outputs, record.name))
        for record in builder.copies
    )
    inputs = [program.tensors[i] for i in program.inputs if i in program.tensors]
    return DeviceGraph(
        placement=placement,
        graph=graph,
        node_device=node_device,
        copies=copies,
        residency={t.name: (t.device,) for t in program.tensors.values() if t.role in ("constant", "state")},
        input_devices={t.name: t.device for t in inputs},
        user_outputs=outputs,
        output_specs=tuple(exported.graph_signature.output_specs),
        skip_h2d_for_method_inputs=any(not t.device.is_host for t in inputs),
        skip_d2h_for_method_outputs=any(
            not program.tensors[i].device.is_host for i in program.outputs if i in program.tensors
        ),
    )


def _consumers(users: Any, outputs: tuple[str, ...], name: str) -> tuple[str, ...]:
    readers = tuple(u.name for u in users if u.op != "output")
    return readers + (("output",) if name in outputs else ())


def _meta(t: ProgramTensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


class _GraphBuilder:
    """Rules 1-5, one call at a time."""

    def __init__(self, program: ExecuTorchProgram) -> None:
        self.program = program
        self.graph = torch.fx.Graph()
        self.nodes: dict[int, torch.fx.Node] = {}  # value index → the node holding it
        self.device: dict[str, Device] = {}  # node name → the device of its value
        self.getitems: dict[str, tuple[str, ...]] = {}  # call node → its getitem nodes
        self.copies: list[CopyRecord] = []
        self.constants: list[ProgramTensor] = []
        self.inputs: list[ProgramTensor] = []

    def build(self) -> torch.fx.Graph:
        p = self.program
        self.constants = [t for t in p.tensors.values() if t.role in ("constant", "state")]
        self.inputs = [p.tensors[i] for i in p.inputs if i in p.tensors]
        for t in (*self.constants, *self.inputs):  # rule 1
            node = self.graph.placeholder(t.name)
            self._hold(node, t)
        for call in p.calls:
            for index in call.reads:
                self._ensure_view(index)
            self._add(call)
        self.graph.output(tuple(self.nodes[i] for i in p.outputs if i in self.nodes))
        return self.graph

    def _hold(self, node: torch.fx.Node, t: ProgramTensor) -> None:
        if node.name != t.name:  # the plain data and the graph must name a value alike
            raise UnsupportedProgram(f"torch.fx renamed {t.name!r} to {node.name!r}; the import's namer must avoid it")
        node.meta["val"] = _meta(t)
        self.nodes[t.index] = node
        self.device[node.name] = t.device

    def _ensure_view(self, index: int) -> None:
        """Rule 4."""
        t = self.program.tensors[index]
        if index in self.nodes or t.view_of is None:
            return
        self._ensure_view(t.view_of)
        node = self.graph.call_function(
            torch.ops.aten.view.default,
            (self.nodes[t.view_of], list(t.shape)),
            name=t.name,
        )
        self._hold(node, t)

    def _add(self, call: ProgramCall) -> None:
        written = [self.program.tensors[i] for i in call.writes]
        if call.kind == "copy" and len(call.reads) == 1 and len(written) == 1:
            self._copy(call, written[0])
            return
        target, args, kwargs = self._aten(call, written) or self._opaque(call, written)
        node = self.graph.call_function(target, args, kwargs, name=call.name)
        if len(written) == 1 and target is not EXECUTORCH_CALL:
            self._hold(node, written[0])
            return
        node.meta["val"] = tuple(_meta(t) for t in written)
        self.device[node.name] = call.device
        names = []
        for k, t in enumerate(written):  # rule 5
            item = self.graph.call_function(operator.getitem, (node, k), name=t.name)
            self._hold(item, t)
            names.append(item.name)
        self.getitems[node.name] = tuple(names)

    def _copy(self, call: ProgramCall, out: ProgramTensor) -> None:
        """Rule 3."""
        source = self.program.tensors[call.reads[0]]
        kind = CopyKind(call.copy_kind)
        node = self.graph.call_function(
            OP_FOR_KIND[kind],
            (self.nodes[source.index], str(source.device), str(out.device)),
            name=call.name,
        )
        self._hold(node, out)
        self.copies.append(
            CopyRecord(
                name=node.name,
                kind=kind,
                value=self.nodes[source.index].name,
                src=source.device,
                dst=out.device,
                nbytes=out.nbytes,
                consumers=(),
                reason=(
                    f"ExecuTorch's {call.op} (instruction {call.index}) copies {source.name} from "
                    f"{source.device} to {out.device}"
                ),
            )
        )

    def _argument(self, index: int) -> Any:
        if index in self.program.tensors:
            self._ensure_view(index)
            return self.nodes[index]
        value = self.program.scalars.get(index)
        if isinstance(value, TensorList):
            return [self._argument(i) if i >= 0 else None for i in value.items]
        return value

    def _aten(self, call: ProgramCall, written: list[ProgramTensor]) -> Optional[tuple[Any, tuple, dict]]:
        """Rule 2: the functional overload and its arguments, or None."""
        if call.kind != "kernel" or not written or "." not in call.op:
            return None
        name, _, overload = call.op.rpartition(".")
        op = torch_overload(name, overload)
        functional = functional_overload(op) if op is not None else None
        if functional is None or len(call.arguments) < argument_count(op):  # type: ignore[arg-type]
            return None
        args, kwargs = [], {}
        for spec, index in zip(op._schema.arguments, call.arguments):  # type: ignore[union-attr]
            if spec.is_out:
                continue
            if spec.kwarg_only:
                kwargs[spec.name] = self._argument(index)
            else:
                args.append(self._argument(index))
        extra = {a.name for a in functional._schema.arguments if a.kwarg_only} - set(kwargs)
        if "dtype" in extra:  # a factory: ExecuTorch's out tensor says which dtype it made
            kwargs["dtype"] = written[0].dtype
        if "device" in extra:  # explicit, so the cost model runs the factory on meta tensors
            kwargs["device"] = None
        if not _same_outputs(functional, tuple(args), kwargs, tuple((t.shape, t.dtype) for t in written)):
            return None
        return functional, tuple(args), kwargs

    def _opaque(self, call: ProgramCall, written: list[ProgramTensor]) -> tuple[Any, tuple, dict]:
        """Rule 2's fallback: the call with its output shapes as arguments."""
        ranks, sizes, dtypes = output_spec([(t.shape, t.dtype) for t in written if t.dtype in DTYPES])
        target = EXECUTORCH_CALL_ONE if len(written) == 1 else EXECUTORCH_CALL
        label = f"{call.kind} {call.op}" + (f" on {call.device}" if call.kind == "delegate" else "")
        return (
            target,
            ([self.nodes[i] for i in call.reads], label, ranks, sizes, dtypes),
            {},
        )


def _same_outputs(op: Any, args: tuple, kwargs: dict, want: tuple) -> bool:
    """``op`` on meta copies of the arguments returns ``want`` = ((shape, dtype), ...)."""
    spec = _spec((args, kwargs))
    return _outputs_of(op, spec) == want


def _spec(value: Any) -> Any:
    """A hashable stand-in: nodes as (shape, dtype) of their meta value."""
    if isinstance(value, torch.fx.Node):
        val = value.meta["val"]
        return ("T", tuple(val.shape), val.dtype)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_spec(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _spec(v)) for k, v in value.items())))
    return value


def _unspec(spec: Any) -> Any:
    if isinstance(spec, tuple) and spec and spec[0] == "T":
        return torch.empty(spec[1], dtype=spec[2], device="meta")
    if isinstance(spec, tuple) and spec and spec[0] in ("list", "tuple"):
        items = [_unspec(v) for v in spec[1]]
        return items if spec[0] == "list" else tuple(items)
    if isinstance(spec, tuple) and spec and spec[0] == "dict":
        return {k: _unspec(v) for k, v in spec[1]}
    return spec


@functools.lru_cache(maxsize=4096)
def _outputs_of(op: Any, spec: Any) -> Optional[tuple]:
    """Output (shape, dtype)s of ``op`` on meta tensors shaped by ``spec``; None if it fails."""
    args, kwargs = _unspec(spec)
    if "device" in kwargs:  # a factory: make its output on meta, allocating nothing
        kwargs["device"] = torch.device("meta")
    try:
        out = op(*args, **kwargs)
    except Exception:  # no meta kernel, or arguments the functional overload does not take
        return None
    outs = out if isinstance(out, (list, tuple)) else (out,)
    if not all(isinstance(o, torch.Tensor) for o in outs):
        return None
    return tuple((tuple(o.shape), o.dtype) for o in outs)


def _exported(program: ExecuTorchProgram, graph: torch.fx.Graph, builder: _GraphBuilder) -> ExportedProgram:
    """Rule 7: constants as constant tensors (meta), inputs as user inputs."""
    constants: dict[str, Any] = {t.name: _meta(t) for t in builder.constants}
    specs = [
        InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name=t.name), target=t.name) for t in builder.constants
    ]
    specs += [InputSpec(InputKind.USER_INPUT, TensorArgument(name=t.name), target=None) for t in builder.inputs]
    outputs = [
        OutputSpec(
            OutputKind.USER_OUTPUT,
            TensorArgument(name=builder.nodes[i].name),
            target=None,
        )
        for i in program.outputs
        if i in builder.nodes
    ]
    return ExportedProgram(
        root=torch.nn.Module(),  # ExportedProgram makes the one GraphModule over ``graph``
        graph=graph,
        graph_signature=ExportGraphSignature(input_specs=specs, output_specs=outputs),
        state_dict={},
        range_constraints={},
        module_call_graph=[],
        constants=constants,
    )
