"""``out=`` variants: how an op writes its result into tensors given to it.

The executor writes a planned value straight into its arena slot when the op can do so,
instead of computing it into fresh memory and copying it over.

Rules:
1. The variant of ``aten.foo.<name>`` is an overload of ``aten.foo`` whose arguments,
   apart from the tensors it writes, are the op's own arguments (same names and types,
   in order): so calling it with the op's arguments plus the written tensors computes
   the same values. ``<name>_out`` and ``out`` are tried first (``sum.dim_IntList`` has
   its variant as ``sum.IntList_out``, so the others are tried too).
2. A factory's ``dtype``, ``layout``, ``device`` and ``pin_memory`` keywords are left out
   when its variant lacks them: the written tensor already has that dtype and device.
3. A variant writes one tensor per result, in the order of the results (``topk.values``
   writes ``values`` and ``indices``).
4. A dtype conversion (``to.dtype``, ``_to_copy`` changing only dtype or memory format)
   writes by copying its input into the given tensor, which converts as it copies.
5. Ops that are not ``torch._ops.OpOverload`` (custom Python callables, ``getitem``) have
   no variant.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

__all__ = ["OutVariant", "out_variant"]

#: Factory keywords the written tensor fixes (rule 2).
FACTORY_KEYWORDS = frozenset({"dtype", "layout", "device", "pin_memory"})
#: Conversions that write by copying (rule 4), and the keywords they may carry.
CONVERSIONS = {
    torch.ops.aten.to.dtype: frozenset({"dtype", "non_blocking", "copy", "memory_format"}),
    torch.ops.aten._to_copy.default: frozenset({"dtype", "non_blocking", "memory_format", "layout", "device"}),
}


@dataclass(frozen=True)
class OutVariant:
    """How one op writes its results into given tensors (see module rules)."""

    op: Optional[torch._ops.OpOverload]  # the variant; None for a conversion (rule 4)
    out_names: tuple[str, ...]  # the keyword-only arguments the results go into, in result order
    dropped: frozenset[str] = frozenset()  # the op's keywords the variant does not take (rule 2)

    @property
    def results(self) -> int:
        return len(self.out_names)

    def __call__(self, args: tuple, kwargs: dict, outs: Sequence[torch.Tensor]) -> Any:
        """Write the results of ``op(*args, **kwargs)`` into ``outs``; returns what the op
        returns (the written tensors)."""
        if self.op is None:  # rule 4
            outs[0].copy_(args[0])
            return outs[0]
        kept = {k: v for k, v in kwargs.items() if k not in self.dropped}
        result = self.op(*args, **kept, **dict(zip(self.out_names, outs)))
        return result


def _signature(schema: Any, skip: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    return [
        (a.name, str(a.type))
        for a in schema.arguments
        if not (a.alias_info is not None and a.alias_info.is_write) and a.name not in skip
    ]


@functools.lru_cache(maxsize=4096)
def out_variant(target: Any) -> Optional[OutVariant]:
    """Rules 1-5: how ``target`` writes into given tensors, or None."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    if target in CONVERSIONS:
        return OutVariant(None, ("out",))
    packet = target.overloadpacket
    own = target._overloadname
    names = packet.overloads()
    ordered = [n for n in (f"{own}_out", "out") if n in names] + [n for n in names if n not in (own, f"{own}_out", "out")]
    results = len(target._schema.returns)
    for name in ordered:
        candidate = getattr(packet, name)
        written = [a for a in candidate._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if len(written) != results or len(candidate._schema.returns) != results or not all(a.kwarg_only for a in written):
            continue
        taken = {a.name for a in candidate._schema.arguments}
        dropped = frozenset(a.name for a in target._schema.arguments if a.name in FACTORY_KEYWORDS and a.name not in taken)
        if _signature(candidate._schema) == _signature(target._schema, skip=dropped):
            return OutVariant(candidate, tuple(a.name for a in written), dropped)
    return None
