"""What an op step does, apart from any machine: its FLOPs, the bytes it touches, the weights it reads.

The event simulator charges a step from its ``OpWork`` (``sim_timing``), and a planned
graph's decode layout sums the same records (``speed.graph_layout``), so a step costs the
same wherever it is timed.

Rules:

1. ``flops`` and ``bytes`` are ``op_cost``'s count for the step (``CountedCost``), and
   ``dtype_class`` the peak class of the step's dtype (``sim_timing`` rule 2).
2. A step *picks* weights when its node holds elements of a constant through views,
   copies and row picks (``weight_formats.stored_source``). A runtime that fuses a row
   pick into the op that reads it (``CostModel.fuses_row_picks``) reads each weight byte
   once: the pick is charged what it reads and not the rows it writes, and a step that
   reads rows a compute or host step picked is not charged for them again;
   ``fused_bytes`` is the step's bytes under that rule (never below 0). Rows a copy
   brought are read like any other value.
3. ``weight_bytes`` are the stored bytes of the weights the step reads (the rows it picks,
   or the constants it reads — at most what it touches), ``weights`` their elements, and
   ``weight_format`` the format most of those bytes are stored in (a dtype's own name,
   ``bf16`` or ``fp16``, for weights stored as their dtype; ``""`` when none).
4. Nothing here reads data or a machine: shapes, node records and the plan's steps decide.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Optional

import torch
import torch.fx

from ..graph_values import aliased_input, is_view_op, node_nbytes, value_of
from ..machine.cost_model import dtype_class
from ..machine.op_cost import CountedCost
from ..node_facts import facts_of, stored_format
from ..weight_formats import stored_source
from .steps import Step

__all__ = ["OpWork", "numel", "op_work", "stored_bytes"]

#: The weight format a tensor's own dtype is (rule 3), where the format table has it.
_DTYPE_FORMATS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
#: Longest chain of views, copies and picks followed back to a constant.
_MAX_CHAIN = 64


@dataclass(frozen=True)
class OpWork:
    """One op step's work, apart from any machine (module rules)."""

    flops: float  # FLOPs (rule 1)
    bytes: float  # bytes touched, as op_cost counts them (rule 1)
    fused_bytes: float  # bytes touched when row picks are fused into their readers (rule 2)
    dtype_class: str  # the peak-FLOP/s class of the step's dtype
    weight_bytes: float  # stored bytes of the weights it reads (rule 3)
    weights: float  # weight elements it reads
    weight_format: str  # the format most of those bytes are stored in ("" if none)


def numel(val: torch.Tensor) -> float:
    """Elements of ``val``, symbolic sizes at their hints."""
    n = 1.0
    for d in val.shape:
        n *= int(getattr(getattr(d, "node", None), "hint", d)) if not isinstance(d, int) else d
    return n


def stored_bytes(node: torch.fx.Node) -> float:
    """Bytes ``node``'s value holds as stored: at its weight format's bits when it has one."""
    val = value_of(node)
    if not isinstance(val, torch.Tensor):
        return 0.0
    fact = stored_format(node)
    if fact is not None:
        return numel(val) * fact.bits_per_weight / 8
    return float(node_nbytes(node, unbounded="hint"))


def _constant(node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and facts_of(node).resident is not None


def _weight_root(node: Optional[torch.fx.Node]) -> Optional[torch.fx.Node]:
    """The constant whose elements ``node`` holds (through views, copies and row picks), or None."""
    seen = 0
    while node is not None and seen < _MAX_CHAIN:
        if _constant(node):
            return node
        node = stored_source(node) if node.op == "call_function" else None
        seen += 1
    return None


def _picked_by_step(node: torch.fx.Node, events: Mapping[str, Step]) -> bool:
    """True when ``node``'s bytes were written by a compute or host step (not a copy and
    not a constant): rows rule 2 already charged at their pick."""
    while node.op == "call_function" and is_view_op(node.target):
        base = aliased_input(node)
        if base is None:
            break
        node = base
    step = events.get(node.name)
    return step is not None and step.copy is None and step.event in ("compute", "host")


def _format_of(node: torch.fx.Node) -> tuple[str, float]:
    """(format name or "", bits per element) of the weights ``node`` holds."""
    fact = stored_format(node)
    if fact is not None:
        return fact.name, fact.bits_per_weight
    val = value_of(node)
    if isinstance(val, torch.Tensor):
        return _DTYPE_FORMATS.get(val.dtype, ""), float(val.element_size() * 8)
    return "", 0.0


def _tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), lambda a: found.append(a) or a)  # type: ignore[func-returns-value]
    return [a for a in found if isinstance(value_of(a), torch.Tensor)]


def op_work(node: torch.fx.Node, counted: CountedCost, dtype: torch.dtype, events: Mapping[str, Step]) -> OpWork:
    """The work of the op step of ``node`` (module rules); ``counted``: its ``op_cost``
    count, ``dtype``: its dtype, ``events``: the plan's event steps by name."""
    nbytes = float(counted.cost.bytes_touched)
    fused = nbytes
    by_format: defaultdict[str, float] = defaultdict(float)
    bits: dict[str, float] = {}

    def note(holder: torch.fx.Node, amount: float) -> None:
        name, width = _format_of(holder)
        bits[name] = width
        by_format[name] += amount

    picks = _weight_root(node) is not None
    if picks:  # rule 2: a pick is charged what it reads, not the rows it writes
        fused -= stored_bytes(node)
        note(node, stored_bytes(node))
    for arg in _tensor_args(node):
        root = _weight_root(arg)
        if root is None:
            continue
        if _picked_by_step(arg, events):  # rule 2: read again, charged at the pick
            fused -= stored_bytes(arg)
        elif not picks:  # rule 3: what it reads of a constant — all of it, or the groups an index selects
            note(arg, min(stored_bytes(arg), nbytes))
    weights = sum(b * 8 / bits[f] for f, b in by_format.items() if bits[f] > 0)
    main = max(by_format, key=lambda k: by_format[k]) if by_format else ""
    return OpWork(float(counted.cost.flops), nbytes, max(0.0, fused), dtype_class(dtype), sum(by_format.values()), weights,
                  main)  # fmt: skip
