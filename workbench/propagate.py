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
10. Streamed constants (``stream_constants``) stay on the host. A device op that reads one
    is offered to the rewrite hook of each registered copy variant (``copy_variants``),
    in registration order; the first that returns a node replaces it (a gather of just
    the rows an index selects, a prefetch and a reuse copy: ``builtin_copies``; a copy of
    only the rows an index lists as real: ``moe.streaming``). Any other device use of a
    streamed constant copies it whole. On the host, or for a resident weight, all of
    these are ordinary ops.
11. A constant ``quantize`` stored in a weight format keeps it on the device graph, and so
    do the views, copies and row picks of it (``weight_formats`` rule 2): their bytes are
    the format's.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Mapping, Optional, Sequence

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode
from torch.export.graph_signature import OutputKind, OutputSpec, TensorArgument

from .arguments import check_flag, describe
from .capture import Program
from .copy_ops import OP_FOR_KIND
from .copy_variants import copy_variant, rewriting_variants
from .device_graph import CopyRecord, CopyRole, DeviceGraph, node_role
from .devices import CPU, CopyKind, Device, host_first
from .errors import ArgumentTypeError, WorkbenchError
from .index_draws import Routing
from .graph_values import gc_paused, is_view_op, node_nbytes, op_name, output_values, reads_metadata_only, value_of
from .place import Placement
from .weight_formats import mark_stored_values

__all__ = ["CopyFacts", "CopyRecord", "CopyRole", "DeviceGraph", "PropagationError", "node_role", "propagate"]


class PropagationError(WorkbenchError, ValueError):
    """The placement cannot be propagated as asked."""


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
        stream_constants: globs over parameter/buffer names (``"embed.*"``)
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
    new graph is built in order with no later rewiring. It is the ``RewriteContext`` the
    copy variants' rewrite hooks work in (``copy_variants``): they read values with
    ``read``, name nodes with ``fresh_name``, add nodes with ``emit_copy`` and
    ``emit_op``, keep what they share across ops in ``state(role)``, and ``defer`` the
    captured nodes they emit themselves.
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
        self.copy_facts: dict[torch.fx.Node, "CopyFacts"] = {}  # copy node → what its record says
        self.view_for: dict[tuple[torch.fx.Node, Device], torch.fx.Node] = {}
        self.reserved = {n.name for n in self.program.graph.nodes}
        self.used_names: set[str] = set()
        self.constants: dict[torch.fx.Node, None] = {}  # new constant placeholders, in order
        self.streamed = _streamed_constants(self.program, stream)  # names of host-only constants
        self.constant_views = _constant_views(self.program, self.streamed)  # view nodes over constants
        self.variants = rewriting_variants()  # rule 10: the copy variants' rewrite hooks
        self.states: dict[str, dict[Any, Any]] = {v.role: {} for v in self.variants}
        self.deferred: set[torch.fx.Node] = set()  # captured nodes a rewrite emits itself
        for variant in self.variants:
            if variant.prepare is not None:
                variant.prepare(self)

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
                if old in self.constant_views or old in self.deferred:
                    continue  # emitted on demand: on each device that reads it, or by a rewrite
                target = placed[old.name]
                rewritten = self._rewritten(old, target)
                if rewritten is not None:
                    new = rewritten
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

    def _rewritten(self, old: torch.fx.Node, target: Device) -> Optional[torch.fx.Node]:
        """Rule 10: the node the first copy variant's rewrite hook emits for a device op, or None."""
        if target.is_host:
            return None
        for variant in self.variants:
            assert variant.rewrite is not None  # rewriting_variants() has a hook each
            new = variant.rewrite(self, old, target)
            if new is not None:
                return new
        return None

    # -- the RewriteContext of copy variants' hooks ---------------------------------------
    def state(self, role: str) -> dict[Any, Any]:
        """A rewrite hook's own memory for this pass (what it shares across ops)."""
        return self.states.setdefault(role, {})

    def defer(self, nodes: AbstractSet[torch.fx.Node]) -> None:
        """Captured nodes the pass must not emit in order: a rewrite emits them itself."""
        self.deferred |= set(nodes)

    def is_streamed(self, node: Any) -> bool:
        """True for the placeholder of a streamed constant (rule 10)."""
        return isinstance(node, torch.fx.Node) and node.op == "placeholder" and node.name in self.streamed

    def read(self, old: torch.fx.Node, target: Device, consumer: str) -> torch.fx.Node:
        """What a consumer on ``target`` reads for the captured value ``old`` (rules 3, 4, 7)."""
        return self._read(old, target, consumer)

    def fresh_name(self, base: str) -> str:
        """A node name no captured node has."""
        return self._fresh_name(base)

    def claim_name(self, name: str) -> bool:
        """Take a captured node's own name for the node that replaces it; False if taken."""
        if name in self.used_names:
            return False
        self.used_names.add(name)
        return True

    def emit_op(
        self, op: Any, args: tuple, name: str, target: Device, like: torch.fx.Node, kwargs: Optional[dict] = None
    ) -> torch.fx.Node:
        """A compute node on ``target`` with the module stack of ``like`` and its traced value."""
        return self._emit_op(op, args, name, target, like, kwargs)

    def emit_getitem(self, node: torch.fx.Node, i: int, name: str, target: Device, like: torch.fx.Node) -> torch.fx.Node:
        """``node[i]`` on ``target``: one result of a multi-output op."""
        item = self.graph.create_node("call_function", operator.getitem, (node, i), {}, name=name)
        item.meta = _meta_like(like, value_of(node)[i])
        self.device[item] = target
        return item

    def emit_copy(self, op: Any, args: tuple, name: str, facts: "CopyFacts") -> torch.fx.Node:
        """A copy node on its destination; ``facts`` become its ``CopyRecord`` (rule 9)."""
        return self._emit_copy(op, args, name, facts)

    def facts_of(self, node: torch.fx.Node) -> "CopyFacts":
        """The facts an emitted copy node's record will hold."""
        return self.copy_facts[node]

    def new_node(self, old: torch.fx.Node) -> torch.fx.Node:
        """The node emitted for the captured node ``old`` (placeholders: the new placeholder)."""
        return self.env[old]

    def copy_of(self, old: torch.fx.Node, target: Device, swap: Mapping[torch.fx.Node, torch.fx.Node]) -> torch.fx.Node:
        """``old`` emitted on ``target``, its inputs in ``swap`` replaced, the others read (rules 3, 4)."""
        return self.graph.node_copy(old, lambda a: swap[a] if a in swap else self._read(a, target, old.name))

    def with_meta_of(self, node: torch.fx.Node, old: torch.fx.Node) -> torch.fx.Node:
        """``node`` carrying ``old``'s meta (the rewritten op's traced value and stacks)."""
        node.meta = copy.copy(old.meta)
        return node

    def set_value(self, node: torch.fx.Node, like: torch.fx.Node, val: Any) -> None:
        """``node``'s traced value ``val``, with ``like``'s module and source stacks."""
        node.meta = _meta_like(like, val)

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

    def _emit_op(
        self, op: Any, args: tuple, name: str, target: Device, like: torch.fx.Node, kwargs: Optional[dict] = None
    ) -> torch.fx.Node:
        """A compute node on ``target`` with the module stack of ``like`` and its traced value."""
        node = self.graph.create_node("call_function", op, args, dict(kwargs or {}), name=name)
        node.meta = _meta_like(like, _fake_result(op, args, kwargs or {}))
        self.device[node] = target
        return node

    def _emit_copy(self, op: Any, args: tuple, name: str, facts: "CopyFacts") -> torch.fx.Node:
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
                OP_FOR_KIND[kind], (value, str(src), str(target)), name, CopyFacts(kind, src, target, value)
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
        mark_stored_values(graph, self.program.stored_formats)  # before copies are sized (rule 11)
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
        if facts.role == CopyRole.PLAIN:
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
            readers = [f"{n} ({op_name(by_name[n])})" for n in consumers] or ["no op"]
            variant = copy_variant(facts.role)
            if variant.reason is None:
                raise PropagationError(f"copy variant {facts.role!r} made {node.name!r} but says no reason for its copies")
            reason = variant.reason(self, facts, readers)
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
            slots=facts.slots,
        )


@dataclass
class CopyFacts:
    """What the pass knows of one copy node while it builds the graph (becomes its record)."""

    kind: CopyKind
    src: Device
    dst: Device
    value: torch.fx.Node  # the value, or the streamed weight whose rows are copied
    role: str = CopyRole.PLAIN  # a registered copy variant's role
    index: Optional[torch.fx.Node] = None  # row ids (gather, prefetch, reuse)
    prefetch: Optional[torch.fx.Node] = None  # reuse: its prefetch copy
    prefetch_index: Optional[torch.fx.Node] = None  # reuse: the row ids the prefetch holds
    count: Optional[torch.fx.Node] = None  # counted copies: how many of the index's rows are real
    routing: Optional[Routing] = None  # counted copies: how the index was drawn (T, k, E), if known
    consumers: list[str] = field(default_factory=list)  # plain copies: the nodes that read it
    serves: list[str] = field(default_factory=list)  # streamed copies: the captured ops they serve
    slots: int = 0  # rows of its result when only some are real (the record's ``slots``)


def _reads(readers: Sequence[str]) -> str:
    return "reads" if len(readers) == 1 else "read"


def _tag(device: Device) -> str:
    """``cpu``, ``cuda0``: a device as a node-name suffix."""
    return "cpu" if device.is_host else f"{device.type}{device.index}"


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


def _streamed_constants(program: Program, patterns: Sequence[str]) -> set[str]:
    """Placeholders of constants whose parameter/buffer name matches a stream pattern."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple, set, frozenset)):
        raise ArgumentTypeError(
            f"stream_constants must be a list of parameter-name globs such as ['embed.*'] "
            f"(or () for none), got {describe(patterns)}"
        )
    patterns = list(patterns)
    for p in patterns:
        if not isinstance(p, str) or not p:
            raise PropagationError(
                f"stream_constants holds {p!r}; give parameter-name globs such as 'embed.*'"
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
