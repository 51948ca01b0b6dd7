"""Passes over a device graph: each says what it needs and what it makes hold.

A ``Pass`` is a callable ``DeviceGraph -> DeviceGraph`` with a ``name`` and two sets of
facts: ``requires`` (facts that must hold of its input) and ``ensures`` (facts that hold
of its output). ``propagate`` ensures ``PROPAGATED``; ``schedule_pass`` requires it and
ensures ``SCHEDULED``; a pass that changes the graph after scheduling does not ensure
``SCHEDULED`` and so must come before it. A strategy is a list of such passes run after
propagation (``run_passes``).

Rules:
1. ``run_passes(dg, passes)`` starts from the facts ``{PROPAGATED}`` and runs the passes
   in order; a pass whose ``requires`` are not all among the facts so far is a
   ``PassError`` naming the pass and the missing facts, raised before it runs.
2. A pass's output holds the facts so far that it does not ``invalidates``, plus its
   ``ensures``.
3. With ``check=True``, or the environment variable ``WORKBENCH_CHECK_PASSES=1`` (a
   debug flag), the device-graph checks of plan files (``plan_checks`` rules 1-4) run on
   the output of every pass; a problem is a ``PassError`` naming the pass and the problem.
4. A pass must return a ``DeviceGraph``; anything else is a ``PassError``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence, runtime_checkable

from .errors import WorkbenchError
from .planning.plan_checks import device_graph_problems
from .propagate import DeviceGraph
from .schedule import schedule

__all__ = [
    "PROPAGATED",
    "SCHEDULED",
    "CHECK_FLAG",
    "FunctionPass",
    "Pass",
    "PassError",
    "run_passes",
    "schedule_pass",
]

#: Every value has a device and every crossing is a copy (``propagate``).
PROPAGATED = "propagated"
#: Nodes are in their final issue order (``schedule``).
SCHEDULED = "scheduled"
#: The environment variable that turns rule 3 on for every ``run_passes``.
CHECK_FLAG = "WORKBENCH_CHECK_PASSES"


class PassError(WorkbenchError, ValueError):
    """A pass ran without what it requires, or broke a device graph's invariants."""


@runtime_checkable
class Pass(Protocol):
    """A device-graph pass (module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def requires(self) -> frozenset[str]: ...

    @property
    def ensures(self) -> frozenset[str]: ...

    @property
    def invalidates(self) -> frozenset[str]: ...

    def __call__(self, dg: DeviceGraph) -> DeviceGraph: ...


@dataclass(frozen=True)
class FunctionPass:
    """A ``Pass`` made of a function and its facts."""

    name: str
    run: Callable[[DeviceGraph], DeviceGraph]
    requires: frozenset[str] = frozenset({PROPAGATED})
    ensures: frozenset[str] = frozenset()
    invalidates: frozenset[str] = frozenset({SCHEDULED})  # a rewrite may add nodes out of order

    def __call__(self, dg: DeviceGraph) -> DeviceGraph:
        return self.run(dg)


def schedule_pass(order: str) -> FunctionPass:
    """``schedule(dg, order)`` as the pass that ensures ``SCHEDULED``."""
    return FunctionPass(
        f"schedule({order})",
        lambda dg: schedule(dg, order),
        requires=frozenset({PROPAGATED}),
        ensures=frozenset({SCHEDULED}),
        invalidates=frozenset(),
    )


def run_passes(dg: DeviceGraph, passes: Sequence[Pass], *, check: Optional[bool] = None) -> DeviceGraph:
    """``dg`` through ``passes`` in order (rules 1-4)."""
    if check is None:
        check = os.environ.get(CHECK_FLAG, "") == "1"
    facts = {PROPAGATED}
    for p in passes:
        missing = sorted(set(p.requires) - facts)
        if missing:
            raise PassError(f"pass {p.name!r} requires {', '.join(missing)}, which the passes before it do not ensure")
        dg = p(dg)
        if not isinstance(dg, DeviceGraph):
            raise PassError(f"pass {p.name!r} returned {type(dg).__name__}, not a DeviceGraph")
        facts = (facts - set(p.invalidates)) | set(p.ensures)
        if check:
            problems = device_graph_problems(dg)
            if problems:
                raise PassError(f"after pass {p.name!r}: {'; '.join(problems[:5])}")
    return dg
