"""Device propagation and copy insertion: every value gets a device; crossings get copies.

``propagate(placement)`` turns a placed program into a ``DeviceGraph``: a copy of the
exported graph in which every value has a device and every host↔device or
device↔device crossing is an explicit copy node (``workbench::h2d_copy`` …).

Rules:
1. Ops not placed on a device run on ``cpu`` (``place``'s job).
2. Every value lives on the device of the op that produced it.
3. A consumer on device D of a value on device S ≠ D reads it through a copy:
   ``h2d`` (cpu → D), ``d2h`` (D → cpu) or ``d2d`` (D1 → D2, direct, not via the host).
4. One copy per (value, target device), shared by all consumers there, inserted just
   before the first of them. No value goes to a device and back.
5. Graph inputs are on ``cpu``; with ``skip_h2d_for_method_inputs`` an input whose device
   consumers run on device D is supplied on D, whatever its number of users (when its
   consumers span several devices, the one with most consumers wins and the others read
   it through ``d2d``); its host consumers read it through one ``d2h``.
6. Graph outputs on a device get one ``d2h`` unless ``skip_d2h_for_method_outputs``:
   then they are returned where they were computed.
7. Parameters, buffers and constants are resident on every device that uses them:
   placed once at load, never copied per call; ``constant_bytes`` counts one copy per
   device. A chain of view ops over a constant (``permute(weight)``) is recomputed on each
   device that reads it, so it never causes a copy either. An op that reads only
   metadata (``aten._assert_tensor_metadata``: shapes, dtypes, never data) uses no
   device: it makes a constant resident nowhere and never causes a copy.
8. Copies are real nodes calling ``torch.library`` ops, so the graph still runs as plain
   PyTorch (``DeviceGraph.module()``) and exports (``DeviceGraph.exported_program()``).
9. Every copy records why it exists: which consumers needed which value on which device.
10. Streamed constants (``stream_constants``) stay on the host; a device op reads just
    the rows it selects, copied per call:
    a. ``index_select(w, 0, idx)`` becomes ``gather_h2d_copy(w, idx)`` (the selected
       rows, one per id).
    b. ``select_rows(w, idx, hint)`` becomes a prefetch ``p = gather_h2d_copy(w, hint)``
       (named ``…_prefetch``, one per (weight, hint, device)) plus
       ``gather_h2d_reuse_copy(w, idx, p, hint)``, which takes the rows the prefetch
       already holds from ``p`` and only the others over the link.
    c. A grouped expert matmul ``grouped(x, view(w), offs)`` (``aten._grouped_mm``,
       ``transformers::grouped_mm_fallback``; ``view`` a chain of view ops that keep
       dimension 0, such as ``transpose(w, -2, -1)``, or none) multiplies each group's
       rows by its slab, and a group without rows multiplies nothing. So it becomes
       ``ids, count = present_groups(offs, U)`` (the groups with rows, padded to the
       static size U = min(E, S) for S routed rows), ``r = gather_h2d_routed_copy(w, ids,
       count)`` (only the ``count`` present slabs cross the link; padding rows are
       zeros), and ``grouped(x, view(r), offs[ids])``: the padding repeats the last
       present group, whose offset is S, so padding groups are empty and the result is
       the captured op's, exactly.
    d. ``index.Tensor(view(w), [ids])`` (a batched expert matmul's gather, one slab per
       routed row, duplicates included) becomes ``u, count, inverse = unique_ids(ids, U)``
       (U = min(E, len(ids))), ``r = gather_h2d_routed_copy(w, u, count)`` and
       ``index.Tensor(view(r), [inverse])``: each distinct slab crosses once, and rows
       are repeated on the device.
    ``present_groups`` and ``unique_ids`` are shared per (input, device); a routed copy
    per (weight, ids, device); the view chain is re-emitted on the routed rows, and a
    view of a streamed weight read only by rewritten ops is not emitted over the whole
    weight. The routed copy's record holds ``count`` and the ``routing`` (T tokens, k of
    E experts each, read from the router's ``topk``), from which estimates charge the
    expected distinct experts. Any other device use of a streamed constant copies it
    whole. On the host, or for a resident weight, all of these are ordinary ops.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import math
import operator
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import AbstractSet, Any, Mapping, Optional, Sequence

import pandas as pd
import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, OutputKind, OutputSpec, TensorArgument

from .graph_values import (
    gc_paused,
    is_view_op,
    node_arg,
    node_nbytes,
    op_name,
    output_values,
    packet_name,
    reads_metadata_only,
    shape_upper_bound,
    value_of,
)
from .copy_ops import GATHER_H2D, GATHER_REUSE, GATHER_ROUTED, OP_FOR_KIND, PRESENT_GROUPS, SELECT_ROWS, UNIQUE_IDS
from .arguments import check_flag, describe
from .devices import CPU, CopyKind, Device, DeviceError, host_first
from .errors import ArgumentTypeError, WorkbenchError
from .expert_ops import Routing, grouped_operands, routing_of
from .json_fields import JsonFieldError, JsonObject
from .node_facts import facts_to_json, restore_facts
from .capture import Program
from .place import Placement

__all__ = ["CopyRecord", "DeviceGraph", "PropagationError", "node_role", "propagate"]


class PropagationError(WorkbenchError, ValueError):
    """The placement cannot be propagated as asked."""


class CopyRole(str, Enum):
    """What a copy does besides moving bytes (rules 8-10).

    ``plain`` moves a whole value; ``gather`` moves the rows of a streamed weight that an
    index selects, one per id; ``prefetch`` moves the rows a routing hint predicts, ahead
    of time; ``reuse`` moves the selected rows, taking those its prefetch holds from the
    device; ``routed`` moves the distinct rows a router chose: its index holds them
    padded to a static length, its ``count`` (a device value) says how many are real, and
    only those cross the link (the padding rows are zeros).
    """

    PLAIN = "plain"
    GATHER = "gather"
    PREFETCH = "prefetch"
    REUSE = "reuse"
    ROUTED = "routed"

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
    nbytes: int  # bytes moved per call: an upper bound for dynamic sizes (example size if unbounded), reuse and routed copies
    consumers: tuple[str, ...]  # nodes reading the copy ("output" for a returned value)
    reason: str  # one sentence: who needs it where, and where it lives
    role: CopyRole = CopyRole.PLAIN  # plain, gather, prefetch, reuse or routed
    index: Optional[str] = None  # gather, prefetch, reuse, routed: the node holding the row ids
    prefetch: Optional[str] = None  # reuse: the prefetch copy whose rows it may take
    prefetch_index: Optional[str] = None  # reuse: the row ids that prefetch holds
    count: Optional[str] = None  # routed: the node holding how many of the index's rows are real
    routing: Optional[Routing] = None  # routed: T tokens routed to k of E experts each, if the router was found
    slots: int = 0  # routed: rows of its result (U: the real ones, then padding); nbytes covers them all

    @property
    def is_gather(self) -> bool:
        """True for copies that move rows selected by an index (gather, prefetch, reuse, routed)."""
        return self.role is not CopyRole.PLAIN

    def expected_nbytes(self) -> float:
        """Bytes a routed copy is expected to move per call under uniform routing (the
        routing's expected distinct experts, at most ``slots``, times one row's bytes);
        ``nbytes`` for every other copy, and for a routed copy whose router was not found."""
        if self.role is not CopyRole.ROUTED or self.routing is None or not self.slots:
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
        naming it. The routed-copy fields (``count``, ``routing``, ``slots``) may be absent:
        records written before routed copies existed have none."""
        obj = JsonObject(data, path)
        try:
            kind, role = CopyKind.parse(obj.text("kind")), CopyRole(obj.text("role"))
            routing = obj.data.get("routing")
            routed = Routing.from_json(routing, f"{path}.routing") if routing is not None else None
        except (ValueError, DeviceError) as exc:
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
            routing=routed,
            slots=obj.count("slots") if has("slots") else 0,
        )


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
        self._slots = [
            (spec.kind.name, dg.program.constants.get(spec.arg.name))
            for spec in ep.graph_signature.input_specs
        ]
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


# --- the pass ----------------------------------------------------------------------


def propagate(
    placement: Placement,
    skip_h2d_for_method_inputs: bool = False,
    skip_d2h_for_method_outputs: bool = False,
    *,
    stream_constants: Sequence[str] = (),
) -> DeviceGraph:
    """Give every value a device and insert the copies the placement requires.

    Args:
        placement: from ``place``.
        skip_h2d_for_method_inputs: the caller supplies graph inputs already on the
            device that consumes them (no h2d copy; the caller owns that memory).
        skip_d2h_for_method_outputs: device outputs are returned on their device (no d2h
            copy; the caller owns that memory).
        stream_constants: globs over parameter/buffer names (``"layers.*.mlp.experts.*"``)
            of constants that stay on the host and are streamed to devices per call instead
            of being resident there: a device ``index_select(constant, 0, index)`` becomes
            one ``gather_h2d_copy`` of just the selected rows; any other device use copies
            the whole constant.
    """
    if not isinstance(placement, Placement):
        raise PropagationError(f"placement must be a Placement from workbench.place, got {describe(placement)}")
    check_flag(skip_h2d_for_method_inputs, "skip_h2d_for_method_inputs")
    check_flag(skip_d2h_for_method_outputs, "skip_d2h_for_method_outputs")
    with gc_paused():
        return _Propagator(
            placement, skip_h2d_for_method_inputs, skip_d2h_for_method_outputs, stream_constants
        ).run()


class _Propagator:
    """One pass over the captured graph, building the propagated graph node by node.

    Copies and constant views are emitted right before their first consumer, so the
    new graph is built in order with no later rewiring.
    """

    def __init__(self, placement: Placement, skip_h2d: bool, skip_d2h: bool, stream: Sequence[str] = ()) -> None:
        self.placement = placement
        self.program = placement.program
        self.skip_h2d = skip_h2d
        self.skip_d2h = skip_d2h
        self.graph = torch.fx.Graph()
        self.env: dict[torch.fx.Node, torch.fx.Node] = {}  # captured node → new node
        self.device: dict[torch.fx.Node, Device] = {}  # new node → device
        self.copy_for: dict[tuple[torch.fx.Node, Device], torch.fx.Node] = {}
        self.copy_facts: dict[torch.fx.Node, _CopyFacts] = {}  # copy node → what its record says
        self.view_for: dict[tuple[torch.fx.Node, Device], torch.fx.Node] = {}
        self.prefetch_for: dict[tuple[torch.fx.Node, torch.fx.Node, Device], torch.fx.Node] = {}
        self.reserved = {n.name for n in self.program.graph.nodes}
        self.used_names: set[str] = set()
        self.constants: dict[torch.fx.Node, None] = {}  # new constant placeholders, in order
        self.streamed = _streamed_constants(self.program, stream)  # names of host-only constants
        self.constant_views = _constant_views(self.program, self.streamed)  # view nodes over constants
        self.streamed_uses = _streamed_uses(self.program, self.streamed, placement.op_device)  # rule 10c, d
        self.absorbed_views = _absorbed_views(self.streamed_uses)  # views of streamed weights only rewritten ops read
        self.distinct_for: dict[tuple[torch.fx.Node, Device], tuple[torch.fx.Node, ...]] = {}  # (selector, device) → ids, count[, inverse]
        self.routed_for: dict[tuple[torch.fx.Node, torch.fx.Node, Device], torch.fx.Node] = {}  # (weight, ids, device) → routed copy
        self.offsets_for: dict[tuple[torch.fx.Node, torch.fx.Node], torch.fx.Node] = {}  # (offs, ids) → offs[ids]

    def run(self) -> DeviceGraph:
        placed = self.placement.op_device
        input_devices = self._input_devices(placed)
        for old in self.program.graph.nodes:
            if old.op == "placeholder":
                new = self.graph.node_copy(old)
                self.env[old] = new
                if old.name in self.program.constants:
                    self.constants[new] = None
                    self.device[new] = CPU
                else:
                    self.device[new] = input_devices[old.name]
            elif old.op == "call_function":
                if old in self.constant_views or old in self.absorbed_views:
                    continue  # emitted on demand: on each device that reads it, over the routed rows
                target = placed[old.name]
                if old in self.streamed_uses:  # placed on a device (rule 10c, d)
                    new = self._routed(old, self.streamed_uses[old], target)
                elif not target.is_host and self._is_streamed_gather(old):
                    new = self._gather(old, target)
                elif not target.is_host and self._is_streamed_select(old):
                    new = self._prefetch_and_reuse(old, target)
                elif reads_metadata_only(old):  # shape checks need no data: read in place
                    new = self.graph.node_copy(old, lambda a: self._read(a, None, old.name))
                else:
                    new = self.graph.node_copy(old, lambda a: self._read(a, target, old.name))
                self.env[old] = new
                self.device[new] = target
            elif old.op == "output":
                self._outputs(old)
            else:
                raise PropagationError(
                    f"node {old.name!r} has op {old.op!r}; exported programs hold only "
                    "placeholders, call_function nodes and one output"
                )
        return self._result(input_devices)

    # rule 5
    def _input_devices(self, placed: Mapping[str, Device]) -> dict[str, Device]:
        devices = {}
        for node in self.program.graph.nodes:
            if node.op != "placeholder" or node.name in self.program.constants:
                continue
            device = CPU
            if self.skip_h2d:
                counts = Counter(
                    placed[u.name] for u in node.users if u.op == "call_function" and not placed[u.name].is_host
                )
                if counts:
                    device = min(counts, key=lambda d: (-counts[d], d))
            devices[node.name] = device
        return devices

    # rules 3, 4, 7: what a consumer on ``target`` reads for the captured value ``old``
    def _read(self, old: torch.fx.Node, target: Device | None, consumer: str) -> torch.fx.Node:
        if target is None:  # a metadata-only reader takes the value wherever it is
            return self._view_on(old, self.placement.op_device[old.name]) if old in self.constant_views else self.env[old]
        if old in self.constant_views:
            return self._view_on(old, target)
        value = self.env[old]
        if value in self.constants and value.name in self.streamed and not target.is_host:
            return self._copy(value, target, consumer)  # a streamed constant used whole
        if value in self.constants or self.device[value] == target:
            return value
        if not isinstance(value_of(value), torch.Tensor):
            return value
        return self._copy(value, target, consumer)

    # rule 6 (and buffer mutations, which go back where their buffer lives)
    def _outputs(self, old: torch.fx.Node) -> None:
        specs = self.program.exported.graph_signature.output_specs
        placed = self.placement.op_device
        outs = []
        for arg, spec in zip(output_values(old), specs):
            if not isinstance(arg, torch.fx.Node):
                outs.append(arg)
                continue
            if arg in self.constant_views:
                outs.append(self._view_on(arg, placed[arg.name]))
                continue
            value = self.env[arg]
            if value in self.constants or not isinstance(value_of(value), torch.Tensor):
                outs.append(value)
                continue
            here = self.device[value]
            if spec.kind == OutputKind.USER_OUTPUT:
                want = here if self.skip_d2h else CPU
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                want = self.device[self._placeholder(spec.target)]
            else:
                want = CPU
            outs.append(value if want == here else self._copy(value, want, "output"))
        new = self.graph.output(tuple(outs))
        new.meta = copy.copy(old.meta)

    def _placeholder(self, name: str) -> torch.fx.Node:
        for old, new in self.env.items():
            if old.op == "placeholder" and old.name == name:
                return new
        raise PropagationError(f"no input named {name!r}")

    def _is_streamed_gather(self, old: torch.fx.Node) -> bool:
        """``index_select(streamed constant, 0, index)``: rows of a host-only weight."""
        if old.target is not torch.ops.aten.index_select.default:
            return False
        source, dim = old.args[0], old.args[1]
        return bool(
            isinstance(source, torch.fx.Node)
            and source.op == "placeholder"
            and source.name in self.streamed
            and dim == 0
        )

    def _gather(self, old: torch.fx.Node, target: Device) -> torch.fx.Node:
        """Emit ``gather_h2d_copy`` for a streamed ``index_select`` on ``target``."""
        source = self.env[node_arg(old, 0)]
        name = self._fresh_name(f"{old.name}_gather")
        index = self._read(node_arg(old, 2), target, name)  # the gather is the index's consumer
        new = self._emit_copy(
            GATHER_H2D, (source, index, str(CPU), str(target)), name,
            _CopyFacts(CopyKind.H2D, CPU, target, source, CopyRole.GATHER, index=index, serves=[old.name]),
        )  # fmt: skip
        new.meta = copy.copy(old.meta)
        return new

    def _is_streamed_select(self, old: torch.fx.Node) -> bool:
        """``select_rows(streamed constant, index, hint)``: rows of a host-only weight, predicted."""
        if old.target is not SELECT_ROWS:
            return False
        source = old.args[0]
        return isinstance(source, torch.fx.Node) and source.op == "placeholder" and source.name in self.streamed

    def _prefetch_and_reuse(self, old: torch.fx.Node, target: Device) -> torch.fx.Node:
        """Rule 10: the prefetch of the hinted rows (shared per weight, hint and device) and
        the reuse copy that completes the selected rows from it."""
        source = self.env[node_arg(old, 0)]
        name = self._fresh_name(f"{old.name}_gather")
        index = self._read(node_arg(old, 1), target, name)  # consumers are the new copy nodes
        hint = self._read(node_arg(old, 2), target, name)
        key = (source, hint, target)
        prefetch = self.prefetch_for.get(key)
        if prefetch is None:
            prefetch_name = self._fresh_name(f"{old.name}_prefetch")
            self._read(node_arg(old, 2), target, prefetch_name)  # the prefetch reads the hint too
            prefetch = self._emit_copy(
                GATHER_H2D, (source, hint, str(CPU), str(target)), prefetch_name,
                _CopyFacts(CopyKind.H2D, CPU, target, source, CopyRole.PREFETCH, index=hint),
            )  # fmt: skip
            prefetch.meta["val"] = _rows_like(value_of(source), value_of(hint))
            self.prefetch_for[key] = prefetch
        self.copy_facts[prefetch].serves.append(old.name)
        new = self._emit_copy(
            GATHER_REUSE, (source, index, prefetch, hint, str(CPU), str(target)), name,
            _CopyFacts(
                CopyKind.H2D, CPU, target, source, CopyRole.REUSE,
                index=index, prefetch=prefetch, prefetch_index=hint, serves=[old.name],
            ),
        )  # fmt: skip
        new.meta = copy.copy(old.meta)
        return new

    def _routed(self, old: torch.fx.Node, use: "_StreamedUse", target: Device) -> torch.fx.Node:
        """Rule 10c, d: the captured expert op reading only the routed rows of its weight."""
        selector = self._read(use.selector, target, old.name)
        distinct = self._distinct(use, selector, target, old)
        ids, count = distinct[0], distinct[1]
        operand = self._replay_views(use, self._routed_copy(use, ids, count, target, old), target, old)
        if use.form == "grouped":
            swap = {use.operand: operand, use.selector: self._routed_offsets(use, selector, ids, target, old)}
        else:
            swap = {use.operand: operand, use.selector: distinct[2]}
        return self.graph.node_copy(old, lambda a: swap[a] if a in swap else self._read(a, target, old.name))

    def _distinct(
        self, use: "_StreamedUse", selector: torch.fx.Node, target: Device, old: torch.fx.Node
    ) -> tuple[torch.fx.Node, ...]:
        """``present_groups`` (grouped) or ``unique_ids`` (index) of ``selector`` on
        ``target``, and its results: ids, count[, inverse] (shared per selector and device)."""
        key = (selector, target)
        found = self.distinct_for.get(key)
        if found is not None:
            return found
        op, parts = (PRESENT_GROUPS, ("ids", "count")) if use.form == "grouped" else (UNIQUE_IDS, ("ids", "count", "inverse"))
        base = self._fresh_name(f"{use.selector.name}_distinct")
        node = self._emit_op(op, (selector, use.slots), base, target, old)
        results = []
        for i, part in enumerate(parts):
            item = self.graph.create_node("call_function", operator.getitem, (node, i), {}, name=self._fresh_name(f"{base}_{part}"))
            item.meta = _meta_like(old, value_of(node)[i])
            self.device[item] = target
            results.append(item)
        self.distinct_for[key] = tuple(results)
        return self.distinct_for[key]

    def _routed_copy(
        self, use: "_StreamedUse", ids: torch.fx.Node, count: torch.fx.Node, target: Device, old: torch.fx.Node
    ) -> torch.fx.Node:
        """The routed copy of ``use``'s weight: the ``count`` real rows of ``ids`` (shared
        per weight, ids and device)."""
        source = self.env[use.weight]
        key = (source, ids, target)
        found = self.routed_for.get(key)
        if found is None:
            found = self._emit_copy(
                GATHER_ROUTED, (source, ids, count, str(CPU), str(target)), self._fresh_name(f"{old.name}_gather"),
                _CopyFacts(CopyKind.H2D, CPU, target, source, CopyRole.ROUTED, index=ids, count=count, routing=use.routing),
            )  # fmt: skip
            found.meta = _meta_like(old, _rows_like(value_of(source), value_of(ids)))
            self.routed_for[key] = found
        self.copy_facts[found].serves.append(old.name)
        return found

    def _replay_views(self, use: "_StreamedUse", rows: torch.fx.Node, target: Device, old: torch.fx.Node) -> torch.fx.Node:
        """``use``'s chain of views, applied to the routed rows on ``target``; an absorbed
        view keeps its captured name the first time it is emitted."""
        current = rows
        for view in use.views:
            if view in self.absorbed_views and view.name not in self.used_names:
                name = view.name
                self.used_names.add(name)
            else:
                name = self._fresh_name(f"{view.name}_routed")
            current = self._emit_op(view.target, (current, *view.args[1:]), name, target, view, view.kwargs)
        return current

    def _routed_offsets(
        self, use: "_StreamedUse", offs: torch.fx.Node, ids: torch.fx.Node, target: Device, old: torch.fx.Node
    ) -> torch.fx.Node:
        """``offs[ids]``: the cumulative row counts of the present groups (rule 10c)."""
        key = (offs, ids)
        found = self.offsets_for.get(key)
        if found is None:
            name = self._fresh_name(f"{use.selector.name}_routed")
            found = self._emit_op(torch.ops.aten.index_select.default, (offs, 0, ids), name, target, old)
            self.offsets_for[key] = found
        return found

    def _emit_op(
        self, op: Any, args: tuple, name: str, target: Device, like: torch.fx.Node, kwargs: Optional[dict] = None
    ) -> torch.fx.Node:
        """A compute node on ``target`` with the module stack of ``like`` and its traced value."""
        node = self.graph.create_node("call_function", op, args, dict(kwargs or {}), name=name)
        node.meta = _meta_like(like, _fake_result(op, args, kwargs or {}))
        self.device[node] = target
        return node

    def _emit_copy(self, op: Any, args: tuple, name: str, facts: "_CopyFacts") -> torch.fx.Node:
        """Append a copy node on its destination and keep the facts of its ``CopyRecord``."""
        node = self.graph.create_node("call_function", op, args, {}, name=name)
        self.device[node] = facts.dst
        self.copy_facts[node] = facts
        return node

    def _fresh_name(self, base: str) -> str:
        """A node name that no captured node has, so captured names never change."""
        name, i = base, 1
        while name in self.reserved or name in self.used_names:
            name, i = f"{base}_{i}", i + 1
        self.used_names.add(name)
        return name

    def _copy(self, value: torch.fx.Node, target: Device, consumer: str) -> torch.fx.Node:
        key = (value, target)
        found = self.copy_for.get(key)
        if found is None:
            src = self.device[value]
            kind = CopyKind.between(src, target)
            name = self._fresh_name(f"{value.name}_to_{_tag(target)}")
            found = self._emit_copy(
                OP_FOR_KIND[kind], (value, str(src), str(target)), name, _CopyFacts(kind, src, target, value)
            )
            found.meta["val"] = value.meta.get("val")
            if "tensor_meta" in value.meta:
                found.meta["tensor_meta"] = value.meta["tensor_meta"]
            self.copy_for[key] = found
        self.copy_facts[found].consumers.append(consumer)
        return found

    def _view_on(self, old: torch.fx.Node, target: Device) -> torch.fx.Node:
        """The view ``old`` of a constant, emitted on ``target`` (once per device)."""
        key = (old, target)
        found = self.view_for.get(key)
        if found is not None:
            return found
        placed = self.placement.op_device.get(old.name)
        if placed == target:
            name = old.name
            self.used_names.add(name)
        else:
            name = self._fresh_name(f"{old.name}_on_{_tag(target)}")
        args = torch.fx.node.map_arg(old.args, lambda a: self._view_input(a, target))
        kwargs = torch.fx.node.map_arg(old.kwargs, lambda a: self._view_input(a, target))
        found = self.graph.create_node("call_function", old.target, args, kwargs, name=name)
        found.meta = copy.copy(old.meta)
        self.device[found] = target
        self.view_for[key] = found
        return found

    def _view_input(self, old: torch.fx.Node, target: Device) -> torch.fx.Node:
        return self._view_on(old, target) if old in self.constant_views else self.env[old]

    def _result(self, input_devices: dict[str, Device]) -> DeviceGraph:
        graph = self.graph
        residency = {}
        for const in self.constants:
            held = {
                CPU if (u.op != "call_function" or u in self.copy_facts) else self.device[u]
                for u in const.users
                if not reads_metadata_only(u)  # rule 7: a metadata read holds nothing anywhere
            }
            residency[const.name] = tuple(host_first(held))
            if held:
                self.device[const] = min(held, key=lambda d: (d.is_host, d))
        by_name = {node.name: node for node in graph.nodes}
        copies = [self._record(node, by_name) for node in graph.nodes if node in self.copy_facts]
        output = graph.output_node()
        specs = []
        for spec, arg in zip(self.program.exported.graph_signature.output_specs, output_values(output)):
            if isinstance(arg, torch.fx.Node) and isinstance(spec.arg, TensorArgument):
                spec = OutputSpec(kind=spec.kind, arg=TensorArgument(name=arg.name), target=spec.target)
            specs.append(spec)
        user_outputs = tuple(
            s.arg.name for s in specs if s.kind == OutputKind.USER_OUTPUT and hasattr(s.arg, "name")
        )
        node_device = {n.name: d for n, d in self.device.items()}
        return DeviceGraph(
            placement=self.placement,
            graph=graph,
            node_device=node_device,
            copies=tuple(copies),
            residency=residency,
            input_devices=input_devices,
            user_outputs=user_outputs,
            output_specs=tuple(specs),
            skip_h2d_for_method_inputs=self.skip_h2d,
            skip_d2h_for_method_outputs=self.skip_d2h,
        )

    def _record(self, node: torch.fx.Node, by_name: Mapping[str, torch.fx.Node]) -> CopyRecord:
        """Rule 9: the copy's record, with the sentence that says why it exists."""
        facts = self.copy_facts[node]
        value, dst = facts.value, facts.dst
        if facts.role is CopyRole.PLAIN:
            consumers = list(facts.consumers)
            if value.op == "placeholder" and value.name in self.streamed:
                where = f"the streamed host weight {self.program.constants[value.name]!r}"
            elif value.op == "placeholder":
                where = "a graph input"
            else:
                where = f"computed by {op_name(value)}"
            needers = [
                "the graph output" if name == "output" else f"{name} ({op_name(by_name[name])})"
                for name in consumers
            ]
            reason = f"{', '.join(needers)} on {dst} {_reads(needers)} {value.name!r}, {where} on {facts.src}"
            nbytes = node_nbytes(value, unbounded="hint")
        else:
            consumers = [u.name for u in node.users]
            reason = self._streamed_reason(facts, [f"{n} ({op_name(by_name[n])})" for n in consumers])
            nbytes = node_nbytes(node, unbounded="hint")
        return CopyRecord(
            name=node.name,
            kind=facts.kind,
            value=value.name,
            src=facts.src,
            dst=dst,
            nbytes=nbytes,
            consumers=tuple(consumers),
            reason=reason,
            role=facts.role,
            index=facts.index.name if facts.index is not None else None,
            prefetch=facts.prefetch.name if facts.prefetch is not None else None,
            prefetch_index=facts.prefetch_index.name if facts.prefetch_index is not None else None,
            count=facts.count.name if facts.count is not None else None,
            routing=facts.routing,
            slots=_rows_of(facts.index) if facts.role is CopyRole.ROUTED and facts.index is not None else 0,
        )

    def _streamed_reason(self, facts: "_CopyFacts", readers: list[str]) -> str:
        """Rule 9 for copies of streamed weights: gathers, prefetches and reuse copies."""
        readers = readers or ["no op"]
        assert facts.index is not None  # every streamed copy selects rows by an index
        served, dst, index = facts.serves, facts.dst, facts.index.name
        rows = f"the rows of streamed host weight {self.program.constants[facts.value.name]!r}"
        if facts.role is CopyRole.PREFETCH:
            return (
                f"prefetches {rows} predicted by {index!r} for {', '.join(served)} on {dst}, "
                "before its router has chosen, so the copy overlaps earlier compute"
            )
        if facts.role is CopyRole.ROUTED:
            assert facts.count is not None  # a routed copy always has its count
            routing = facts.routing
            chose = (
                f"{routing.tokens} token(s) routed to {routing.top_k} of {routing.experts} experts each"
                if routing is not None
                else "the router"
            )
            return (
                f"{', '.join(readers)} on {dst} {_reads(readers)} {rows} that {chose} chose, for {', '.join(served)}: "
                f"{index!r} lists the distinct ones in {_rows_of(facts.index)} slots and {facts.count.name!r} says how "
                "many are real; only those rows cross the link, once each (nbytes is the upper bound: every slot real)"
            )
        if facts.role is CopyRole.REUSE:
            assert facts.prefetch is not None
            return (
                f"{', '.join(readers)} on {dst} {_reads(readers)} {rows} selected by {index!r} "
                f"({served[0]}); rows the prefetch {facts.prefetch.name!r} already holds are copied on {dst}, "
                "only the rows it missed cross the link (nbytes is the upper bound: every selected row missed)"
            )
        return (
            f"{', '.join(readers)} on {dst} {_reads(readers)} {rows} selected by {index!r} "
            f"({served[0]} gathered to {dst})"
        )


@dataclass
class _CopyFacts:
    """What the pass knows of one copy node while it builds the graph (becomes its record)."""

    kind: CopyKind
    src: Device
    dst: Device
    value: torch.fx.Node  # the value, or the streamed weight whose rows are copied
    role: CopyRole = CopyRole.PLAIN
    index: Optional[torch.fx.Node] = None  # row ids (gather, prefetch, reuse)
    prefetch: Optional[torch.fx.Node] = None  # reuse: its prefetch copy
    prefetch_index: Optional[torch.fx.Node] = None  # reuse: the row ids the prefetch holds
    count: Optional[torch.fx.Node] = None  # routed: how many of the index's rows are real
    routing: Optional[Routing] = None  # routed: the router's T, k and E, if found
    consumers: list[str] = field(default_factory=list)  # plain copies: the nodes that read it
    serves: list[str] = field(default_factory=list)  # streamed copies: the captured ops they serve


def _reads(readers: Sequence[str]) -> str:
    return "reads" if len(readers) == 1 else "read"


def _tag(device: Device) -> str:
    """``cpu``, ``cuda0``: a device as a node-name suffix."""
    return "cpu" if device.is_host else f"{device.type}{device.index}"


def _rows_like(source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The fake value of ``source``'s rows selected by ``index``: shape ``index.shape +
    source.shape[1:]``, made in ``source``'s fake mode so later stages can read it."""
    shape = tuple(index.shape) + tuple(source.shape[1:])
    return source.new_empty(shape)


def _rows_of(node: torch.fx.Node) -> int:
    """Rows (first dimension) of a node's traced tensor."""
    return int(value_of(node).shape[0])


def _meta_like(like: torch.fx.Node, val: Any) -> dict[str, Any]:
    """Meta of a node propagation adds for ``like``: its traced value, and ``like``'s module
    stack and source stack, so views and module groups show it where ``like`` sits and an
    error in it names the model line it computes for."""
    meta: dict[str, Any] = {"val": val}
    for key in ("nn_module_stack", "stack_trace"):
        if key in like.meta:
            meta[key] = like.meta[key]
    return meta


def _fake_result(op: Any, args: tuple, kwargs: dict) -> Any:
    """The traced value ``op`` gives on its arguments' traced values, computed in their fake mode."""
    vals = torch.fx.node.map_arg((args, kwargs), value_of)
    mode = detect_fake_mode(pytree.tree_flatten(vals)[0])
    with mode if mode is not None else contextlib.nullcontext():
        return op(*vals[0], **vals[1])


@dataclass(frozen=True)
class _StreamedUse:
    """A device expert op that reads a streamed weight whole but uses only routed rows (rule 10c, d)."""

    form: str  # "grouped" (rule 10c) or "index" (rule 10d)
    weight: torch.fx.Node  # the streamed constant's placeholder (captured graph)
    views: tuple[torch.fx.Node, ...]  # view ops from the weight to what the op reads, in order
    operand: torch.fx.Node  # what the op reads in the weight's place: the last view, or the weight
    selector: torch.fx.Node  # grouped: the cumulative offsets; index: the ids
    slots: int  # U: the static number of rows gathered (real ones, then padding)
    routing: Optional[Routing]  # the router behind the op, if found


def _streamed_uses(
    program: Program, streamed: AbstractSet[str], placed: Mapping[str, Device]
) -> dict[torch.fx.Node, _StreamedUse]:
    """Rule 10c, d: every device op of the captured graph that can read only the routed rows
    of a streamed weight."""
    if not streamed:
        return {}
    uses = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or placed[node.name].is_host:
            continue
        use = _grouped_use(node, streamed) or _index_use(node, streamed)
        if use is not None:
            uses[node] = use
    return uses


def _grouped_use(node: torch.fx.Node, streamed: AbstractSet[str]) -> Optional[_StreamedUse]:
    operands = grouped_operands(node)
    if operands is None or operands.bias is not None:
        return None  # a per-group bias would need its rows too: read whole
    chain = _weight_chain(operands.weight, streamed)
    if chain is None:
        return None
    weight, views = chain
    experts = value_of(weight).shape[0]
    x, offs = value_of(operands.x), value_of(operands.offs)
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not isinstance(offs, torch.Tensor) or tuple(offs.shape) != (experts,):
        return None
    rows = shape_upper_bound(x, f"value {operands.x.name!r}", unbounded="hint")[0]
    slots = max(1, min(experts, rows))
    return _StreamedUse("grouped", weight, views, operands.weight, operands.offs, slots, routing_of(operands.offs))


def _index_use(node: torch.fx.Node, streamed: AbstractSet[str]) -> Optional[_StreamedUse]:
    if node.target is not torch.ops.aten.index.Tensor or len(node.args) != 2:
        return None
    source, indices = node.args
    if not isinstance(source, torch.fx.Node) or not isinstance(indices, (list, tuple)) or len(indices) != 1:
        return None
    ids = indices[0]
    if not isinstance(ids, torch.fx.Node):
        return None
    val = value_of(ids)
    if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int64, torch.int32) or not 1 <= val.dim() <= 3:
        return None  # a boolean mask, or no index on dimension 0
    chain = _weight_chain(source, streamed)
    if chain is None:
        return None
    weight, views = chain
    count = math.prod(shape_upper_bound(val, f"value {ids.name!r}", unbounded="hint"))
    slots = max(1, min(value_of(weight).shape[0], count))
    return _StreamedUse("index", weight, views, source, ids, slots, routing_of(ids))


def _weight_chain(operand: torch.fx.Node, streamed: AbstractSet[str]) -> Optional[tuple[torch.fx.Node, tuple[torch.fx.Node, ...]]]:
    """(streamed placeholder, views) when ``operand`` is a streamed weight seen through view
    ops that keep its dimension 0 (its experts), else None."""
    views = []
    node = operand
    while node.op == "call_function":
        if not _keeps_rows(node):
            return None
        views.append(node)
        source = node.args[0]
        if not isinstance(source, torch.fx.Node):
            return None
        node = source
    if node.op != "placeholder" or node.name not in streamed:
        return None
    val = value_of(node)
    if not isinstance(val, torch.Tensor) or val.dim() < 1:
        return None
    return node, tuple(reversed(views))


def _keeps_rows(view: torch.fx.Node) -> bool:
    """True for a view op whose dimension 0 is its input's dimension 0 (it selects, reorders
    or adds only other dimensions), so it commutes with gathering rows."""
    if not is_view_op(view.target) or not view.args or not isinstance(view.args[0], torch.fx.Node):
        return False
    source = value_of(view.args[0])
    if not isinstance(source, torch.Tensor) or source.dim() == 0:
        return False
    rank, name = source.dim(), packet_name(view)

    def arg(position: int, key: str, default: Any) -> Any:
        return view.args[position] if len(view.args) > position else view.kwargs.get(key, default)

    if name == "aten.transpose":
        return arg(1, "dim0", 0) % rank != 0 and arg(2, "dim1", 0) % rank != 0
    if name == "aten.permute":
        dims = arg(1, "dims", [0])
        return bool(dims) and dims[0] % rank == 0
    if name in ("aten.slice", "aten.select"):
        return arg(1, "dim", 0) % rank != 0
    if name == "aten.unsqueeze":
        return arg(1, "dim", 0) % (rank + 1) != 0
    return name == "aten.alias"


def _absorbed_views(uses: Mapping[torch.fx.Node, _StreamedUse]) -> set[torch.fx.Node]:
    """Views of streamed weights that only rewritten ops (or other such views) read: they
    are emitted over the routed rows only (rule 10)."""
    absorbed = {view for use in uses.values() for view in use.views}
    changed = True
    while changed:
        changed = False
        for view in list(absorbed):
            if any(u not in uses and u not in absorbed for u in view.users):
                absorbed.discard(view)
                changed = True
    return absorbed


def _streamed_constants(program: Program, patterns: Sequence[str]) -> set[str]:
    """Placeholders of constants whose parameter/buffer name matches a stream pattern."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple, set, frozenset)):
        raise ArgumentTypeError(
            f"stream_constants must be a list of parameter-name globs such as ['layers.*.mlp.experts.*'] "
            f"(or () for none), got {describe(patterns)}"
        )
    patterns = list(patterns)
    for p in patterns:
        if not isinstance(p, str) or not p:
            raise PropagationError(
                f"stream_constants holds {p!r}; give parameter-name globs such as 'layers.*.mlp.experts.*'"
            )
    chosen = {
        name for name, fqn in program.constants.items() if any(fnmatch.fnmatchcase(fqn, p) for p in patterns)
    }
    unused = [p for p in patterns if not any(fnmatch.fnmatchcase(f, p) for f in program.constants.values())]
    if unused:
        raise PropagationError(
            f"stream_constants pattern(s) {', '.join(map(repr, unused))} match no parameter or buffer; "
            f"names look like {', '.join(list(program.constants.values())[:3])}"
        )
    return chosen


def _constant_views(program: Program, streamed: AbstractSet[str] = frozenset()) -> set[torch.fx.Node]:
    """Captured view nodes whose tensor inputs are all resident constants or such views
    (rule 7); views of streamed constants are ordinary ops."""
    derived = {
        n
        for n in program.graph.nodes
        if n.op == "placeholder" and n.name in program.constants and n.name not in streamed
    }
    views = set()
    for node in program.graph.nodes:
        if node.op != "call_function" or not is_view_op(node.target):
            continue
        inputs = [a for a in node.all_input_nodes if isinstance(value_of(a), torch.Tensor)]
        if inputs and all(a in derived for a in inputs):
            derived.add(node)
            views.add(node)
    return views
