"""What the views accept: a DeviceGraph or a MemoryPlan; a Timeline or a run result.

Rules:
1. ``as_graph_and_plan`` accepts a ``DeviceGraph`` (no plan) or a ``MemoryPlan`` (its
   ``.graph`` is the DeviceGraph); anything else is a ``ViewInputError`` naming both.
2. ``as_timeline`` accepts a ``Timeline`` or any object whose ``.timeline`` is one (a
   ``RunResult``); anything else is a ``ViewInputError``.
"""

from __future__ import annotations

from typing import Any

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


def as_graph_and_plan(obj: Any, what: str = "this view") -> tuple[DeviceGraph, Any]:
    """Rule 1: ``(DeviceGraph, MemoryPlan | None)``."""
    if isinstance(obj, DeviceGraph):
        return obj, None
    if isinstance(obj, MemoryPlan):
        return graph_of(obj), obj
    raise ViewInputError(
        f"{what} shows a DeviceGraph (from workbench.propagate) or a MemoryPlan (from "
        f"workbench.plan); got {type(obj).__name__}"
    )


def as_plan(obj: Any, what: str = "this view") -> MemoryPlan:
    """A MemoryPlan, or a ViewInputError saying how to make one."""
    if isinstance(obj, MemoryPlan):
        return obj
    hint = " — plan it first: wb.plan(dg)" if isinstance(obj, DeviceGraph) else ""
    raise ViewInputError(f"{what} shows a MemoryPlan (from workbench.plan); got {type(obj).__name__}{hint}")


def as_timeline(obj: Any, what: str = "this view") -> Timeline:
    """Rule 2."""
    if isinstance(obj, Timeline):
        return obj
    inner = getattr(obj, "timeline", None)
    if isinstance(inner, Timeline):
        return inner
    raise ViewInputError(
        f"{what} shows a Timeline or a run result with a .timeline (from workbench.run); "
        f"got {type(obj).__name__}"
    )
