"""Placement: which op runs on which device, and which ops fuse into delegates.

``place(program, rules)`` decides a device for every op, then groups each device's ops
into *delegates* — the units a backend compiles and launches.

Rules:
1. An op no rule claims runs on ``cpu``.
2. ``getitem`` nodes run where the op that produced their tuple runs; ops that produce
   no tensor (symbolic sizes) run on ``cpu`` and are never matched.
3. When several patterns match an op, the most specific one decides its device (see
   *Precedence* below); two equally specific patterns for different devices are an
   error. A pattern that ends up deciding no op's device — it matched nothing, or only
   ops that more specific patterns sent elsewhere — is reported (a warning, or an error
   with ``strict=True``); so is a callable that places no op on a device.
4. Ops placed on the same device that are connected by data fuse into one delegate,
   unless fusing would make the delegates depend on each other in a cycle. Host ops are
   not delegated.

Rules are either a mapping ``{device: [pattern, ...]}`` or a callable ``node -> device | None``.
A pattern is one of:

- an op name, matched against the full name or the name without overload:
  ``"aten.mm"`` matches ``aten.mm.default``; globs work: ``"aten.*"``, ``"*.addmm*"``;
- ``"module:<glob>"``, matched against the module path the op was traced in
  (``"module:layers.*.mlp"``), including enclosing modules;
- ``"node:<glob>"``, matched against the node name.

Precedence — of the patterns matching an op, the most specific decides, compared by:

1. kind: ``node:`` beats ``module:``, which beats an op name;
2. for ``module:`` patterns, the depth of the deepest module path the pattern matched
   (``model.layers.0.mlp`` is deeper than ``model.layers.0``);
3. the number of literal (non-wildcard) characters: ``aten.mul.Tensor`` beats
   ``aten.mul``, which beats ``aten.*``, which beats ``*``.

So "everything on the device except the MLPs" is
``{"cuda:0": ["*"], "cpu": ["module:model.layers.*.mlp"]}``: the module pattern beats
the catch-all op glob for the MLPs' ops, and only for them.
"""

from __future__ import annotations

import fnmatch
import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Sequence, TypeVar, Union

import pandas as pd
import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from .graph_values import gc_paused, op_name, packet_name, produces_tensors
from .capture import Program
from .arguments import check_flag, describe
from .devices import CPU, Device, DeviceError, host_first
from .errors import WorkbenchError, WorkbenchWarning
from .json_fields import JsonObject

__all__ = [
    "Decision",
    "Delegate",
    "Placement",
    "PlacementError",
    "PlacementWarning",
    "fuse_delegates",
    "module_paths",
    "most_specific",
    "parse_patterns",
    "parse_rules",
    "pattern_rank",
    "pattern_matches",
    "place",
    "report_no_claim",
]

Rules = Union[Mapping[str, Union[str, Sequence[str]]], Callable[[torch.fx.Node], object]]

PARTITIONERS = ("workbench", "fx")


class PlacementError(WorkbenchError, ValueError):
    """The placement rules are malformed or contradict each other."""


class PlacementWarning(WorkbenchWarning):
    """A placement rule that claimed no op."""


@dataclass(frozen=True)
class Delegate:
    """A group of ops fused for one device, launched as one unit."""

    name: str  # "delegate_0", numbered in order of their first op
    device: Device  # where every op of the group runs
    nodes: tuple[str, ...]  # node names, in execution order


@dataclass(frozen=True, eq=False)
class Placement:
    """The result of ``place``: a device for every op and the delegates they form."""

    program: Program
    op_device: Mapping[str, Device]  # every call_function node of the captured graph → its device
    delegates: tuple[Delegate, ...]  # device groups, in order of their first op
    node_delegate: Mapping[str, str]  # node in a delegate → delegate name
    unmatched: tuple[str, ...]  # rule patterns that claimed no op

    @property
    def devices(self) -> tuple[Device, ...]:
        """Devices that run at least one op, host first."""
        return tuple(host_first(self.op_device.values()))

    def ops_on(self, device: Union[str, Device]) -> tuple[str, ...]:
        dev = Device.parse(device)
        return tuple(n for n, d in self.op_device.items() if d == dev)

    def to_json(self) -> dict[str, Any]:
        """Devices as strings, delegates in order, unmatched patterns."""
        return {
            "op_device": {k: str(v) for k, v in self.op_device.items()},
            "delegates": [{"name": d.name, "device": str(d.device), "nodes": list(d.nodes)} for d in self.delegates],
            "unmatched": list(self.unmatched),
        }

    @classmethod
    def from_json(cls, data: Any, program: Program, path: str = "placement") -> "Placement":
        """The placement ``to_json`` wrote, of ``program``; a bad field is a ``JsonFieldError`` naming it."""
        obj = JsonObject(data, path)
        op_device = obj.device_map("op_device")
        delegates = tuple(Delegate(d.text("name"), d.device("device"), d.texts("nodes")) for d in obj.elements("delegates"))
        node_delegate = {n: d.name for d in delegates for n in d.nodes}
        return cls(program, op_device, delegates, node_delegate, obj.texts("unmatched"))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per op: name, op, device, delegate."""
        rows = []
        for node in self.program.graph.nodes:
            if node.name in self.op_device:
                rows.append(
                    {
                        "node": node.name,
                        "op": op_name(node),
                        "device": str(self.op_device[node.name]),
                        "delegate": self.node_delegate.get(node.name),
                    }
                )
        return pd.DataFrame(rows, columns=["node", "op", "device", "delegate"])


def place(
    program: Program,
    rules: Rules,
    *,
    strict: bool = False,
    partitioner: str = "workbench",
) -> Placement:
    """Assign every op of ``program`` a device and fuse same-device ops into delegates.

    Args:
        program: from ``capture``.
        rules: ``{device: [pattern, ...]}`` or a callable ``node -> device | None``
            (see the module docstring for patterns).
        strict: raise instead of warning when a pattern claims no op.
        partitioner: ``"workbench"`` (default; near-linear time) or ``"fx"``
            (``torch.fx``'s ``CapabilityBasedPartitioner``, which also fuses independent
            siblings but grows quadratically: fine for a few hundred ops).
    """
    if not isinstance(program, Program):
        raise PlacementError(f"program must be a Program from workbench.capture, got {describe(program)}")
    check_flag(strict, "strict")
    if not isinstance(partitioner, str) or partitioner not in PARTITIONERS:
        raise PlacementError(f"unknown partitioner {partitioner!r}; valid ones are {', '.join(PARTITIONERS)}")
    if isinstance(rules, Mapping) and not all(isinstance(key, (str, Device)) for key in rules):
        bad = next(key for key in rules if not isinstance(key, (str, Device)))
        raise PlacementError(
            f"rules is keyed by devices such as 'cuda:0', got the key {describe(bad)}; "
            "write rules as {'cuda:0': ['aten.mm', 'aten.add']}"
        )
    with gc_paused():
        return _place(program, rules, strict, partitioner)


def _place(program: Program, rules: Rules, strict: bool, partitioner: str) -> Placement:
    graph = program.graph
    unmatched: Sequence[str] = ()
    overridden: frozenset[str] = frozenset()
    if callable(rules) and not isinstance(rules, Mapping):
        node_device, unmatched = _apply_callable(graph, rules)
    elif isinstance(rules, Mapping):
        node_device, unmatched, overridden = _apply_patterns(graph, parse_rules(rules))
    else:
        raise PlacementError(
            "rules must be a mapping {device: [op patterns]} such as "
            "{'cuda:0': ['aten.mm', 'aten.add']}, or a callable node -> device | None; "
            f"got {type(rules).__name__}"
        )
    if unmatched:
        report_no_claim(
            _no_claim_message(unmatched, overridden, program.num_ops()),
            strict,
            stacklevel=4,  # the caller of place's caller (a strategy's user)
        )
    _follow_producers(graph, node_device)
    if partitioner == "fx":
        groups = _fx_partition(program.graph_module, node_device)
    else:
        groups = fuse_delegates(graph, node_device)
    delegates = tuple(
        Delegate(f"delegate_{i}", device, tuple(nodes)) for i, (device, nodes) in enumerate(groups)
    )
    node_delegate = {n: d.name for d in delegates for n in d.nodes}
    return Placement(program, node_device, delegates, node_delegate, tuple(unmatched))


def report_no_claim(message: str, strict: bool, stacklevel: int = 2) -> None:
    """Rule 3's report of a rule that claimed no op: a ``PlacementWarning``, or a
    ``PlacementError`` with ``strict``. Strategies report the same way."""
    if strict:
        raise PlacementError(message)
    warnings.warn(message, PlacementWarning, stacklevel=stacklevel + 1)


# --- rules -------------------------------------------------------------------------


def parse_rules(rules: Mapping) -> list[tuple[Device, str, str, str]]:
    """Validate a rule mapping into ``(device, kind, glob, original pattern)`` tuples;
    ``kind`` is ``"op"``, ``"module"`` or ``"node"``. Malformed rules are a ``PlacementError``."""

    def device_of(key: Any) -> Device:
        try:
            return Device.parse(key)
        except DeviceError as exc:
            raise PlacementError(f"bad device in placement rules: {exc}") from None

    return parse_patterns(rules, device_of)


K = TypeVar("K")


def parse_patterns(rules: Mapping, parse_key: Callable[[Any], K]) -> list[tuple[K, str, str, str]]:
    """Rules ``{key: [pattern, ...]}`` as ``(parse_key(key), kind, glob, original pattern)``
    tuples, whatever the keys mean (devices for ``place``, weight formats for
    ``quantize``); a malformed pattern is a ``PlacementError`` naming it."""
    parsed = []
    for key, patterns in rules.items():
        parsed_key = parse_key(key)
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(patterns, Iterable) or isinstance(patterns, (bytes, Mapping)):
            raise PlacementError(
                f"rules[{key!r}] must be a list of op patterns (strings), got "
                f"{type(patterns).__name__}"
            )
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern.strip():
                raise PlacementError(
                    f"rules[{key!r}] holds {pattern!r}; a pattern is a non-empty string such as "
                    "'aten.mm', 'aten.*', 'module:layers.*.mlp' or 'node:linear_3'"
                )
            kind, _, text = pattern.partition(":")
            if kind in ("module", "node") and text:
                parsed.append((parsed_key, kind, text.strip(), pattern))
            elif ":" in pattern:
                raise PlacementError(
                    f"pattern {pattern!r} has an unknown prefix {kind!r}; valid prefixes are "
                    "'module:' and 'node:' (plain patterns match op names)"
                )
            else:
                parsed.append((parsed_key, "op", pattern.strip().removeprefix("torch.ops."), pattern))
    return parsed


def module_paths(node: torch.fx.Node) -> list[str]:
    """The module paths ``node`` was traced in, outermost first (``["layers.0", "layers.0.mlp"]``)."""
    stack = node.meta.get("nn_module_stack") or {}
    return [path for path, _type in stack.values() if path]


@functools.lru_cache(maxsize=16384)
def _op_matches(full: str, packet: str, glob: str) -> bool:
    return fnmatch.fnmatchcase(full, glob) or fnmatch.fnmatchcase(packet, glob)


def pattern_matches(node: torch.fx.Node, kind: str, glob: str) -> bool:
    """True when a parsed pattern (``kind`` "op", "module" or "node", and its glob) claims ``node``."""
    return _specificity(node, kind, glob) is not None


def _placeable(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and op_name(node) != "getitem" and produces_tensors(node)


def _placeable_nodes(graph: torch.fx.Graph, node_device: dict[str, Device]) -> Iterable[torch.fx.Node]:
    """Every op starts on the host (rule 1); yields the ones a rule may move."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        node_device[node.name] = CPU
        if _placeable(node):
            yield node


def _apply_patterns(graph: torch.fx.Graph, parsed) -> tuple[dict[str, Device], list[str], frozenset[str]]:
    """Rules 1 and 3: each placeable op goes where its most specific matching pattern says.
    Returns the placement, the patterns that decided no op, and those of them that matched
    ops which more specific patterns sent elsewhere."""
    node_device: dict[str, Device] = {}
    used: set[str] = set()  # patterns that decided at least one op's device
    matched: set[str] = set()  # patterns that matched at least one op
    for node in _placeable_nodes(graph, node_device):
        decision = most_specific(parsed, functools.partial(_specificity, node))
        if decision is None:
            continue
        device = decision.key
        if decision.conflict is not None:
            raise PlacementError(decision.conflict_message(f"op {node.name!r} ({op_name(node)})"))
        node_device[node.name] = device
        used.update(o for d, o in decision.matched if d == device)  # they all put it where it went
        matched.update(o for _d, o in decision.matched)
    unmatched = []
    for _device, _kind, _glob, original in parsed:
        if original not in used and original not in unmatched:
            unmatched.append(original)
    return node_device, unmatched, frozenset(matched - used)


def _no_claim_message(unmatched: Sequence[str], overridden: frozenset[str], num_ops: int) -> str:
    """Rule 3's report: patterns that matched nothing, and patterns always overridden."""
    missed = [p for p in unmatched if p not in overridden]
    lost = [p for p in unmatched if p in overridden]
    parts = []
    if missed:
        parts.append(f"placement rule pattern(s) {', '.join(map(repr, missed))} matched no op in a graph of {num_ops} ops")
    if lost:
        parts.append(
            f"placement rule pattern(s) {', '.join(map(repr, lost))} claimed no op: more specific patterns "
            "decided every op they matched"
        )
    return "; ".join(parts)


def _specificity(node: torch.fx.Node, kind: str, glob: str) -> tuple[int, int, int] | None:
    """How specifically a pattern matches ``node`` (larger wins, see *Precedence*), or
    None when it does not match."""
    if kind == "op":  # the common case, without building the other keys
        return (1, 0, _literal_chars(glob)) if _op_matches(op_name(node), packet_name(node), glob) else None
    return pattern_rank(kind, glob, name=node.name, paths=module_paths(node) if kind == "module" else ())


def pattern_rank(
    kind: str, glob: str, *, name: str, paths: Iterable[str] = (), ops: Iterable[tuple[str, str]] = ()
) -> tuple[int, int, int] | None:
    """*Precedence* of a parsed pattern against a thing named ``name``, traced in the
    module ``paths``, read by ops named ``ops`` (``(full name, name without overload)``
    pairs): larger wins; None when it does not match. ``place`` ranks an op by its own
    name, module stack and op name; ``quantize`` ranks a constant by its placeholder
    name, the modules of its qualified name and the ops that read it."""
    literal = _literal_chars(glob)
    if kind == "node":
        return (3, 0, literal) if fnmatch.fnmatchcase(name, glob) else None
    if kind == "module":
        depths = [path.count(".") + 1 for path in paths if fnmatch.fnmatchcase(path, glob)]
        return (2, max(depths), literal) if depths else None
    return (1, 0, literal) if any(_op_matches(full, packet, glob) for full, packet in ops) else None


class Decision(NamedTuple):
    """Rule 3's outcome for one thing the rules rank: the deciding key and pattern, an
    equally specific match for another key (a conflict) or None, and every pattern that matched."""

    key: Any
    pattern: str
    conflict: Optional[tuple[Any, str]]
    matched: tuple[tuple[Any, str], ...]  # (key, pattern) of every match

    def conflict_message(self, subject: str, name: Callable[[Any], str] = str) -> str:
        """Rule 3's error for a conflict over ``subject`` (keys written by ``name``)."""
        assert self.conflict is not None
        other, pattern = self.conflict
        return (
            f"{subject} is claimed by pattern {self.pattern!r} for {name(self.key)} and by pattern {pattern!r} "
            f"for {name(other)}, which are equally specific; make one more specific (node: > module: > op "
            "name; deeper modules and more literal characters win) or make the patterns disjoint"
        )


def most_specific(
    parsed: Sequence[tuple[Any, str, str, str]], rank: Callable[[str, str], Optional[tuple[int, int, int]]]
) -> Optional[Decision]:
    """Rule 3 over parsed ``(key, kind, glob, pattern)`` rules, ranked by ``rank(kind, glob)``
    (None: no match): the decision, or None when no pattern matches."""
    matches = []
    for key, kind, glob, original in parsed:
        found = rank(kind, glob)
        if found is not None:
            matches.append((found, key, original))
    if not matches:
        return None
    top = max(r for r, _k, _o in matches)
    winners = [(k, o) for r, k, o in matches if r == top]
    key, original = winners[0]
    other = next(((k, o) for k, o in winners if k != key), None)
    return Decision(key, original, other, tuple((k, o) for _r, k, o in matches))


@functools.lru_cache(maxsize=4096)
def _literal_chars(glob: str) -> int:
    """Precedence 3: characters of a glob that are not wildcards."""
    return sum(1 for ch in glob if ch not in "*?[]")


def _apply_callable(graph: torch.fx.Graph, rule: Callable) -> tuple[dict[str, Device], list[str]]:
    """Rule 3 for a callable: it claims an op by answering a device; one that answers
    None for every op is reported like a pattern that matched nothing."""
    node_device: dict[str, Device] = {}
    claimed = False
    for node in _placeable_nodes(graph, node_device):
        try:
            answer = rule(node)
        except Exception as exc:
            raise PlacementError(
                f"the placement callable raised on node {node.name!r} ({op_name(node)}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if answer is None:
            continue
        if not isinstance(answer, (str, Device)):
            raise PlacementError(
                f"the placement callable returned {answer!r} ({type(answer).__name__}) for node "
                f"{node.name!r}; it must return a device string such as 'cuda:0', a Device, or None"
            )
        try:
            node_device[node.name] = Device.parse(answer)
        except DeviceError as exc:
            raise PlacementError(
                f"the placement callable returned {answer!r} for node {node.name!r}: {exc}"
            ) from None
        claimed = True
    name = getattr(rule, "__qualname__", type(rule).__name__)
    return node_device, [] if claimed else [f"the callable {name} (it answered None for every op)"]


def _follow_producers(graph: torch.fx.Graph, node_device: dict[str, Device]) -> None:
    for node in graph.nodes:
        if node.op == "call_function" and op_name(node) == "getitem":
            source = node.args[0]
            if isinstance(source, torch.fx.Node) and source.name in node_device:
                node_device[node.name] = node_device[source.name]


# --- fusion ------------------------------------------------------------------------


def fuse_delegates(graph: torch.fx.Graph, node_device: Mapping[str, Device]) -> list[tuple[Device, list[str]]]:
    """Group device ops into acyclic delegates in one pass over the graph, O(nodes + edges).

    Each node gets a *stage*; delegates are the connected groups of same-device ops on
    the same stage, joined by direct edges.

    Invariants:
    1. Stages never decrease along an edge. Graph inputs are stage 0; an edge into a node
       adds 1 when it leaves a device for the host or for another device, else 0.
    2. An edge from a delegate to any node outside it strictly increases the stage: a
       same-device successor on the same stage would have joined the delegate.
    3. Hence no path can leave a delegate and come back to it: the delegates, contracted
       to single nodes, form a DAG and can run in order.
    4. Ops connected on one device with nothing host- or other-device-computed in between
       share a stage, so chains and diamonds on one device fuse into one delegate.
    """
    stage: dict[torch.fx.Node, int] = {}
    parent: dict[torch.fx.Node, torch.fx.Node] = {}

    def find(x: torch.fx.Node) -> torch.fx.Node:
        root = x
        while parent[root] is not root:
            root = parent[root]
        while parent[x] is not root:
            parent[x], x = root, parent[x]
        return root

    for node in graph.nodes:
        if node.op != "call_function":
            stage[node] = 0
            continue
        device = node_device.get(node.name, CPU)
        s = 0
        for a in node.all_input_nodes:
            source = node_device.get(a.name) if a.op == "call_function" else None
            leaves_device = source is not None and not source.is_host and source != device
            s = max(s, stage[a] + leaves_device)
        stage[node] = s
        if device.is_host:
            continue
        parent[node] = node
        for a in node.all_input_nodes:
            if a in parent and node_device.get(a.name) == device and stage[a] == s:
                ra, rn = find(a), find(node)
                if ra is not rn:
                    parent[rn] = ra
    groups: dict[torch.fx.Node, list[str]] = {}
    for node in parent:  # insertion order is graph order
        groups.setdefault(find(node), []).append(node.name)
    return [(node_device[names[0]], names) for names in groups.values()]


def _fx_partition(
    gm: torch.fx.GraphModule, node_device: Mapping[str, Device]
) -> list[tuple[Device, list[str]]]:
    """Delegates from ``torch.fx``'s ``CapabilityBasedPartitioner``, one device at a time."""

    class _OnDevice(OperatorSupportBase):
        def __init__(self, device: Device) -> None:
            self.device = device

        def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:  # noqa: ANN001
            return node_device.get(node.name) == self.device

    order = {node.name: i for i, node in enumerate(gm.graph.nodes)}
    groups = []
    for device in sorted({d for d in node_device.values() if not d.is_host}):
        partitions = CapabilityBasedPartitioner(
            gm, _OnDevice(device), allows_single_node_partition=True
        ).propose_partitions()
        for partition in partitions:
            names = sorted((n.name for n in partition.nodes), key=order.__getitem__)
            groups.append((device, names))
    groups.sort(key=lambda g: order[g[1][0]])
    return groups
