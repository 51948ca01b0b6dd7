"""What the views accept: a DeviceGraph or a MemoryPlan; a Timeline or a run result.

Rules:
1. ``as_graph_and_plan`` accepts a ``DeviceGraph`` (no plan) or a ``MemoryPlan`` (its
   ``.graph`` is the DeviceGraph); anything else is a ``ViewInputError`` naming both.
2. ``as_timeline`` accepts a ``Timeline`` or any object whose ``.timeline`` is one (a
   ``RunResult``); anything else is a ``ViewInputError``.
"""

from __future__ import annotations

from typing import Any

from ..planning.memory_plan import MemoryPlan
from ..propagate import DeviceGraph
from ..runtime.timeline import Timeline
from ..errors import WorkbenchError


class ViewInputError(WorkbenchError, TypeError):
    """A view was given something it cannot show."""


def as_graph_and_plan(obj: Any, what: str = "this view") -> tuple[DeviceGraph, Any]:
    """Rule 1: ``(DeviceGraph, MemoryPlan | None)``."""
    if isinstance(obj, DeviceGraph):
        return obj, None
    if isinstance(obj, MemoryPlan):
        return obj.device_graph, obj
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
