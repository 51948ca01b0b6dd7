"""ExecuTorch's operator names resolved to torch's operators, and their out-variant schemas.

An ExecuTorch kernel call names its operator (``aten::addmm``, overload ``out``) and lists
every argument of that overload's schema in order, then its returns. The schema says which
arguments the kernel writes (``Tensor(a!) out``), and the functional overload with the same
other arguments (``aten::addmm`` → ``aten.addmm.default``) is the op the workbench's graph
records, so the cost model can count its FLOPs.

Rules:
1. ``torch_overload`` finds ``torch.ops.<namespace>.<name>.<overload>``, or None when torch
   has no such operator registered (a backend's own kernel library).
2. ``written_positions`` are the schema's out arguments (kwarg-only, written through an
   alias); ``argument_count`` is the number of schema arguments (returns follow them).
3. ``functional_overload`` is the overload of the same packet that writes nothing and takes
   the out variant's arguments without the out ones — the same positional arguments, the
   same keyword-only ones, and possibly more keyword-only ones that have defaults (a
   factory's ``dtype``, ``device`` …); an exact match wins. None if there is none.
4. ``is_view_copy``: an edge ``*_copy`` op whose aten base op is a view op
   (``permute_copy`` of ``permute``): ExecuTorch materialises the view into new memory.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from ..graph_values import is_view_op

__all__ = [
    "argument_count",
    "functional_overload",
    "is_view_copy",
    "torch_overload",
    "written_positions",
]


@functools.cache
def torch_overload(name: str, overload: str) -> Optional[torch._ops.OpOverload]:
    """Rule 1: ``("aten::addmm", "out")`` → ``torch.ops.aten.addmm.out``."""
    namespace, _, op = name.partition("::")
    if not op:
        return None
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        found = getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return None
    return found if isinstance(found, torch._ops.OpOverload) else None


def written_positions(op: torch._ops.OpOverload) -> tuple[int, ...]:
    """Rule 2: positions of the arguments ``op`` writes."""
    return tuple(i for i, a in enumerate(op._schema.arguments) if a.is_out)


def argument_count(op: torch._ops.OpOverload) -> int:
    """Rule 2: how many arguments the schema has (a kernel call lists its returns after them)."""
    return len(op._schema.arguments)


def _signature(arguments: Any) -> tuple[tuple[str, str, bool], ...]:
    return tuple((a.name, str(a.type), a.kwarg_only) for a in arguments)


def _writes(arguments: Any) -> bool:
    return any(a.is_out or (a.alias_info is not None and a.alias_info.is_write) for a in arguments)


def _takes(candidate: Any, wanted: tuple[tuple[str, str, bool], ...]) -> bool:
    """Rule 3 without exactness: ``wanted`` plus keyword-only arguments with defaults."""
    have = _signature(candidate)
    positional = [a for a in have if not a[2]]
    extra = [a for a, spec in zip(have, candidate) if a[2] and a not in wanted and not spec.has_default_value()]
    return positional == [a for a in wanted if not a[2]] and set(wanted) <= set(have) and not extra


@functools.cache
def functional_overload(op: torch._ops.OpOverload) -> Optional[torch._ops.OpOverload]:
    """Rule 3: ``aten.addmm.out`` → ``aten.addmm.default``; ``aten.add.out`` → ``aten.add.Tensor``;
    ``aten.arange.start_out`` → ``aten.arange.start_step``."""
    schema = op._schema
    if not any(a.is_out for a in schema.arguments):
        return op
    wanted = _signature([a for a in schema.arguments if not a.is_out])
    packet = getattr(getattr(torch.ops, op.namespace), schema.name.split("::")[-1])
    candidates = [getattr(packet, name) for name in packet.overloads()]
    candidates = [c for c in candidates if not _writes(c._schema.arguments)]
    exact = [c for c in candidates if _signature(c._schema.arguments) == wanted]
    loose = [c for c in candidates if _takes(c._schema.arguments, wanted)]
    return (exact or loose or [None])[0]


@functools.cache
def is_view_copy(op: str) -> bool:
    """Rule 4, on a short op name (``permute_copy``, ``split_with_sizes_copy``)."""
    packet = getattr(torch.ops.aten, op.removesuffix("_copy"), None) if op.endswith("_copy") else None
    return packet is not None and any(is_view_op(getattr(packet, o)) for o in packet.overloads())
