"""What an op costs, counted from its arguments' shapes: FLOPs and bytes touched (``cost_model`` rule 3).

``op_cost`` counts FLOPs with ``torch.utils.flop_counter.FlopCounterMode`` on meta copies
of the arguments (never by hand), and bytes as the tensors an op reads plus those it
writes, with the exceptions ``cost_model`` rule 3 lists (grouped matmuls, row pickers,
ops whose FLOPs cannot be counted). ``CostModel`` turns these counts into time.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, Mapping, NamedTuple, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils.flop_counter import FlopCounterMode

from ..copy_ops import SELECT_ROWS
from ..errors import WorkbenchError, WorkbenchWarning
from ..graph_values import GROUPED_MM_OPS

__all__ = [
    "CostModelError",
    "CostModelTypeError",
    "CostModelWarning",
    "CountedCost",
    "OpCost",
    "Stored",
    "UncountedOps",
    "concrete_size",
    "cost_depends_on_data",
    "count_op_cost",
    "grouped_mm_cost",
    "op_cost",
    "op_label",
    "present_groups_count",
]


class CostModelWarning(WorkbenchWarning):
    """An op's FLOPs could not be counted (rule 3c): it is costed by its bytes alone."""


class CostModelError(WorkbenchError, ValueError):
    """A cost model figure, preset, copy kind or file is not valid (the message says what is)."""


class CostModelTypeError(WorkbenchError, TypeError):
    """A cost model figure or argument has the wrong type."""



class OpCost(NamedTuple):
    """FLOPs and bytes touched (read + written) by one op."""

    flops: int
    bytes_touched: int


class Stored(NamedTuple):
    """Which of an op's tensors are stored in a weight format rather than as their dtype
    (``cost_model`` rule 3d), from the ``node_facts.StoredFormat`` of its argument nodes."""

    inputs: tuple[Optional[tuple[float, float]], ...]  # per tensor argument, flattened: (bits, dequant ops) per element, or None
    output_bits: Optional[float] = None  # bits per element of the result when it is stored too (a copy, a view, a row pick)

    def __bool__(self) -> bool:
        return self.output_bits is not None or any(spec is not None for spec in self.inputs)


_Bits = Mapping[int, tuple[float, float]]  # id of a tensor argument → (bits, dequant ops) per element


def _numel(t: torch.Tensor) -> int:
    return math.prod(concrete_size(d) for d in t.shape)


def _nbytes(t: torch.Tensor, bits: Optional[_Bits] = None) -> int:
    spec = bits.get(id(t)) if bits else None
    if spec is not None:
        return math.ceil(_numel(t) * spec[0] / 8)
    return _numel(t) * t.element_size()


def _written(out: Any, stored: Optional[Stored]) -> int:
    tensors = _tensors(out)
    if stored is not None and stored.output_bits is not None:
        return sum(math.ceil(_numel(t) * stored.output_bits / 8) for t in tensors)
    return sum(_nbytes(t) for t in tensors)


def _bits_of(args: tuple, kwargs: dict, stored: Optional[Stored]) -> dict[int, tuple[float, float]]:
    if not stored:
        return {}
    return {id(t): spec for t, spec in zip(_tensors((args, kwargs)), stored.inputs) if spec is not None}


def _dequant_flops(fn: Any, args: tuple, bits: _Bits, stored: Optional[Stored], grouped_share: float = 1.0) -> int:
    """Rule 3d: operations to dequantize the stored weights an op computes with (none
    when its result is stored the same way: a copy, a view or a row pick moves codes)."""
    if not bits or (stored is not None and stored.output_bits is not None):
        return 0
    total = 0.0
    for t in _tensors(args):
        spec = bits.get(id(t))
        if spec is not None:
            total += _numel(t) * spec[1]
    return int(round(total * grouped_share))


def concrete_size(d: Any) -> int:
    if isinstance(d, int):
        return d
    hint = getattr(getattr(d, "node", None), "hint", None)  # a backed SymInt's example value
    if hint is None:
        raise CostModelError(f"size {d} has no concrete value")
    return int(hint)


def _to_meta(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    shape = tuple(concrete_size(d) for d in x.shape)
    stride = tuple(concrete_size(s) for s in x.stride())
    return torch.empty_strided(shape, stride, dtype=x.dtype, device="meta")


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _is_view_op(fn: Any) -> bool:
    return isinstance(fn, torch._ops.OpOverload) and bool(getattr(fn, "is_view", False))


def _counted(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[int, Any]:
    with FlopCounterMode(display=False) as counter:
        out = fn(*args, **kwargs)
    return int(counter.get_total_flops()), out


def _formula_flops(fn: Any, args: tuple, kwargs: dict, outputs: Any) -> int:
    """FLOPs from FlopCounterMode's own formula for ``fn``, given its outputs (0 if none)."""
    packet = getattr(fn, "overloadpacket", None)
    formula = FlopCounterMode(display=False).flop_registry.get(packet) if packet is not None else None
    if formula is None or outputs is None:
        return 0
    return int(formula(*args, **kwargs, out_val=outputs))


class CountedCost(NamedTuple):
    """An op's cost and, when its FLOPs could not be counted (rule 3c), why."""

    cost: OpCost
    uncounted: str  # "" when FLOPs were counted


class UncountedOps:
    """The ops whose FLOPs one estimate or run could not count (rule 3c), reported once."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}  # op name → why, first seen

    def add(self, fn: Any, reason: str) -> None:
        if reason:
            self.reasons.setdefault(op_label(fn), reason)

    def warn(self, what: str, stacklevel: int = 2) -> None:
        """One ``CostModelWarning`` naming every collected op once (nothing if none)."""
        if not self.reasons:
            return
        listed = "; ".join(f"{name} ({reason})" for name, reason in self.reasons.items())
        warnings.warn(
            f"{what}: the cost model cannot count the FLOPs of {len(self.reasons)} op(s), costed by their "
            f"bytes alone: {listed}",
            CostModelWarning,
            stacklevel=stacklevel + 1,
        )


def op_label(fn: Any) -> str:
    """An op as warnings name it: ``aten.nonzero.default``, ``linear``."""
    if isinstance(fn, torch._ops.OpOverload):
        return str(fn)
    return getattr(fn, "__name__", repr(fn))


def op_cost(
    fn: Callable[..., Any] | Any,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    outputs: Any = None,
    expected_groups: Optional[float] = None,
    stored: Optional[Stored] = None,
) -> OpCost:
    """FLOPs and bytes touched by ``fn(*args, **kwargs)`` (an aten op or any torch callable).

    Inputs may be real, meta or fake tensors; the op runs on meta copies of them under
    ``FlopCounterMode``, so no real data is read and no memory is allocated. Bytes touched
    = bytes of every input tensor argument (one passed twice counts twice) + bytes of
    every output tensor; view ops touch none; row pickers and grouped matmuls as
    rule 3 says (``expected_groups``: the groups a grouped matmul is expected to read, when
    its offsets are not real).
    If the op has no meta kernel (data-dependent output shapes), it runs on the real
    inputs when they are real, else FLOPs come from FlopCounterMode's formula applied to
    ``outputs`` (e.g. ``node.meta["val"]``), or 0. An op whose FLOPs are not counted
    warns (``CostModelWarning``, rule 3c).
    """
    counted = count_op_cost(fn, args, kwargs, outputs=outputs, expected_groups=expected_groups, stored=stored)
    if counted.uncounted:
        warnings.warn(f"op_cost({op_label(fn)}): {counted.uncounted}", CostModelWarning, stacklevel=2)
    return counted.cost


def count_op_cost(
    fn: Callable[..., Any] | Any,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    outputs: Any = None,
    expected_groups: Optional[float] = None,
    stored: Optional[Stored] = None,
) -> CountedCost:
    """``op_cost`` without the warning: the cost and why its FLOPs were not counted ("" if they were)."""
    kwargs = dict(kwargs or {})
    if _is_view_op(fn):
        return CountedCost(OpCost(0, 0), "")
    bits = _bits_of(tuple(args), kwargs, stored)
    read = sum(_nbytes(t, bits) for t in _tensors((args, kwargs)))
    grouped = _is_grouped_mm(fn)
    try:
        meta_args, meta_kwargs = tree_map(_to_meta, (tuple(args), kwargs))
        flops, out = _counted(fn, meta_args, meta_kwargs)
        written = _written(out, stored)
        if grouped:
            return _grouped_or_uncounted(fn, args, kwargs, written, expected_groups, bits, stored)
        flops += _dequant_flops(fn, tuple(args), bits, stored)
        return CountedCost(OpCost(flops, _row_gather_read(fn, args, read, written, bits) + written), _unknown_flops(fn, flops))
    except Exception as meta_error:  # no meta kernel, data-dependent shape, unbacked size
        reason = f"{type(meta_error).__name__}: {' '.join(str(meta_error).split())[:160]}"
    inputs = _tensors((args, kwargs))
    if grouped and outputs is not None:
        return _grouped_or_uncounted(fn, args, kwargs, _written(outputs, stored), expected_groups, bits, stored)
    if inputs and all(t.device.type not in ("meta",) and not _is_fake(t) for t in inputs):
        flops, out = _counted(fn, tuple(args), kwargs)
        cost = OpCost(flops + _dequant_flops(fn, tuple(args), bits, stored), read + _written(out, stored))
        if grouped:
            return _grouped_or_uncounted(fn, args, kwargs, cost.bytes_touched - read, expected_groups, bits, stored)
        return CountedCost(cost, _unknown_flops(fn, flops))
    written = _written(outputs, stored) if outputs is not None else 0
    try:
        flops = _formula_flops(fn, tuple(args), kwargs, outputs)
    except Exception:
        flops = 0
    why = f"cannot run on meta tensors ({reason}); FLOPs {'from the formula for the given outputs' if flops else 'counted as 0'}"
    return CountedCost(OpCost(flops + _dequant_flops(fn, tuple(args), bits, stored), read + written), why)


#: aten ops that multiply matrices but have no FlopCounterMode formula (rule 3c).
_MATMUL_WITHOUT_FORMULA = frozenset(
    {"aten._int_mm", "aten._weight_int4pack_mm", "aten._weight_int8pack_mm", "aten._scaled_grouped_mm",
     "aten._weight_int4pack_mm_for_cpu", "aten._dyn_quant_matmul_4bit"}
)  # fmt: skip
#: Namespaces whose ops FlopCounterMode's count (or its 0) describes (rule 3c).
_COUNTED_NAMESPACES = frozenset({"aten", "prims", "workbench"})


def _packet(fn: Any) -> str:
    packet = getattr(fn, "overloadpacket", None)
    return str(packet) if packet is not None else ""


def _is_grouped_mm(fn: Any) -> bool:
    return _packet(fn) in GROUPED_MM_OPS


def _unknown_flops(fn: Any, flops: int) -> str:
    """Rule 3c for an op that ran: why 0 FLOPs may be wrong, or ""."""
    if flops or not isinstance(fn, torch._ops.OpOverload):
        return ""
    if fn.namespace not in _COUNTED_NAMESPACES:
        return f"a custom {fn.namespace} op that FlopCounterMode has no formula for; FLOPs counted as 0"
    if _packet(fn) in _MATMUL_WITHOUT_FORMULA:
        return "a matmul that FlopCounterMode has no formula for; FLOPs counted as 0"
    return ""


def cost_depends_on_data(fn: Any, args: tuple, kwargs: dict) -> bool:
    """True when ``fn``'s cost reads its arguments' values: a grouped matmul with real
    offsets (rule 3a). Such costs must not be cached by shapes."""
    if not _is_grouped_mm(fn):
        return False
    offs = _grouped_args(args, kwargs)[2]
    return isinstance(offs, torch.Tensor) and offs.device.type != "meta" and not _is_fake(offs)


def _grouped_args(args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
    """(x, weight, offs) of a grouped matmul call, by position or schema name."""
    x = args[0] if args else kwargs.get("input", kwargs.get("self"))
    w = args[1] if len(args) > 1 else kwargs.get("weight", kwargs.get("mat2"))
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    return x, w, offs


def present_groups_count(offs: torch.Tensor) -> int:
    """Groups owning at least one row, from real cumulative row offsets (G,)."""
    ends = offs.detach().to("cpu", torch.int64).reshape(-1)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    return int((ends > starts).sum())


def grouped_mm_cost(
    x: torch.Tensor,
    weight: torch.Tensor,
    offs: Optional[torch.Tensor],
    written: int,
    expected_groups: Optional[float] = None,
    weight_stored: Optional[tuple[float, float]] = None,
) -> OpCost:
    """Rule 3a: FLOPs and bytes of a grouped matmul of ``x`` (S, in) by ``weight`` (G, in,
    out) grouped by ``offs`` (G,) whose output has ``written`` bytes. Slabs read: the
    groups with rows in real ``offs``, else ``expected_groups`` (at most G), else min(G, S).
    ``weight_stored`` (bits, dequant ops per element): the weight is stored in a weight
    format, read at its bits and dequantized (rule 3d)."""
    rows, inner = (concrete_size(d) for d in x.shape)
    groups, _, width = (concrete_size(d) for d in weight.shape)
    flops = 2 * rows * inner * width
    if offs is not None and offs.device.type != "meta" and not _is_fake(offs):
        read_groups: float = present_groups_count(offs)
    elif expected_groups is not None:
        read_groups = min(float(groups), float(expected_groups))
    else:
        read_groups = float(min(groups, rows))
    bits = {id(weight): weight_stored} if weight_stored is not None else None
    slab = _nbytes(weight, bits) / groups if groups else 0.0
    offs_bytes = _nbytes(offs) if offs is not None else 0
    if weight_stored is not None and groups:
        flops += int(round(read_groups * _numel(weight) / groups * weight_stored[1]))
    return OpCost(flops, int(round(_nbytes(x) + offs_bytes + written + read_groups * slab)))


def _grouped_or_uncounted(
    fn: Any, args: tuple, kwargs: dict, written: int, expected_groups: Optional[float], bits: _Bits, stored: Optional[Stored]
) -> CountedCost:
    """Rule 3a for the form transformers uses (x 2-D, one 3-D slab stack, offsets); any
    other grouped form is costed by its bytes and named (rule 3c)."""
    x, w, offs = _grouped_args(tuple(args), kwargs)
    if isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.dim() == 2 and w.dim() == 3 and isinstance(offs, torch.Tensor):
        return CountedCost(grouped_mm_cost(x, w, offs, written, expected_groups, bits.get(id(w))), "")
    read = sum(_nbytes(t, bits) for t in _tensors((args, kwargs)))
    return CountedCost(OpCost(_dequant_flops(fn, tuple(args), bits, stored), read + written), "a grouped matmul of a form other than 2-D rows by 3-D slabs with offsets; FLOPs counted as 0")


@functools.lru_cache(maxsize=1)
def _row_gather_ops() -> frozenset:
    """Ops whose first argument is the source they pick rows of (built once)."""
    aten = torch.ops.aten
    return frozenset({
        aten.index_select.default,  # index_select(source, dim, index)
        aten.embedding.default,  # embedding(weight, indices)
        aten.gather.default,  # gather(source, dim, index)
        aten.index.Tensor,  # source[indices]
        SELECT_ROWS,
    })  # fmt: skip


def _row_gather_read(fn: Any, args: tuple, read: int, written: int, bits: Optional[_Bits] = None) -> int:
    """Ops that pick rows out of a big source read only the rows they pick: counting the
    whole source (an embedding table, a stack of 256 weight slabs) as read would charge a
    decode step gigabytes it never touches."""
    if fn not in _row_gather_ops() or not args or not isinstance(args[0], torch.Tensor):
        return read
    return read - _nbytes(args[0], bits) + min(written, _nbytes(args[0], bits))


def _is_fake(t: torch.Tensor) -> bool:
    return isinstance(t, FakeTensor)
