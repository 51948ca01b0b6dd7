"""``out=`` variants: the overload of an op that writes its result into a given tensor.

The executor writes a planned value straight into its arena slot when the op has an
``out=`` variant, instead of computing it into fresh memory and copying it over.

Rules:
1. The variant of ``aten.foo.<name>`` is an overload of ``aten.foo`` whose arguments,
   apart from the ``out`` tensor it writes, are the op's own arguments (same names and
   types, in order): so calling it with the op's arguments plus ``out=`` computes the
   same value. ``<name>_out`` and ``out`` are tried first (``sum.dim_IntList`` has its
   variant as ``sum.IntList_out``, so the others are tried too).
2. Only single-result variants are used: exactly one written argument, returned.
3. Ops that are not ``torch._ops.OpOverload`` (custom Python callables, ``getitem``) have
   no variant.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import torch

__all__ = ["OutVariant", "out_variant"]


@dataclass(frozen=True)
class OutVariant:
    """The ``out=`` overload of an op and the keyword its result is written through."""

    op: torch._ops.OpOverload
    out_name: str  # the keyword-only argument the result goes into (usually "out")

    def __call__(self, args: tuple, kwargs: dict, out: torch.Tensor) -> Any:
        return self.op(*args, **kwargs, **{self.out_name: out})


def _signature(schema: Any, skip_written: bool) -> list[tuple[str, str]]:
    return [
        (a.name, str(a.type))
        for a in schema.arguments
        if not (skip_written and a.alias_info is not None and a.alias_info.is_write)
    ]


@functools.lru_cache(maxsize=4096)
def out_variant(target: Any) -> Optional[OutVariant]:
    """Rules 1-3: the ``out=`` variant of ``target``, or None."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    packet = target.overloadpacket
    own = target._overloadname
    wanted = _signature(target._schema, skip_written=False)
    names = packet.overloads()
    for name in [n for n in (f"{own}_out", "out") if n in names] + [n for n in names if n not in (own, f"{own}_out", "out")]:
        candidate = getattr(packet, name)
        written = [a for a in candidate._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if len(written) != 1 or len(candidate._schema.returns) != 1 or not written[0].kwarg_only:
            continue
        if _signature(candidate._schema, skip_written=True) == wanted:
            return OutVariant(candidate, written[0].name)
    return None
