"""The device graph: a program whose every value has a device, with copies as graph nodes.

``propagate`` makes a ``DeviceGraph``; every later stage reads it. Its copy table holds
one ``CopyRecord`` per copy node (what it moves, from where to where, which copy variant
it is and why it exists); ``to_json`` / ``from_json`` write and read it as plan files
keep it, ``module()`` and ``exported_program()`` run and export its graph as plain
PyTorch, and the data frames show it as tables. ``mutations`` lists what the program
writes besides its outputs: its buffers (state) and, rarely, its inputs. ``capture``
functionalizes such writes (``capture`` rule 2), so they are in the signature: each
``BUFFER_MUTATION`` output is the new value of a buffer, each ``USER_INPUT_MUTATION``
output the new value of a user input; every stage that runs a program applies them after
the call, as eager PyTorch would have written them in place.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping, Optional

import pandas as pd
import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, OutputKind, OutputSpec

from .capture import Program
from .copy_variants import CopyVariantError, copy_variant
from .devices import CopyKind, Device, DeviceError, host_first
from .errors import WorkbenchError
from .expert_ops import Routing
from .graph_values import node_nbytes, op_name, value_of
from .json_fields import JsonFieldError, JsonObject
from .node_facts import facts_to_json, restore_facts
from .place import Placement

__all__ = ["CopyRecord", "CopyRole", "DeviceGraph", "Mutation", "MutationError", "mutations", "node_role"]


class CopyRole(str, Enum):
    """The roles of the copy variants the workbench ships (``copy_variants``); a record's
    role may also be that of a variant registered elsewhere.

    ``plain`` moves a whole value; ``gather`` moves the rows of a streamed weight that an
    index selects, one per id; ``prefetch`` moves the rows a hint predicts, ahead of time;
    ``reuse`` moves the selected rows, taking those its prefetch holds from the device;
    the counted copy (``moe.streaming``) moves the rows its index lists, padded to a static
    length, of which its ``count`` (a device value) says how many are real: only those
    cross the link (the padding rows are zeros).
    """

    PLAIN = "plain"
    GATHER = "gather"
    PREFETCH = "prefetch"
    REUSE = "reuse"
    COUNTED = "routed"  # the name plan files store
    ROUTED = "routed"  # COUNTED under its earlier name (the same member)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class CopyRecord:
    """One copy node: what it moves, from where to where, and why.

    The copy table: later stages (memory planning, the executor, the views) read a copy's
    facts from its record, never from the positions of its graph node's arguments.
    """

    name: str  # the copy node's name in DeviceGraph.graph
    kind: CopyKind  # h2d | d2h | d2d
    value: str  # name of the node whose value (or rows, for gathers) is copied
    src: Device  # where the value lives
    dst: Device  # where the consumers need it
    nbytes: int  # bytes moved per call: an upper bound for dynamic sizes (example size if unbounded), reuse and counted copies
    consumers: tuple[str, ...]  # nodes reading the copy ("output" for a returned value)
    reason: str  # one sentence: who needs it where, and where it lives
    role: str = CopyRole.PLAIN  # the role of its copy variant (``copy_variants``): plain, gather, prefetch, reuse …
    index: Optional[str] = None  # copies of rows: the node holding the row ids
    prefetch: Optional[str] = None  # reuse: the prefetch copy whose rows it may take
    prefetch_index: Optional[str] = None  # reuse: the row ids that prefetch holds
    count: Optional[str] = None  # counted copies: the node holding how many of the index's rows are real
    routing: Optional[Routing] = None  # counted copies: how the index was drawn (T draws of k of E rows), if known
    slots: int = 0  # counted copies: rows of its result (U: the real ones, then padding); nbytes covers them all

    @property
    def is_gather(self) -> bool:
        """True for copies that move rows selected by an index (every role but ``plain``)."""
        return self.role != CopyRole.PLAIN

    def expected_nbytes(self) -> float:
        """Bytes a counted copy is expected to move per call when its index is drawn
        uniformly (the expected distinct rows of its ``routing``, at most ``slots``, times
        one row's bytes); ``nbytes`` for every other copy, and for one whose draws are unknown."""
        if self.role != CopyRole.COUNTED or self.routing is None or not self.slots:
            return float(self.nbytes)
        return min(float(self.slots), self.routing.expected_distinct()) * (self.nbytes / self.slots)

    def inputs(self) -> tuple[str, ...]:
        """The nodes this copy reads: the value, then its index, prefetch and count inputs."""
        extra = (self.value, self.index, self.prefetch, self.prefetch_index, self.count)
        return tuple(n for n in extra if n is not None)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able data (devices and kinds as strings)."""
        return {
            "name": self.name,
            "kind": str(self.kind),
            "value": self.value,
            "src": str(self.src),
            "dst": str(self.dst),
            "nbytes": self.nbytes,
            "consumers": list(self.consumers),
            "reason": self.reason,
            "role": str(self.role),
            "index": self.index,
            "prefetch": self.prefetch,
            "prefetch_index": self.prefetch_index,
            "count": self.count,
            "routing": self.routing.to_json() if self.routing is not None else None,
            "slots": self.slots,
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "copy") -> "CopyRecord":
        """The record ``to_json`` wrote; a missing or mistyped field is a ``JsonFieldError``
        naming it. The counted-copy fields (``count``, ``routing``, ``slots``) may be absent:
        records written before counted copies existed have none."""
        obj = JsonObject(data, path)
        try:
            kind, role = CopyKind.parse(obj.text("kind")), _role(obj.text("role"))
            routing = obj.data.get("routing")
            drawn = Routing.from_json(routing, f"{path}.routing") if routing is not None else None
        except (ValueError, DeviceError, CopyVariantError) as exc:
            raise JsonFieldError(f"{path}: {exc}") from None
        has = obj.data.__contains__
        return cls(
            name=obj.text("name"),
            kind=kind,
            value=obj.text("value"),
            src=obj.device("src"),
            dst=obj.device("dst"),
            nbytes=obj.count("nbytes"),
            consumers=obj.texts("consumers"),
            reason=obj.text("reason"),
            role=role,
            index=obj.optional_text("index"),
            prefetch=obj.optional_text("prefetch"),
            prefetch_index=obj.optional_text("prefetch_index"),
            count=obj.optional_text("count") if has("count") else None,
            routing=drawn,
            slots=obj.count("slots") if has("slots") else 0,
        )


def _role(text: str) -> str:
    """A record's role as read from a file: a ``CopyRole`` for the built-in variants, else
    the role of a registered variant (an unknown role is a ``CopyVariantError``)."""
    try:
        return CopyRole(text)
    except ValueError:
        pass
    try:
        return copy_variant(text).role
    except CopyVariantError as exc:
        raise CopyVariantError(f"{text!r} is not a valid CopyRole; {exc}") from None


@dataclass(frozen=True, eq=False)
class DeviceGraph:
    """A program whose every value has a device, with copies as graph nodes."""

    placement: Placement
    graph: torch.fx.Graph  # the propagated graph (placeholders as in the exported program)
    node_device: Mapping[str, Device]  # every placeholder and call_function node → its device
    copies: tuple[CopyRecord, ...]  # the copy table, in the graph's (issue) order
    residency: Mapping[str, tuple[Device, ...]]  # constant placeholder → devices holding it
    input_devices: Mapping[str, Device]  # user input → the device the caller supplies it on
    user_outputs: tuple[str, ...]  # nodes returned to the caller, in order
    output_specs: tuple[OutputSpec, ...]  # the exported signature's outputs, renamed
    skip_h2d_for_method_inputs: bool
    skip_d2h_for_method_outputs: bool

    def __post_init__(self) -> None:
        # The tables are read-only views: a stage that changes the graph makes a new DeviceGraph.
        for name in ("node_device", "residency", "input_devices"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def program(self) -> Program:
        return self.placement.program

    @property
    def output_devices(self) -> tuple[Device, ...]:
        """The device of each user output as returned."""
        return tuple(self.node_device[n] for n in self.user_outputs)

    @property
    def devices(self) -> tuple[Device, ...]:
        """Every device that holds a value or a constant, host first."""
        devs = set(self.node_device.values())
        for held in self.residency.values():
            devs.update(held)
        return tuple(host_first(devs))

    @cached_property
    def copy_table(self) -> Mapping[str, CopyRecord]:
        """Copy node name → its ``CopyRecord``: how every later stage recognises a copy."""
        return {c.name: c for c in self.copies}

    @cached_property
    def order(self) -> Mapping[str, int]:
        """Node name → its position in the graph, which is the order nodes are issued in."""
        return {node.name: i for i, node in enumerate(self.graph.nodes)}

    @cached_property
    def constant_bytes(self) -> dict[Device, int]:
        """Bytes of parameters, buffers and constants resident on each device."""
        out: dict[Device, int] = {d: 0 for d in self.devices}
        nodes = {n.name: n for n in self.graph.nodes if n.op == "placeholder"}
        for name, held in self.residency.items():
            nbytes = node_nbytes(nodes[name], unbounded="hint")
            for device in held:
                out[device] += nbytes
        return out

    def copy_counts(self) -> dict[str, int]:
        """Number of copies per kind (every kind present)."""
        counts: dict[str, int] = dict.fromkeys(CopyKind, 0)
        for c in self.copies:
            counts[c.kind] += 1
        return counts

    def copy_bytes(self) -> dict[str, int]:
        """Bytes moved per call, per copy kind (every kind present)."""
        moved: dict[str, int] = dict.fromkeys(CopyKind, 0)
        for c in self.copies:
            moved[c.kind] += c.nbytes
        return moved

    def copies_dataframe(self) -> pd.DataFrame:
        """One row per copy."""
        columns = ["name", "kind", "role", "value", "src", "dst", "nbytes", "consumers", "reason"]
        rows = [{**c.to_json(), "consumers": ", ".join(c.consumers)} for c in self.copies]
        return pd.DataFrame(rows, columns=columns)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per node: name, op, role, device, delegate, shape, dtype, nbytes."""
        rows = []
        delegates = self.placement.node_delegate
        for node in self.graph.nodes:
            if node.op == "output":
                continue
            val = value_of(node)
            rows.append(
                {
                    "node": node.name,
                    "op": op_name(node),
                    "role": node_role(self, node),
                    "device": str(self.node_device[node.name]),
                    "delegate": delegates.get(node.name),
                    "shape": tuple(val.shape) if isinstance(val, torch.Tensor) else None,
                    "dtype": str(val.dtype).removeprefix("torch.") if isinstance(val, torch.Tensor) else None,
                    "nbytes": node_nbytes(node, unbounded="hint"),
                }
            )
        return pd.DataFrame(rows)

    def to_json(self) -> dict[str, Any]:
        """Devices, copies, node facts, residency and flags as JSON data; the graph itself
        is saved as the propagated program (``exported_program``), which keeps no custom
        ``node.meta``, so the facts of ``node_facts`` are a table of their own."""
        return {
            "node_device": {k: str(v) for k, v in self.node_device.items()},
            "copies": [c.to_json() for c in self.copies],
            "node_facts": facts_to_json(self.graph),
            "residency": {k: [str(d) for d in v] for k, v in self.residency.items()},
            "input_devices": {k: str(v) for k, v in self.input_devices.items()},
            "user_outputs": list(self.user_outputs),
            "skip_h2d_for_method_inputs": self.skip_h2d_for_method_inputs,
            "skip_d2h_for_method_outputs": self.skip_d2h_for_method_outputs,
        }

    @classmethod
    def from_json(
        cls, data: Any, placement: Placement, propagated: ExportedProgram, path: str = "device_graph"
    ) -> "DeviceGraph":
        """The device graph ``to_json`` described, over the graph of ``propagated`` (the
        saved ``exported_program``), its nodes given back their ``node_facts`` (absent
        from files written before the table existed: none); a bad field is a
        ``JsonFieldError`` naming it."""
        obj = JsonObject(data, path)
        graph = propagated.graph_module.graph
        node_device = obj.device_map("node_device")
        names = {n.name for n in graph.nodes}
        missing = sorted(set(node_device) - names)
        if missing:
            raise JsonFieldError(f"{path}.node_device names nodes the saved graph lacks: {missing[:5]}")
        residency_obj = obj.mapping("residency")
        dg = cls(
            placement=placement,
            graph=graph,
            node_device=node_device,
            copies=tuple(CopyRecord.from_json(c.data, c.path) for c in obj.elements("copies")),
            residency={k: residency_obj.devices(k) for k in residency_obj.keys()},
            input_devices=obj.device_map("input_devices"),
            user_outputs=obj.texts("user_outputs"),
            output_specs=tuple(propagated.graph_signature.output_specs),
            skip_h2d_for_method_inputs=obj.flag("skip_h2d_for_method_inputs"),
            skip_d2h_for_method_outputs=obj.flag("skip_d2h_for_method_outputs"),
        )
        if "node_facts" in obj.data:
            restore_facts(graph, obj.raw("node_facts"), f"{path}.node_facts")
        return dg

    def order_of(self, name: str) -> int:
        """Execution index of a node."""
        return self.order[name]

    @cached_property
    def graph_module(self) -> torch.fx.GraphModule:
        """The propagated graph as a GraphModule (same calling convention as the
        exported program's ``graph_module``: constants first, then user inputs)."""
        return torch.fx.GraphModule(self.program.graph_module, self.graph)

    def module(self) -> torch.nn.Module:
        """The propagated graph as a plain module: ``dg.module()(*inputs)`` returns what the
        original model returns, with every copy executed as a real (host) copy."""
        return _PropagatedModule(self)

    def exported_program(self) -> ExportedProgram:
        """The propagated graph as a ``torch.export.ExportedProgram`` (copies included)."""
        ep = self.program.exported
        signature = ExportGraphSignature(
            input_specs=list(ep.graph_signature.input_specs),
            output_specs=list(self.output_specs),
        )
        return ExportedProgram(
            root=self.graph_module,
            graph=self.graph_module.graph,
            graph_signature=signature,
            state_dict=ep.state_dict,
            range_constraints=ep.range_constraints,
            module_call_graph=copy.deepcopy(ep.module_call_graph),
            example_inputs=ep.example_inputs,
            constants=ep.constants,
        )


class _PropagatedModule(torch.nn.Module):
    """Runs a DeviceGraph's graph with the program's constants bound."""

    def __init__(self, dg: DeviceGraph) -> None:
        super().__init__()
        self.gm = dg.graph_module
        ep = dg.program.exported
        self._program = dg.program
        self._out_spec = ep.call_spec.out_spec
        self._constants = {
            name: dg.program.constant_tensor(name) for name in dg.program.constants
        }
        self._names = [spec.arg.name for spec in ep.graph_signature.input_specs]
        self._user_positions = [
            i for i, spec in enumerate(dg.output_specs) if spec.kind == OutputKind.USER_OUTPUT
        ]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        flat_iter = iter(self._program.flatten_inputs(args, kwargs))
        call_args = [
            self._constants[name] if name in self._constants else next(flat_iter)
            for name in self._names
        ]
        out = self.gm(*call_args)
        if not isinstance(out, (tuple, list)):
            out = (out,)
        user = [out[i] for i in self._user_positions]
        return pytree.tree_unflatten(user, self._out_spec)


def node_role(dg: DeviceGraph, node: torch.fx.Node) -> str:
    """What a node is: parameter, buffer, constant, input, copy, output or op."""
    if node.op == "placeholder":
        return dg.program.constant_kinds.get(node.name, "input")
    if node.name in dg.copy_table:
        return "copy"
    if node.name in dg.user_outputs:
        return "output"
    return "op"


class MutationError(WorkbenchError, ValueError):
    """A mutation output that names no buffer or input of its program."""


@dataclass(frozen=True)
class Mutation:
    """One write the program makes to its state or its caller's input."""

    target: str  # the buffer's placeholder (kind "buffer") or the user input's (kind "input")
    value: str  # the node of the device graph holding the new value at the end of a call
    kind: str  # "buffer" | "input"


def mutations(dg: DeviceGraph) -> tuple[Mutation, ...]:
    """Every buffer and user-input mutation of ``dg``'s signature, in output order."""
    program = dg.program
    placeholder_of: Mapping[str, str] = {fqn: name for name, fqn in program.constants.items()}
    found = []
    for spec in dg.output_specs:
        if spec.kind == OutputKind.BUFFER_MUTATION:
            buffer = placeholder_of.get(spec.target or "")
            if buffer is None:
                raise MutationError(f"the program mutates {spec.target!r}, which is not one of its buffers")
            found.append(Mutation(buffer, spec.arg.name, "buffer"))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            if spec.target not in program.user_inputs:
                raise MutationError(f"the program mutates input {spec.target!r}, which is not one of its inputs")
            found.append(Mutation(spec.target, spec.arg.name, "input"))
    return tuple(found)
