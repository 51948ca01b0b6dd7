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
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

import pandas as pd
import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, OutputKind, OutputSpec

from .capture import Program
from .copy_records import CopyRecord, CopyRole
from .devices import CopyKind, Device, host_first
from .errors import WorkbenchError
from .graph_values import node_nbytes, op_name, value_of
from .json_fields import JsonFieldError, JsonObject
from .node_facts import FACTS_KEY, FactView, NodeFactError, facts_of, records_from_json, records_to_json, with_placement
from .place import Placement

__all__ = ["CopyRecord", "CopyRole", "DeviceGraph", "DeviceGraphError", "Mutation", "MutationError", "mutations", "node_role"]


#: Graphs whose node records a DeviceGraph has written: one that another DeviceGraph
#: would record other facts on is copied first, so neither changes under the other.
_RECORDED: "weakref.WeakKeyDictionary[torch.fx.Graph, bool]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True, eq=False)
class DeviceGraph:
    """A program whose every value has a device, with copies as graph nodes.

    Each node's placement facts are one record with the rest of its facts
    (``node_facts`` rule 7): made from the tables it is given, they are written on the
    graph's nodes, and ``node_device``, ``copies``, ``residency`` and ``input_devices``
    then read them back as read-only views (``copies`` in graph order). Given a graph
    that another device graph recorded other facts on, it records on a copy of it.
    """

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
        # The tables become read-only views of the records: a stage that changes the graph
        # makes a new DeviceGraph.
        graph = self.graph
        try:
            records = with_placement(graph, self.node_device, self.copies, self.residency, self.input_devices)
        except NodeFactError as exc:
            raise DeviceGraphError(str(exc)) from None
        if graph in _RECORDED and any(facts_of(node) != facts for node, facts in records.items()):
            graph, env = _copied(graph)
            records = {env[node]: facts for node, facts in records.items()}
        for node, facts in records.items():
            node.meta[FACTS_KEY] = facts
        _RECORDED[graph] = True
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "node_device", FactView[Device](graph, "device"))
        object.__setattr__(self, "residency", FactView[tuple[Device, ...]](graph, "resident"))
        object.__setattr__(self, "input_devices", FactView[Device](graph, "input_device"))
        copies = (facts_of(node).copy for node in graph.nodes)
        object.__setattr__(self, "copies", tuple(c for c in copies if c is not None))

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
        """The node records (``node_facts.records_to_json``: devices, copies, facts,
        residency, input devices) and the flags as JSON data; the graph itself is saved as
        the propagated program (``exported_program``), which keeps no custom ``node.meta``."""
        return {
            **records_to_json(self.graph),
            "user_outputs": list(self.user_outputs),
            "skip_h2d_for_method_inputs": self.skip_h2d_for_method_inputs,
            "skip_d2h_for_method_outputs": self.skip_d2h_for_method_outputs,
        }

    @classmethod
    def from_json(
        cls, data: Any, placement: Placement, propagated: ExportedProgram, path: str = "device_graph"
    ) -> "DeviceGraph":
        """The device graph ``to_json`` described, over the graph of ``propagated`` (the
        saved ``exported_program``), its nodes given back their records; a bad field is a
        ``JsonFieldError`` naming it."""
        obj = JsonObject(data, path)
        graph = propagated.graph_module.graph
        tables = records_from_json(graph, obj)
        try:
            return cls(
                placement=placement,
                graph=graph,
                node_device=tables.node_device,
                copies=tables.copies,
                residency=tables.residency,
                input_devices=tables.input_devices,
                user_outputs=obj.texts("user_outputs"),
                output_specs=tuple(propagated.graph_signature.output_specs),
                skip_h2d_for_method_inputs=obj.flag("skip_h2d_for_method_inputs"),
                skip_d2h_for_method_outputs=obj.flag("skip_d2h_for_method_outputs"),
            )
        except DeviceGraphError as exc:
            raise JsonFieldError(f"{path}: {exc}") from None

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


def _copied(graph: torch.fx.Graph) -> tuple[torch.fx.Graph, dict[torch.fx.Node, torch.fx.Node]]:
    """A copy of ``graph`` (same node names, meta copied) and the map old node → new."""
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph.nodes:
        env[node] = new.node_copy(node, env.__getitem__)
    return new, env


class DeviceGraphError(WorkbenchError, ValueError):
    """Tables of a device graph that name no node of its graph, or a copy node twice."""


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
