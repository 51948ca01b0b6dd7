"""The expert matmul forms of a captured graph, and how many experts a router sends rows to.

Mixture-of-experts layers keep their routed experts as stacked weights ``[E, …]`` and
apply them to the rows a router picked in one of two forms:

- *grouped*: ``aten._grouped_mm(x, W, offs)`` or ``transformers::grouped_mm_fallback(x,
  W, offs)``: ``x`` (S, in) holds the S = tokens × k routed rows sorted by expert, ``W``
  (G, in, out) one matrix per group, ``offs`` (G,) the cumulative row count per group:
  group g multiplies rows ``offs[g-1] … offs[g]``.
- *batched*: ``aten.index.Tensor(W, [ids])`` picks a slab per routed row (duplicates
  kept), then ``bmm``.

Propagation streams both (``moe.streaming``); the cost model costs the grouped ops
(FlopCounterMode has no formula for them). Both need the *routing* behind an op: the
router's ``topk`` that chose the experts, found by walking the op's inputs back, as the
core's ``index_draws.Routing`` (T draws of k of E rows), which copy records carry.

Rules:
1. A grouped op is recognised by its op name (so the transformers op need not be
   imported); its operands by their schema names (``input``/``self``, ``weight``/``mat2``,
   ``offs``, ``bias``).
2. The routing of a node is that of the nearest ``topk`` upstream whose indices (its
   second result) the node depends on: E = the size of the scored dimension, k = how many
   it keeps, T = the number of rows scored (tokens). DeepSeek-V3's three ``topk`` (group
   scores, groups, experts) give the experts' one: it is the nearest. A routing that
   cannot be read with static sizes is None.
3. Expected distinct experts, for shape-only estimates, assume uniform routing
   (``index_draws`` rule 2): E · (1 − (1 − k/E)^T). One token gives exactly k; many
   tokens approach E.
"""

from __future__ import annotations

import operator
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx

from ..graph_values import GROUPED_MM_OPS, packet_name, value_of
from ..index_draws import Routing, RoutingError, expected_distinct_rows

__all__ = [
    "GROUPED_MM_OPS",
    "GroupedOperands",
    "Routing",
    "RoutingError",
    "expected_distinct_experts",
    "grouped_operands",
    "is_grouped_mm",
    "routing_of",
]

#: How far back ``routing_of`` looks for the router (nodes visited).
_SEARCH_LIMIT = 256


@dataclass(frozen=True)
class GroupedOperands:
    """The graph values a grouped matmul reads (rule 1)."""

    x: torch.fx.Node  # (S, in) routed rows, sorted by group
    weight: torch.fx.Node  # (G, in, out) one matrix per group
    offs: torch.fx.Node  # (G,) cumulative rows per group
    bias: Any  # (G, out) node, or None


def expected_distinct_experts(experts: int, tokens: int, top_k: int) -> float:
    """Rule 3: the experts uniform routing of ``tokens`` tokens to ``top_k`` of ``experts``
    experts each is expected to use at least once."""
    return expected_distinct_rows(experts, tokens, top_k)


def is_grouped_mm(node: torch.fx.Node) -> bool:
    """True for a grouped matmul node (rule 1)."""
    return node.op == "call_function" and packet_name(node) in GROUPED_MM_OPS


def grouped_operands(node: torch.fx.Node) -> Optional[GroupedOperands]:
    """The operands of a grouped matmul node, or None when one is not a graph value."""
    if not is_grouped_mm(node):
        return None
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return None
    bound = {arg.name: (node.args[i] if i < len(node.args) else node.kwargs.get(arg.name, arg.default_value))
             for i, arg in enumerate(schema.arguments)}  # fmt: skip
    x, weight, offs = bound.get("input", bound.get("self")), bound.get("weight", bound.get("mat2")), bound.get("offs")
    if not (isinstance(x, torch.fx.Node) and isinstance(weight, torch.fx.Node) and isinstance(offs, torch.fx.Node)):
        return None
    return GroupedOperands(x, weight, offs, bound.get("bias"))


def routing_of(node: torch.fx.Node) -> Optional[Routing]:
    """Rule 2: the routing behind ``node`` (an expert op, or its offsets or ids)."""
    seen = {node}
    queue = deque([node])
    while queue and len(seen) <= _SEARCH_LIMIT:
        current = queue.popleft()
        if current.op == "call_function" and current.target is operator.getitem and current.args[1] == 1:
            source = current.args[0]
            if isinstance(source, torch.fx.Node) and source.op == "call_function" and packet_name(source) == "aten.topk":
                return _topk_routing(source)
        for arg in current.all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                queue.append(arg)
    return None


def _topk_routing(topk: torch.fx.Node) -> Optional[Routing]:
    scores = topk.args[0]
    k = topk.args[1] if len(topk.args) > 1 else topk.kwargs.get("k")
    dim = topk.args[2] if len(topk.args) > 2 else topk.kwargs.get("dim", -1)
    val = value_of(scores) if isinstance(scores, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not isinstance(k, int) or not isinstance(dim, int) or val.dim() == 0:
        return None
    shape = tuple(val.shape)
    if not all(isinstance(d, int) for d in shape):
        return None
    experts = shape[dim]
    tokens = 1
    for i, d in enumerate(shape):
        if i != dim % len(shape):
            tokens *= d
    if not 1 <= k <= experts or tokens < 1:
        return None
    return Routing(experts, tokens, k)
