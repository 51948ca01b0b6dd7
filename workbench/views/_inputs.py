"""What the views accept: a DeviceGraph or a MemoryPlan; a Timeline or a run result.

Rules:
1. ``as_graph_and_plan`` accepts a ``DeviceGraph`` (no plan) or a ``MemoryPlan`` (its
   ``.graph`` is the DeviceGraph); anything else is a ``ViewInputError`` naming both.
2. ``as_timeline`` accepts a ``Timeline`` or any object whose ``.timeline`` is one (a
   ``RunResult``); anything else is a ``ViewInputError``.
3. ``plan_function`` / ``run_function`` find the pipeline's ``plan`` and ``run`` stages
   where the public API puts them, or return None when this build has no such stage.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Optional

from ..propagate import DeviceGraph
from ..runtime.timeline import Timeline


class ViewInputError(TypeError):
    """A view was given something it cannot show."""


def _memory_plan_type() -> Optional[type]:
    try:
        return importlib.import_module("workbench.planning.plan").MemoryPlan
    except (ImportError, AttributeError):
        return None


def is_memory_plan(obj: Any) -> bool:
    plan_type = _memory_plan_type()
    return plan_type is not None and isinstance(obj, plan_type)


def as_graph_and_plan(obj: Any, what: str = "this view") -> tuple[DeviceGraph, Any]:
    """Rule 1: ``(DeviceGraph, MemoryPlan | None)``."""
    if isinstance(obj, DeviceGraph):
        return obj, None
    if is_memory_plan(obj):
        return obj.graph, obj
    raise ViewInputError(
        f"{what} shows a DeviceGraph (from workbench.propagate) or a MemoryPlan (from "
        f"workbench.plan); got {type(obj).__name__}"
    )


def as_plan(obj: Any, what: str = "this view") -> Any:
    """A MemoryPlan, or a ViewInputError saying how to make one."""
    if is_memory_plan(obj):
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


def _public(name: str, module: str, attr: str) -> Optional[Callable]:
    import workbench

    found = getattr(workbench, name, None)
    if callable(found) and not isinstance(found, type(importlib)):
        return found
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None
    return found if callable(found) else None


def plan_function() -> Optional[Callable]:
    """Rule 3: ``plan(dg, algorithm=..., alignment=...)`` or None."""
    return _public("plan", "workbench.planning.plan", "plan")


def run_function() -> Optional[Callable]:
    """Rule 3: ``run(plan, *inputs, backend=...)`` or None."""
    return _public("run", "workbench.runtime.executor", "run")
