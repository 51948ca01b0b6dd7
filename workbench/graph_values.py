"""Facts about the values of an exported graph: tensors, sizes, views.

These helpers read ``node.meta["val"]`` (the fake tensor torch.export records for every
value) and never touch real data, so they work the same on shape-only programs. A value
stored in a weight format (``node_facts.StoredFormat``, recorded by ``quantize``) is as
many bytes as that format stores, not its dtype's.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import operator
from typing import Any, Iterator

import torch
import torch.fx
from .errors import WorkbenchError
from .node_facts import stored_format

#: Grouped matmul ops, by op name without overload: one matrix per group of rows.
GROUPED_MM_OPS = frozenset({"aten._grouped_mm", "transformers.grouped_mm_fallback"})

#: Sizes at or above this are treated as unbounded (torch.export's int_oo is huge).
_UNBOUNDED = 2**62


class UnboundedShapeError(WorkbenchError, ValueError):
    """A tensor size has no finite upper bound, so it cannot be given memory."""


class GraphValueError(WorkbenchError, TypeError):
    """A node's argument is not the kind of graph value the caller needs."""


def value_of(node: torch.fx.Node) -> Any:
    """The example value torch.export recorded for ``node`` (a fake tensor, tuple, SymInt…)."""
    return node.meta.get("val")


def call_node(graph: torch.fx.Graph, target: Any, args: tuple, name: str, kwargs: dict[str, Any] | None = None,
              fake_mode: Any = None) -> torch.fx.Node:  # fmt: skip
    """A new ``call_function`` node of ``target`` at the graph's insertion point, its ``val``
    the target run on its arguments' values (under ``fake_mode`` when some argument is no
    fake tensor of the graph's own mode, e.g. a new factory op)."""
    node = graph.create_node("call_function", target, args, kwargs or {}, name=name)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        node.meta["val"] = target(*torch.fx.node.map_arg(args, value_of), **(kwargs or {}))
    return node


def produces_tensors(node: torch.fx.Node) -> bool:
    """True when ``node`` produces a tensor or a tuple/list holding tensors."""
    val = value_of(node)
    if isinstance(val, torch.Tensor):
        return True
    if isinstance(val, (tuple, list)):
        return any(isinstance(v, torch.Tensor) for v in val)
    return False


def _dim_upper_bound(dim: Any, what: str, unbounded: str = "raise") -> int:
    if isinstance(dim, int):
        return dim
    expr = dim.node.expr
    shape_env = dim.node.shape_env
    upper = shape_env.bound_sympy(expr).upper
    try:
        bound = _UNBOUNDED if getattr(upper, "is_infinite", False) else int(upper)
    except Exception:  # sympy infinities raise assorted errors on int()
        bound = _UNBOUNDED
    if bound >= _UNBOUNDED and unbounded == "hint":
        return int(dim.node.hint)
    if bound >= _UNBOUNDED:
        raise UnboundedShapeError(
            f"{what}: size {expr} has no upper bound, so its memory cannot be planned; "
            f"export with a bounded dimension, e.g. dynamic_shapes with "
            f"torch.export.Dim('{expr}', max=4096)"
        )
    return bound


def shape_upper_bound(val: torch.Tensor, what: str = "tensor", unbounded: str = "raise") -> tuple[int, ...]:
    """The shape of ``val`` with every symbolic size replaced by its export upper bound.

    An unbounded size raises ``UnboundedShapeError``, or with ``unbounded="hint"`` takes
    the example input's size (for reports, never for memory).
    """
    return tuple(_dim_upper_bound(d, what, unbounded) for d in val.shape)


def tensor_nbytes(val: torch.Tensor, what: str = "tensor", unbounded: str = "raise") -> int:
    """Bytes of a contiguous tensor of ``val``'s shape and dtype, at the shape's upper bound."""
    numel = val.numel()
    if isinstance(numel, int):  # static shape: the common, fast case
        return numel * val.element_size()
    numel = 1
    for d in shape_upper_bound(val, what, unbounded):
        numel *= d
    return numel * val.element_size()


def node_nbytes(node: torch.fx.Node, unbounded: str = "raise") -> int:
    """Bytes of the tensor(s) ``node`` produces (0 for non-tensor values); a value stored
    in a weight format takes that format's bytes."""
    val = value_of(node)
    what = f"value {node.name!r}"
    if isinstance(val, torch.Tensor):
        stored = stored_format(node)
        if stored is not None:
            return stored.nbytes(tensor_nbytes(val, what, unbounded) // val.element_size())
        return tensor_nbytes(val, what, unbounded)
    if isinstance(val, (tuple, list)):
        return sum(tensor_nbytes(v, what, unbounded) for v in val if isinstance(v, torch.Tensor))
    return 0


def node_arg(node: torch.fx.Node, position: int) -> torch.fx.Node:
    """The graph value passed as positional argument ``position`` of ``node``; anything else
    there (a constant, a list) is a ``TypeError`` naming the node."""
    arg = node.args[position]
    if not isinstance(arg, torch.fx.Node):
        raise GraphValueError(f"argument {position} of {node.name!r} ({node.target}) is {arg!r}, not a graph value")
    return arg


def output_values(node: torch.fx.Node) -> tuple[Any, ...]:
    """What the graph's ``output`` node returns, one entry per output."""
    values = node.args[0]
    return tuple(values) if isinstance(values, (tuple, list)) else (values,)


def op_name(node: torch.fx.Node) -> str:
    """A readable op name: ``aten.mm.default``, ``getitem``, ``placeholder``."""
    if node.op != "call_function":
        return node.op
    return _target_name(node.target)


def wrapped_overload(target: Any) -> torch._ops.OpOverload | None:
    """The aten/library overload behind a target; wrappers such as ExecuTorch's edge ops
    keep the op they wrap in ``_op``, so they are named (and matched) like it."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    inner = getattr(target, "_op", None)
    return inner if isinstance(inner, torch._ops.OpOverload) else None


@functools.lru_cache(maxsize=4096)
def _target_name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    overload = wrapped_overload(target)
    if overload is not None:
        return str(overload)
    return getattr(target, "__name__", str(target))


def packet_name(node: torch.fx.Node) -> str:
    """The op name without its overload: ``aten.mm``."""
    name = op_name(node)
    if node.op == "call_function" and wrapped_overload(node.target) is not None:
        return name.rsplit(".", 1)[0]
    return name


#: Ops that look only at shapes, dtypes and strides, never at data.
METADATA_OPS = frozenset(
    {"aten._assert_tensor_metadata", "aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset"}
)


def reads_metadata_only(node: torch.fx.Node) -> bool:
    """True for an op that reads only shapes, dtypes and strides of its inputs, never
    their data: it can read a value wherever the value lives, so it never needs a copy."""
    return node.op == "call_function" and packet_name(node) in METADATA_OPS


def is_view_op(target: Any) -> bool:
    """True when ``target`` returns an alias of an input without writing it (a view op).

    Decided from the op's schema (an alias annotation on a return that is not a write),
    so every aten view op torch.export produces is covered without a hand-kept list.
    """
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    for ret in schema.returns:
        info = ret.alias_info
        if info is not None and not info.is_write:
            return True
    return False


def is_inplace_op(target: Any) -> bool:
    """True when ``target`` writes one of its inputs and returns it (``add_``, ``copy_``, ``out=``)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    return any(r.alias_info is not None and r.alias_info.is_write for r in schema.returns)


def aliased_input(node: torch.fx.Node) -> torch.fx.Node | None:
    """For a view or in-place node, the input whose storage its result shares; else None.

    The aliased input is the argument whose schema alias set matches the return's.
    """
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        return None
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns or schema.returns[0].alias_info is None:
        return None
    ret_sets = schema.returns[0].alias_info.before_set
    for i, arg in enumerate(schema.arguments):
        info = arg.alias_info
        if info is None or not (info.before_set & ret_sets):
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, torch.fx.Node):
            return value
    return None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a pass builds or walks a large graph.

    Building tens of thousands of fx nodes (or records, events and fake tensors per node:
    a capture, a strategy's passes, a memory plan, a step analysis, an estimate) triggers
    many collections that scan every live object, which makes the work grow faster than
    linearly — about a fifth of a full-size capture's or strategy's time; the garbage
    cycles such work leaves are few, so collection can wait until it finishes. Nested
    pauses leave the collector as the outermost found it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
