"""What the views accept: a DeviceGraph or a MemoryPlan; a Timeline or a run result; an
imported ExecuTorch program for any of them.

Rules:
1. ``as_graph_and_plan`` accepts a ``DeviceGraph`` (no plan), a ``MemoryPlan`` (its
   ``.graph`` is the DeviceGraph) or an imported program (what ``from_executorch``
   returns: its ``memory_plan``); anything else is a ``ViewInputError`` naming them.
2. ``as_timeline`` accepts a ``Timeline``, any object whose ``.timeline`` is one (a
   ``RunResult``), or an imported program (the modeled timeline of one call, its
   ``estimate()``); anything else is a ``ViewInputError``.
3. ``as_plan`` accepts a ``MemoryPlan`` or an imported program (its ``memory_plan``).
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import WorkbenchError
from ._upstream import DeviceGraph, MemoryPlan, Timeline, graph_of


class ViewInputError(WorkbenchError, TypeError):
    """A view was given something it cannot show."""


class ViewOptionError(WorkbenchError, ValueError):
    """A view option (collapse mode, device filter, group, window, kind …) is not valid."""


class UnknownNameError(WorkbenchError, KeyError):
    """A node, tensor, group or run name that the view does not have."""

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


class ViewIndexError(WorkbenchError, IndexError):
    """An event index out of range."""


def imported_plan(obj: Any) -> Optional[MemoryPlan]:
    """The ``memory_plan`` of an imported program (``from_executorch``), else None."""
    inner = getattr(obj, "memory_plan", None)
    return inner if isinstance(inner, MemoryPlan) and not isinstance(obj, MemoryPlan) else None


def as_graph_and_plan(obj: Any, what: str = "this view") -> tuple[DeviceGraph, Any]:
    """Rule 1: ``(DeviceGraph, MemoryPlan | None)``."""
    obj = imported_plan(obj) or obj
    if isinstance(obj, DeviceGraph):
        return obj, None
    if isinstance(obj, MemoryPlan):
        return graph_of(obj), obj
    raise ViewInputError(
        f"{what} shows a DeviceGraph (from workbench.propagate) or a MemoryPlan (from "
        f"workbench.plan), or an imported program (from workbench.from_executorch); got {type(obj).__name__}"
    )


def as_plan(obj: Any, what: str = "this view") -> MemoryPlan:
    """Rule 3: a MemoryPlan, or a ViewInputError saying how to make one."""
    obj = imported_plan(obj) or obj
    if isinstance(obj, MemoryPlan):
        return obj
    hint = " — plan it first: wb.plan(dg)" if isinstance(obj, DeviceGraph) else ""
    raise ViewInputError(f"{what} shows a MemoryPlan (from workbench.plan or workbench.from_executorch); got {type(obj).__name__}{hint}")


def as_timeline(obj: Any, what: str = "this view") -> Timeline:
    """Rule 2."""
    if isinstance(obj, Timeline):
        return obj
    inner = getattr(obj, "timeline", None)
    if isinstance(inner, Timeline):
        return inner
    if imported_plan(obj) is not None and callable(getattr(obj, "estimate", None)):
        modeled = getattr(obj.estimate(), "timeline", None)
        if isinstance(modeled, Timeline):
            return modeled
    raise ViewInputError(
        f"{what} shows a Timeline or a run result with a .timeline (from workbench.run), or an "
        f"imported program (from workbench.from_executorch: its modeled call); "
        f"got {type(obj).__name__}"
    )
