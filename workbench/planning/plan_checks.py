"""Checks of a plan read from a file: every saved fact against the graph it describes.

A plan file holds two programs (checked against the hashes its ``plan.json`` records)
and the JSON facts of the placement, the device graph and the memory plan. The JSON can
be edited by hand or damaged; these checks make sure that what loads is what ``place``,
``propagate`` and ``plan`` could have made of the saved graph, so it runs right or does
not load. Each problem names its field (``plan.allocations[3].offset``).

Rules:
1. Placement: a device for exactly the captured graph's ops; delegates of those ops, on
   their devices, each op in at most one.
2. Device graph: a device for exactly the propagated graph's placeholders and ops; a
   captured op keeps its placed device; user inputs are on the host unless
   ``skip_h2d_for_method_inputs``, outputs and state updates come back to the host
   unless ``skip_d2h_for_method_outputs`` (outputs only).
3. Copies: one record per copy node of the graph, and only those; each record's kind,
   role, devices, inputs and bytes are those of its node (and whatever else its copy
   variant's ``check`` says of it).
4. Reads: every op other than a copy reads values on its own device, constants resident
   there, or (metadata-only ops) anything; residency is exactly where constants are read
   for their data (a metadata-only read holds a constant nowhere); a copy reads the
   value it copies on the host and its other inputs (a reuse copy's cache slabs and
   slots) on its destination.
5. Memory plan: every tensor value is planned or not, never both; a storage owns itself
   and an alias shares the memory of one of its inputs (a graph read back by
   ``torch.export.load`` no longer records which views share storage, so the saved alias
   map is checked for being possible, not recomputed); each storage's device, size,
   lifetime (from its writer to its last reader, outputs to the end), kind and aliases
   are what that map gives on the saved graph; every offset is aligned for its dtype;
   each arena ends at its highest allocation; lower bounds and constant bytes are
   recomputed; a declared capacity holds; ``MemoryPlan.verify`` passes. Whatever passes
   runs correctly: live storages never share bytes, and a value left unplanned only
   gets memory of its own.

Checks run in that order and stop at the first group with problems: later groups rely on
the facts earlier ones established.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping

import torch
import torch.fx
from torch.export.graph_signature import OutputKind

from ..copy_ops import is_copy_node
from ..copy_variants import CopyVariantError, copy_variant
from ..devices import CPU, CopyKind, Device, host_first
from ..graph_values import node_nbytes, output_values, reads_metadata_only, value_of
from ..propagate import CopyRecord, CopyRole, DeviceGraph
from .buffers import MAX_ALIGNMENT, Buffer, aligned_size
from .lower_bound import lower_bound
from .memory_plan import MemoryPlan
from .verify import PlanVerificationError

__all__ = ["plan_problems"]


def _placement_problems(dg: DeviceGraph) -> list[str]:
    """Rule 1."""
    placement = dg.placement
    ops = {n.name for n in placement.program.graph.nodes if n.op == "call_function"}
    problems = _same_keys("placement.op_device", placement.op_device, ops, "ops of the captured graph")
    seen: dict[str, str] = {}
    for i, delegate in enumerate(placement.delegates):
        for name in delegate.nodes:
            where = f"placement.delegates[{i}]"
            if placement.op_device.get(name) != delegate.device:
                problems.append(f"{where} puts {name!r} on {delegate.device}, but placement.op_device says {placement.op_device.get(name)}")
            if name in seen:
                problems.append(f"{where} repeats {name!r}, already in {seen[name]}")
            seen[name] = delegate.name
    return problems


def _same_keys(field: str, mapping: Mapping[Any, object], want: set[Any], what: str) -> list[str]:
    missing, extra = sorted(want - set(mapping)), sorted(set(mapping) - want)
    found = []
    if missing:
        found.append(f"{field} lacks {len(missing)} of the {what}: {missing[:5]}")
    if extra:
        found.append(f"{field} names {len(extra)} node(s) that are not {what}: {extra[:5]}")
    return found


def _graph_problems(dg: DeviceGraph) -> list[str]:
    """Rule 2."""
    program = dg.program
    nodes = {n.name for n in dg.graph.nodes if n.op in ("placeholder", "call_function")}
    problems = _same_keys("device_graph.node_device", dg.node_device, nodes, "placeholders and ops of the saved graph")
    if problems:
        return problems
    for name, device in dg.node_device.items():
        placed = dg.placement.op_device.get(name)
        if placed is not None and placed != device:
            problems.append(f"device_graph.node_device[{name!r}] is {device}, but the op was placed on {placed}")
    problems += _same_keys("device_graph.input_devices", dg.input_devices, set(program.user_inputs), "user inputs")
    for name, device in dg.input_devices.items():
        if dg.node_device.get(name) != device:
            problems.append(f"device_graph.input_devices[{name!r}] is {device}, but node_device says {dg.node_device.get(name)}")
        elif not dg.skip_h2d_for_method_inputs and not device.is_host:
            problems.append(f"device_graph.input_devices[{name!r}] is {device}; without skip_h2d_for_method_inputs inputs are on cpu")
    outputs = tuple(s.arg.name for s in dg.output_specs if s.kind == OutputKind.USER_OUTPUT and hasattr(s.arg, "name"))
    if dg.user_outputs != outputs:
        problems.append(f"device_graph.user_outputs is {list(dg.user_outputs)}, but the saved graph returns {list(outputs)}")
    for spec, arg in zip(dg.output_specs, output_values(dg.graph.output_node())):
        if not isinstance(arg, torch.fx.Node) or arg.name in program.constants or not isinstance(value_of(arg), torch.Tensor):
            continue
        host = not (spec.kind == OutputKind.USER_OUTPUT and dg.skip_d2h_for_method_outputs)
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            host = dg.node_device.get(spec.target or "") == CPU
        if host and not dg.node_device[arg.name].is_host:
            problems.append(f"device_graph.node_device[{arg.name!r}] is {dg.node_device[arg.name]}, but the graph returns it on cpu")
    return problems


def _copy_problem(record: CopyRecord, node: torch.fx.Node, dg: DeviceGraph, nodes: Mapping[str, torch.fx.Node], where: str) -> str:
    """Rule 3 for one record, or "" (``nodes``: the saved graph's nodes by name)."""
    names = [a.name if isinstance(a, torch.fx.Node) else a for a in node.args]
    try:
        variant = copy_variant(record.role)
    except CopyVariantError as exc:
        return f"{where}.role: {exc}"
    if node.target not in variant.ops:
        return f"{where}.role is {record.role}, but node {node.name!r} runs {node.target}"
    inputs = tuple(getattr(record, f) for f in variant.inputs) + (str(record.src), str(record.dst))
    if tuple(names) != inputs:
        return f"{where} says it copies {inputs}, but node {node.name!r} reads {tuple(names)}"
    if record.src == record.dst or record.kind is not CopyKind.between(record.src, record.dst) or record.kind is not variant.ops[node.target]:
        return f"{where}.kind is {record.kind}, which is not a copy from {record.src} to {record.dst} by {node.target}"
    if dg.node_device[node.name] != record.dst:
        return f"{where}.dst is {record.dst}, but device_graph.node_device[{node.name!r}] is {dg.node_device[node.name]}"
    source_ok = (
        CPU in dg.residency.get(record.value, ()) if record.value in dg.program.constants else dg.node_device.get(record.value) == record.src
    )
    if not source_ok:
        return f"{where}.src is {record.src}, but its value {record.value!r} does not live there"
    for extra in (record.index, record.prefetch, record.prefetch_index, record.count):
        if extra is not None and dg.node_device.get(extra) != record.dst:
            return f"{where} reads {extra!r} on {record.dst}, but it lives on {dg.node_device.get(extra)}"
    if variant.check is not None:  # what the variant's own facts must say of its node
        problem = variant.check(record, node, nodes)
        if problem:
            return f"{where}{problem}"
    moved = node_nbytes(nodes[record.value] if record.role == CopyRole.PLAIN else node, unbounded="hint")
    if record.nbytes != moved:
        return f"{where}.nbytes is {record.nbytes}, but the copy moves {moved} bytes"
    bad = [c for c in record.consumers if c != "output" and c not in nodes]
    if bad:
        return f"{where}.consumers names nodes the saved graph lacks: {bad[:5]}"
    return ""


def _copies_problems(dg: DeviceGraph) -> list[str]:
    """Rule 3."""
    copy_nodes = {n.name: n for n in dg.graph.nodes if is_copy_node(n)}
    names = [c.name for c in dg.copies]
    problems = _same_keys("device_graph.copies", dict.fromkeys(names), set(copy_nodes), "copy nodes of the saved graph")
    if len(set(names)) != len(names):
        problems.append("device_graph.copies lists a copy node twice")
    if problems:
        return problems
    nodes = {n.name: n for n in dg.graph.nodes}
    for i, record in enumerate(dg.copies):
        problem = _copy_problem(record, copy_nodes[record.name], dg, nodes, f"device_graph.copies[{i}]")
        if problem:
            problems.append(problem)
    return problems


def _read_on(dg: DeviceGraph, node: torch.fx.Node, constant: str) -> Device:
    """The device ``node`` reads ``constant`` on: a copy reads the value it copies on the
    host and its index inputs (a cache's slots and slabs, for a reuse copy) where it
    writes; any other op reads on its own device, the graph's output on the host."""
    if node.op != "call_function":
        return CPU
    record = dg.copy_table.get(node.name)
    if record is None:
        return dg.node_device[node.name]
    return CPU if constant == record.value else record.dst


def _reads_problems(dg: DeviceGraph) -> list[str]:
    """Rule 4."""
    constants = dg.program.constants
    problems = _same_keys("device_graph.residency", dg.residency, set(constants), "constants")
    if problems:
        return problems
    held: dict[str, set[Device]] = {name: set() for name in constants}
    for node in dg.graph.nodes:
        for arg in node.all_input_nodes:
            if arg.name in held and not reads_metadata_only(node):
                held[arg.name].add(_read_on(dg, node, arg.name))
        if node.op != "call_function" or node.name in dg.copy_table or reads_metadata_only(node):
            continue
        here = dg.node_device[node.name]
        for arg in node.all_input_nodes:
            if arg.name in constants or not isinstance(value_of(arg), torch.Tensor):
                continue
            if dg.node_device[arg.name] != here:
                problems.append(
                    f"device_graph.node_device puts {node.name!r} on {here} but its input {arg.name!r} on "
                    f"{dg.node_device[arg.name]}, with no copy between them"
                )
    for name, devices in dg.residency.items():
        want = tuple(host_first(held[name]))
        if tuple(devices) != want:
            problems.append(f"device_graph.residency[{name!r}] is {[str(d) for d in devices]}, but it is read on {[str(d) for d in want]}")
    return problems


def _alias_sources(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The values whose memory ``node``'s value may share: its inputs (a ``getitem``: the
    inputs of the op whose tuple it takes), as lifetimes rule 2 reads aliasing."""
    if node.target is operator.getitem and node.all_input_nodes:
        return node.all_input_nodes[0].all_input_nodes
    return node.all_input_nodes


def _mapping_problems(plan: MemoryPlan, tensors: dict[str, torch.fx.Node]) -> list[str]:
    """Rule 5: each tensor value planned (``storage_of``) or not (``unplanned``), never both;
    storages own themselves; an alias shares the memory of one of its inputs."""
    dg = plan.device_graph
    storage_of, unplanned = plan.storage_of, plan.unplanned
    problems = []
    both = sorted(set(storage_of) & set(unplanned))
    neither = sorted(set(tensors) - set(storage_of) - set(unplanned))
    unknown = sorted((set(storage_of) | set(unplanned)) - set(tensors))
    if both:
        problems.append(f"plan.storage_of and plan.unplanned both list {both[:5]}")
    if neither:
        problems.append(f"plan.storage_of and plan.unplanned both lack the tensor values {neither[:5]}")
    if unknown:
        problems.append(f"plan.storage_of or plan.unplanned names values the saved graph lacks or that hold no tensor: {unknown[:5]}")
    problems += _same_keys("plan.allocations", plan.allocations, set(storage_of.values()), "storages plan.storage_of names")
    if problems:
        return problems
    for value, owner in storage_of.items():
        if value in dg.program.constants:
            problems.append(f"plan.storage_of plans constant {value!r}, which is resident, not planned")
        elif value == owner:
            continue
        elif storage_of.get(owner) != owner:
            problems.append(f"plan.storage_of[{value!r}] is {owner!r}, which is not a storage of its own")
        elif not any(storage_of.get(u.name) == owner for u in _alias_sources(tensors[value])):
            problems.append(f"plan.storage_of[{value!r}] says it shares the memory of {owner!r}, but none of its inputs does")
    inputs = [n for n in dg.program.user_inputs if n in tensors]
    planned_inputs = [n for n in inputs if n in storage_of]
    if plan.alloc_graph_inputs != bool(planned_inputs) and inputs:
        problems.append(f"plan.alloc_graph_inputs is {plan.alloc_graph_inputs}, but the inputs planned are {planned_inputs}")
    return problems


def _lifetimes(plan: MemoryPlan) -> tuple[dict[str, int], dict[str, int], dict[str, str], dict[str, list[str]]]:
    """Rule 5: (start, end, kind, aliases) of every storage under the saved alias map, as
    lifetimes rules 3-5 define them."""
    dg = plan.device_graph
    nodes = list(dg.graph.nodes)
    index = {n.name: i for i, n in enumerate(nodes)}
    storage_of = plan.storage_of
    start: dict[str, int] = {}
    kind: dict[str, str] = {}
    aliases: dict[str, list[str]] = {owner: [] for owner in plan.allocations}
    for node in nodes:
        owner = storage_of.get(node.name)
        if owner is None:
            continue
        if owner != node.name:
            aliases[owner].append(node.name)
            continue
        if node.op == "placeholder":
            start[owner], kind[owner] = 0, "input"
        else:
            producer = node.args[0] if node.target is operator.getitem else node
            start[owner] = index[producer.name] if isinstance(producer, torch.fx.Node) else index[node.name]
            kind[owner] = "copy" if node.name in dg.copy_table else "activation"
    end: dict[str, int] = {}
    for node in nodes:
        for arg in node.all_input_nodes:
            owner = storage_of.get(arg.name)
            if owner is not None:
                end[owner] = max(end.get(owner, 0), index[node.name])
    for name in dg.user_outputs:
        owner = storage_of.get(name)
        if owner is not None:
            end[owner] = len(nodes) - 1
            if kind[owner] in ("activation", "copy"):
                kind[owner] = "output"
    ends = {owner: max(end.get(owner, start[owner]), start[owner]) for owner in start}
    return start, ends, kind, aliases


def _storage_problems(plan: MemoryPlan) -> list[str]:
    """Rule 5: storages, lifetimes and sizes, against the saved graph."""
    if not (isinstance(plan.alignment, int) and 0 < plan.alignment <= MAX_ALIGNMENT and not plan.alignment & (plan.alignment - 1)):
        return [f"plan.alignment is {plan.alignment}; it must be a power of two in 1..{MAX_ALIGNMENT}"]
    dg = plan.device_graph
    tensors = {
        n.name: n for n in dg.graph.nodes if n.op in ("placeholder", "call_function") and isinstance(value_of(n), torch.Tensor)
    }
    problems = _mapping_problems(plan, tensors)
    if problems:
        return problems
    start, end, kind, aliases = _lifetimes(plan)
    fields = ("device", "nbytes", "start", "end", "kind", "aliases", "arena", "size")
    for i, (name, alloc) in enumerate(plan.allocations.items()):
        where = f"plan.allocations[{i}] ({name!r})"
        nbytes = node_nbytes(tensors[name])
        want = (dg.node_device[name], nbytes, start[name], end[name], kind[name], tuple(aliases[name]), 0, aligned_size(nbytes, plan.alignment))
        got = (alloc.device, alloc.nbytes, alloc.start, alloc.end, alloc.kind, alloc.aliases, alloc.arena, alloc.size)
        if got != want:
            diff = next(k for k, (g, w) in enumerate(zip(got, want)) if g != w)
            problems.append(f"{where}.{fields[diff]} is {got[diff]!r}; the saved graph gives {want[diff]!r}")
            continue
        itemsize = value_of(tensors[name]).element_size()
        if alloc.offset % itemsize:
            problems.append(f"{where}.offset {alloc.offset} is not a multiple of its elements' {itemsize} bytes")
        if alloc.kind == "output" and not plan.alloc_graph_outputs:
            problems.append(f"{where} plans an output, but plan.alloc_graph_outputs is false")
    return problems


def _arena_problems(plan: MemoryPlan) -> list[str]:
    """Rule 5: arenas, lower bounds, constants, capacity, then the verifier."""
    dg = plan.device_graph
    problems = _same_keys("plan.arena_bytes", plan.arena_bytes, set(dg.devices), "devices of the saved graph")
    if problems:
        return problems
    for device in plan.arena_bytes:
        mine = [a for a in plan.allocations.values() if a.device == device]
        end = max((a.offset + a.size for a in mine), default=0)
        if plan.arena_bytes[device] != end:
            problems.append(f"plan.arena_bytes[{str(device)!r}] is {plan.arena_bytes[device]}, but its allocations end at {end}")
        buffers = [Buffer(a.name, a.nbytes, a.start, a.end) for a in mine]
        bound = lower_bound(buffers, plan.alignment)
        if plan.lower_bound.get(device) != bound:
            problems.append(f"plan.lower_bound[{str(device)!r}] is {plan.lower_bound.get(device)}, but the allocations give {bound}")
    if dict(plan.constant_bytes) != dict(dg.constant_bytes):
        problems.append(f"plan.constant_bytes is {dict(plan.constant_bytes)}, but the saved graph's constants give {dict(dg.constant_bytes)}")
    if plan.capacity is not None:
        for device, available in plan.capacity.items():
            needed = plan.total_bytes().get(device, 0)
            if needed > available:
                problems.append(f"plan.capacity[{str(device)!r}] is {available} bytes, but the plan needs {needed}")
    if problems:
        return problems
    try:
        plan.verify()
    except PlanVerificationError as exc:
        problems += [f"plan.allocations: {p}" for p in exc.problems[:10]]
    return problems


#: Rules 1-4: the groups that read the device graph only.
_GRAPH_GROUPS: tuple[Callable[[DeviceGraph], list[str]], ...] = (
    _placement_problems,
    _graph_problems,
    _copies_problems,
    _reads_problems,
)
#: Rule 5: the groups that read the memory plan.
_PLAN_GROUPS: tuple[Callable[[MemoryPlan], list[str]], ...] = (_storage_problems, _arena_problems)


def device_graph_problems(dg: DeviceGraph) -> list[str]:
    """Rules 1-4 on a device graph (no memory plan yet): every problem of the first group
    that finds any, in words. The passes run these after every pass they are asked to check."""
    for group in _GRAPH_GROUPS:
        problems = group(dg)
        if problems:
            return problems
    return []


def plan_problems(plan: MemoryPlan) -> list[str]:
    """Every problem of the first group of checks that finds any (module rules), in words."""
    problems = device_graph_problems(plan.device_graph)
    if problems:
        return problems
    for group in _PLAN_GROUPS:
        problems = group(plan)
        if problems:
            return problems
    return []
