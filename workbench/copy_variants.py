"""The registry of copy variants: every kind of copy node, declared once.

A copy variant is one way a propagated graph moves bytes between devices: a plain copy of
a whole value, a gather of the rows an index selects, a prefetch, a reuse of rows a
prefetch holds, a copy of only the rows an index lists as real … Each is declared once, as
a ``CopyVariant``, with everything the stages need of it; the stages dispatch through
the registry and never name a variant themselves:

- ``ops``: the ``torch.library`` ops its node may call, with the ``CopyKind`` of each. The
  op's own kernel is the variant's host (``cpu``) handler: it is what runs when the
  propagated graph runs as plain PyTorch (``DeviceGraph.module()``).
- ``inputs``: the ``CopyRecord`` fields its node reads, in the order of the node's
  arguments (``src`` and ``dst`` follow): the facts its step carries. The plan checks
  read a node against them.
- ``rewrite``: its graph rewrite hook, or None. Propagation offers every captured op
  placed on a device to each registered hook in registration order; the first that
  returns a node replaces the op (``rewrite(context, old, target)``, ``context`` being
  propagation's ``RewriteContext``).
- ``handlers``: executor backend name (``"sim"``, ``"cuda"``) → how a run moves its
  bytes: ``handler(run, entry, record, dst, x, index)`` (``run`` is the call's
  ``CopyRun``, ``dst`` the planned destination, ``x`` the source, ``index`` the rows
  selected, or None).
- ``cost``: what ``estimate`` charges its step, from shapes alone:
  ``cost(model, step, node, record, workload) -> (() -> (µs, bytes, flops))`` (``workload``:
  the data the estimate expects, ``runtime.workload.Workload``).
- ``render``: the words a timeline shows for one of its copy events.
- ``prepare``: called once per propagation before the first op is offered to ``rewrite``
  (to find the ops it will rewrite; it may ``defer`` captured nodes it emits itself).
- ``reason``: the sentence of a copy's record that says why it exists (rule 9 of
  ``propagate``): ``reason(context, facts, readers)``; None for a variant only made by a
  plain read (propagation words those itself).
- ``check``: what the plan checks read of a record beyond its inputs, kind, devices and
  bytes: ``check(record, node, nodes) -> problem`` (``""`` when it holds; the problem
  starts with the field, e.g. ``".slots is 3, but …"``).
- ``capturable``: whether its cuda handler issues its work without the host reading any
  data, so that graph replay may capture it (``runtime.graph_segments``); a handler
  that copies ids or counts to the host to choose what to move is not. Default True.

Rules:
1. A role names one variant; registering a second variant under a taken role is a
   ``CopyVariantError`` unless ``replace=True``; so is a variant without a handler for
   the ``sim`` backend (every plan must run without a GPU).
2. Variants may share an op (a prefetch and a gather both call ``gather_h2d_copy``):
   the copy's record names its role, and that says which variant a node is.
3. Asking for a role that is not registered is a ``CopyVariantError`` listing the valid ones.
4. The variants the workbench ships (``builtin_copies``, then ``moe.streaming``) are
   registered before the registry is first read, and before a ``replace=True``
   registration, whichever module is imported first: a script that imports one stage
   directly sees the same variants, in the same order, as ``import workbench``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, Mapping, Optional

import torch.fx

from .devices import CopyKind
from .errors import WorkbenchError

__all__ = [
    "CopyVariant",
    "CopyVariantError",
    "copy_event_labels",
    "copy_kind_of_op",
    "copy_variant",
    "copy_variants",
    "is_copy_target",
    "register_copy_variant",
    "rewriting_variants",
    "unregister_copy_variant",
]

#: ``rewrite(context, old, target) -> new node or None``.
Rewrite = Callable[[Any, torch.fx.Node, Any], Optional[torch.fx.Node]]
#: ``handler(run, entry, record, dst, x, index) -> None``.
CopyHandler = Callable[..., None]
#: ``cost(model, step, node, record, workload) -> (() -> (µs, bytes, flops))``.
CopyCost = Callable[..., Callable[[], tuple[float, int, int]]]


class CopyVariantError(WorkbenchError, ValueError):
    """A copy variant that cannot be registered, or a role that names none."""


#: The record fields a variant's node may read (besides ``src`` and ``dst``).
RECORD_INPUTS = ("value", "index", "prefetch", "prefetch_index", "count")


@dataclass(frozen=True)
class CopyVariant:
    """One kind of copy node (see the module docstring)."""

    role: str
    ops: Mapping[Any, CopyKind]
    inputs: tuple[str, ...]
    handlers: Mapping[str, CopyHandler]
    cost: CopyCost
    render: Callable[[Any], str]
    rewrite: Optional[Rewrite] = None
    prepare: Optional[Callable[[Any], None]] = None
    reason: Optional[Callable[[Any, Any, list[str]], str]] = None
    check: Optional[Callable[[Any, torch.fx.Node, Mapping[str, torch.fx.Node]], str]] = None
    capturable: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.role, str) or not self.role:
            raise CopyVariantError(f"a copy variant's role must be a non-empty string, got {self.role!r}")
        if not self.ops:
            raise CopyVariantError(f"copy variant {self.role!r} names no op its node calls")
        bad = [f for f in self.inputs if f not in RECORD_INPUTS]
        if not self.inputs or self.inputs[0] != "value" or bad:
            raise CopyVariantError(
                f"copy variant {self.role!r}: inputs must start with 'value' and name only {', '.join(RECORD_INPUTS)}, "
                f"got {self.inputs!r}"
            )
        if "sim" not in self.handlers:  # rule 1
            raise CopyVariantError(f"copy variant {self.role!r} has no handler for the 'sim' backend")

    def handler(self, backend: str) -> CopyHandler:
        """How a run on ``backend`` moves this variant's bytes."""
        try:
            return self.handlers[backend]
        except KeyError:
            raise CopyVariantError(
                f"copy variant {self.role!r} cannot run on the {backend!r} backend; it runs on {', '.join(self.handlers)}"
            ) from None


_VARIANTS: dict[str, CopyVariant] = {}

#: The modules that register the shipped variants (rule 4). They import this module, so
#: they are loaded on the registry's first use rather than from here.
_SHIPPED_VARIANT_MODULES = (".builtin_copies", ".moe.streaming")
_shipped_loading = False


def _with_shipped_variants() -> dict[str, CopyVariant]:
    """The registry, once the shipped variants are in it (rule 4)."""
    global _shipped_loading
    if not _shipped_loading:
        _shipped_loading = True  # set first: the shipped modules register through this module
        try:
            for module in _SHIPPED_VARIANT_MODULES:
                import_module(module, __package__)
        except BaseException:
            _shipped_loading = False  # a failed import is retried on the next use, not half-kept
            raise
    return _VARIANTS


def register_copy_variant(variant: CopyVariant, *, replace: bool = False) -> CopyVariant:
    """Add ``variant`` to the registry (rule 1); returns it."""
    if not isinstance(variant, CopyVariant):
        raise CopyVariantError(f"register_copy_variant takes a CopyVariant, got {type(variant).__name__}")
    if replace:
        _with_shipped_variants()  # rule 4: a replacement replaces the shipped variant, not the reverse
    if variant.role in _VARIANTS and not replace:
        raise CopyVariantError(f"a copy variant with role {variant.role!r} is registered already (pass replace=True)")
    _VARIANTS[variant.role] = variant
    return variant


def unregister_copy_variant(role: str) -> None:
    """Remove the variant of ``role`` (rule 3 if there is none)."""
    copy_variant(role)
    del _VARIANTS[str(role)]


def copy_variant(role: Any) -> CopyVariant:
    """The variant registered under ``role`` (a string, or ``CopyRole``)."""
    try:
        return _with_shipped_variants()[str(role)]
    except KeyError:
        raise CopyVariantError(f"no copy variant has role {str(role)!r}; registered: {', '.join(_VARIANTS)}") from None


def copy_variants() -> tuple[CopyVariant, ...]:
    """Every registered variant, in registration order."""
    return tuple(_with_shipped_variants().values())


def rewriting_variants() -> tuple[CopyVariant, ...]:
    """The variants with a graph rewrite hook, in the order propagation offers ops to them."""
    return tuple(v for v in _with_shipped_variants().values() if v.rewrite is not None)


def copy_kind_of_op(target: Any) -> Optional[CopyKind]:
    """The ``CopyKind`` of a node target that some variant's node calls, else None."""
    for variant in _with_shipped_variants().values():
        kind = variant.ops.get(target)
        if kind is not None:
            return kind
    return None


def is_copy_target(target: Any) -> bool:
    """True for a node target some registered variant's node calls."""
    return copy_kind_of_op(target) is not None


def copy_event_labels(timeline: Any, device_graph: Any) -> dict[int, str]:
    """Event id → the words its copy variant's ``render`` gives, for every event of
    ``timeline`` that runs a copy node of ``device_graph`` (what a timeline shows for it)."""
    table = device_graph.copy_table
    return {
        event.id: copy_variant(table[event.node].role).render(table[event.node])
        for event in timeline
        if event.node in table
    }
