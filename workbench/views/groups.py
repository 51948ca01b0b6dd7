"""Placement groups for the explorer: named sets of ops that move between devices together.

Rules:
1. ``module_groups(program)`` (the explorer's default) finds the groups in the module
   hierarchy, by what each module is: the routed experts (``expert_container_names``: the
   containers ``workbench.moe.discovery.find_experts`` finds, the strategies' experts), the shared
   expert, the router (the gate and the MoE block's own ops: top-k, weights, combine),
   attention (full or linear), the embedding, the LM head, the norms; an op of any other
   module joins the group of its module path with layer indices written ``*``
   (``ups.*``, or ``layers.* (own ops)`` for a container's own ops such as residual
   adds); ops traced at the root form "other ops". Every claimable op is in
   exactly one group; groups are listed in that order, empty ones left out.
2. A module is read outermost first (the layer container is skipped), and the first
   module that names a role decides: a norm inside attention is attention. The MoE block
   (the parent of an experts container) names no role itself; its own ops are the router's.
3. ``op_groups(program)``: one group per claimable op packet, most frequent first.
4. A ``GroupSet`` holds the groups (label → readable patterns) and, for module groups,
   the ops each claims; ``rules(assignment)`` turns a {group: device} assignment into
   placement rules: a callable over the claimed ops for module groups (disjoint by
   construction), a {device: patterns} mapping otherwise (so overlapping patterns sent
   to different devices are the placement error they always were).
5. ``carried(program, node_device, offered)`` maps a placement made with other groups
   onto these: each group goes where most of its ops are (switching between module and
   op groups keeps what was placed).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch.fx

from ..devices import Device
from ..indexed_names import wildcard
from ._inputs import UnknownNameError, ViewOptionError
from ._upstream import Program, find_experts, packet_name, produces_tensors

Groups = Union[Mapping[str, Union[str, Sequence[str]]], Sequence[str]]

EXPERTS = "routed experts"
SHARED = "shared expert"
ROUTER = "router"
ATTENTION = "attention"
EMBEDDING = "embedding"
LM_HEAD = "LM head"
NORMS = "norms"
OTHER = "other ops"
_ROLE_ORDER = (EXPERTS, SHARED, ROUTER, ATTENTION, EMBEDDING, LM_HEAD, NORMS)



@dataclass(frozen=True)
class GroupSet:
    """Rule 4."""

    kind: str  # "module" | "op" | "given"
    patterns: Mapping[str, tuple[str, ...]]  # label → placement patterns (what a reader sees)
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # label → op names (module groups)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.patterns)

    def rules(self, assignment: Mapping[str, str]) -> Any:
        """Placement rules for ``assignment`` ({group: device}); host groups need no rule."""
        unknown = [g for g in assignment if g not in self.patterns]
        if unknown:
            raise UnknownNameError(
                f"unknown group(s) {', '.join(map(repr, unknown))}; groups are {', '.join(map(repr, self.patterns))}"
            )
        if not self.members:
            return rules_for(self.patterns, assignment)
        device_of = {
            node: str(Device.parse(device))
            for group, device in assignment.items()
            if not Device.parse(device).is_host
            for node in self.members[group]
        }
        return _MemberRule(device_of)

    def carried(self, program: Program, node_device: Mapping[str, Any], offered: Sequence[str]) -> dict[str, str]:
        """Rule 5: {group: device} that keeps a placement made with other groups — each
        group on the device most of its ops are on now (of those ``offered``), else cpu."""
        members = self.members or {
            label: tuple(n.name for n in _claimable(program) if packet_name(n) in pats) for label, pats in self.patterns.items()
        }
        out = {}
        for label in self.labels:
            devices = Counter(str(node_device[m]) for m in members.get(label, ()) if m in node_device)
            chosen = [d for d, _n in devices.most_common() if d in offered]
            out[label] = chosen[0] if chosen else "cpu"
        return out


@dataclass(frozen=True)
class _MemberRule:
    """A placement callable: the device of each claimed op (None: the host)."""

    device_of: Mapping[str, str]

    def __call__(self, node: torch.fx.Node) -> Optional[str]:
        return self.device_of.get(node.name)


def _claimable(program: Program) -> list[torch.fx.Node]:
    return [
        n for n in program.graph.nodes if n.op == "call_function" and produces_tensors(n) and packet_name(n) != "getitem"
    ]


def module_stack(node: torch.fx.Node) -> list[tuple[str, str]]:
    """(path, class name) of the modules ``node`` was traced in, outermost first, root left out."""
    out = []
    for value in (node.meta.get("nn_module_stack") or {}).values():
        if isinstance(value, tuple) and len(value) == 2 and value[0]:
            kind = value[1] if isinstance(value[1], str) else getattr(value[1], "__name__", str(value[1]))
            out.append((str(value[0]), kind.rsplit(".", 1)[-1]))
    return out


def expert_container_names(program: Program) -> tuple[str, ...]:
    """The routed experts' container modules, layer indices as ``*``: the containers
    ``find_experts`` finds (stacked per-expert weights or one module per expert, scored
    by a router), which are the experts every strategy moves."""
    return tuple(dict.fromkeys(wildcard(module) for module in find_experts(program).modules))


def _role(stack: list[tuple[str, str]], experts: set[str], blocks: set[str]) -> tuple[Optional[str], str]:
    """Rule 2: (role or None, the wildcard path of the module that decided)."""
    block = ""
    for depth, (path, kind) in enumerate(stack):
        wild = wildcard(path)
        last = wild.rsplit(".", 1)[-1].lower()
        k = kind.lower()
        if wild in experts:
            return EXPERTS, wild
        if wild in blocks:
            block = wild
            continue
        if depth < len(stack) - 1 and last == "*":
            continue  # a layer of a repeated stack, holding the module that decides
        if "shared" in last or "shared" in k:
            return SHARED, wild
        if block and (last in ("gate", "router") or "router" in k):
            return ROUTER, wild
        if "norm" in k or last.endswith("norm"):  # before attention: post_attention_layernorm
            return NORMS, wild
        if "attn" in last or "attention" in last or "attention" in k or "deltanet" in k:
            return ATTENTION, wild
        if "embed" in last or "embedding" in k:
            return EMBEDDING, wild
        if last in ("lm_head", "head", "output", "classifier"):
            return LM_HEAD, wild
    if block:
        return ROUTER, block
    return None, wildcard(stack[-1][0]) if stack else ""


def module_groups(program: Program) -> GroupSet:
    """Rule 1."""
    experts = set(expert_container_names(program))
    blocks = {e.rsplit(".", 1)[0] for e in experts if "." in e}
    nodes = _claimable(program)
    stacks = {n.name: module_stack(n) for n in nodes}
    containers = {wildcard(p) for st in stacks.values() for p, _k in st[:-1]}
    members: dict[str, list[str]] = {}
    patterns: dict[str, dict[str, None]] = {}
    for node in nodes:
        role, where = _role(stacks[node.name], experts, blocks)
        if role is None:
            role = (f"{where} (own ops)" if where in containers else where) if where else OTHER
        members.setdefault(role, []).append(node.name)
        patterns.setdefault(role, {})[f"module:{where}" if where else "ops at the root"] = None
    order = [r for r in _ROLE_ORDER if r in members] + sorted(r for r in members if r not in _ROLE_ORDER and r != OTHER)
    if OTHER in members:
        order.append(OTHER)
    return GroupSet(
        "module",
        {label: _summarise(tuple(patterns[label])) for label in order},
        {label: tuple(members[label]) for label in order},
    )


def _summarise(patterns: tuple[str, ...], most: int = 4) -> tuple[str, ...]:
    """A readable handful of the modules a group covers."""
    return patterns if len(patterns) <= most else patterns[:most] + (f"… {len(patterns) - most} more",)


def op_groups(program: Program) -> GroupSet:
    """Rule 3."""
    counts = Counter(packet_name(node) for node in _claimable(program))
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return GroupSet("op", {name: (name,) for name, _ in ordered})


def default_groups(program: Program) -> dict[str, tuple[str, ...]]:
    """The explorer's default groups (module groups, rule 1) as {label: patterns}."""
    return dict(module_groups(program).patterns)


def given_groups(groups: Groups) -> GroupSet:
    """Groups written by the user: ``{label: patterns}`` or a list of patterns (one group each)."""
    if isinstance(groups, str):
        groups = [groups]
    out: dict[str, tuple[str, ...]] = {}
    if isinstance(groups, Mapping):
        for label, patterns in groups.items():
            pats = (patterns,) if isinstance(patterns, str) else tuple(patterns)
            if not pats or not all(isinstance(p, str) and p.strip() for p in pats):
                raise ViewOptionError(f"group {label!r} needs one or more non-empty pattern strings, got {patterns!r}")
            out[str(label)] = pats
        return GroupSet("given", out)
    for p in groups:
        if not isinstance(p, str) or not p.strip():
            raise ViewOptionError(f"a group is a placement pattern string such as 'aten.linear' or 'module:layers.*'; got {p!r}")
        out[p] = (p,)
    return GroupSet("given", out)


def rules_for(groups: Mapping[str, Sequence[str]], assignment: Mapping[str, str]) -> dict[str, list[str]]:
    """``{device: patterns}`` for the groups assigned to a non-host device (host groups
    are left out: ops no rule claims run on the host, so they cannot conflict)."""
    unknown = [g for g in assignment if g not in groups]
    if unknown:
        raise UnknownNameError(f"unknown group(s) {', '.join(map(repr, unknown))}; groups are {', '.join(map(repr, groups))}")
    rules: dict[str, list[str]] = {}
    for group, device in assignment.items():
        dev = Device.parse(device)
        if dev.is_host:
            continue
        rules.setdefault(str(dev), []).extend(groups[group])
    return rules


GROUPINGS: dict[str, Callable[[Program], GroupSet]] = {"module": module_groups, "op": op_groups}
