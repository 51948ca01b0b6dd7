"""Placement strategies: a named recipe of placement rules, flags, streamed weights and passes.

A ``Strategy`` turns a captured program into a ``DeviceGraph``: ``apply`` checks the
program fits (its hints), asks ``recipe`` for what to place (a strategy may rewrite the
program first), its placement rules, the constants it streams and its list of passes
(``workbench.passes``), then places, propagates and runs the passes through
``run_passes``, the one driver, which checks each pass's requirements before it runs and
(on ``check`` or the debug flag) the device graph after it. Nothing here knows what a
model's layers are: strategies that find parts of a model (those of the MoE package)
subclass ``Strategy`` and override ``recipe``.

Rules:
1. ``apply(program)``: ``check_program``, then ``recipe``, ``place``, ``propagate`` with
   both skip flags set to ``skip_copies`` and the recipe's streamed constants, then
   ``run_passes`` over the recipe's passes; the result is that last pass's output.
2. A strategy with ``prefetch`` needs a program carrying prefetch hints
   (``workbench::select_rows`` nodes); one that streams without prefetch must not get
   them (propagation would prefetch under the wrong label): a ``StrategyError`` worded
   by ``hint_problem``.
3. A strategy that streams constants but whose patterns match none of the program's, or
   whose rules claim ops (``claims_ops``) but send none to the host, moved nothing: it
   warns (``PlacementWarning``), or raises ``PlacementError`` with ``strict=True``
   (``nothing_moved`` words it).
4. ``all_on_device``: every op and every weight on the device; only inputs and outputs
   may cross the link (none with ``skip_copies``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch.fx

from .arguments import check_flag
from .capture import Program
from .copy_ops import SELECT_ROWS
from .devices import Device
from .errors import WorkbenchError
from .graph_values import gc_paused
from .passes import Pass, run_passes, schedule_pass
from .place import place, report_no_claim
from .propagate import DeviceGraph, propagate

__all__ = ["EveryOpOn", "Recipe", "Strategy", "StrategyError", "all_on_device"]


class StrategyError(WorkbenchError, ValueError):
    """A strategy does not fit the program it is applied to."""


@dataclass(frozen=True)
class Recipe:
    """What a strategy makes of one program: the program to place (a strategy may rewrite
    it first), its placement rules, the weights it streams, and the passes run on the
    propagated graph, in order (``workbench.passes``)."""

    program: Program
    rules: Callable[[torch.fx.Node], Optional[str]]
    streamed: tuple[str, ...]
    passes: tuple[Pass, ...]


@dataclass(frozen=True)
class Strategy:
    """A placement recipe: rules + flags + streamed weights, then a list of passes."""

    name: str  # what tables list, e.g. "all_on_device"
    description: str  # one sentence for tables and notebooks
    rules: Callable[[torch.fx.Node], str | None]  # node → device, or None for the host (a subclass may bind them per program)
    skip_copies: bool  # both skip flags: caller stages inputs on, and takes outputs from, the device
    stream_constants: tuple[str, ...] = ()  # parameter names or globs kept on the host and streamed
    device: str = "cuda:0"  # the accelerator
    schedule: str = "overlap"  # issue order: "overlap" (copies early, compute around them) or "captured"
    prefetch: bool = False  # streamed weights are prefetched from the program's hints

    @property
    def variant(self) -> str:
        """``name`` plus ``+prefetch`` for the prefetching variant: what tables list."""
        return f"{self.name}{'+prefetch' if self.prefetch else ''}"

    @property
    def label(self) -> str:
        """``variant`` plus the flag setting, e.g. ``all_on_device+skip``."""
        return f"{self.variant}{'+skip' if self.skip_copies else ''}"

    def with_schedule(self, order: str) -> "Strategy":
        """This strategy issued in another order (``"captured"`` or ``"overlap"``)."""
        return replace(self, schedule=order)

    def apply(self, program: Program, *, strict: bool = False, check: Optional[bool] = None) -> DeviceGraph:
        """Rule 1: place, propagate and run the passes of ``program`` under this strategy →
        ``DeviceGraph`` (``check``: the device-graph checks after every pass, see
        ``workbench.passes``). Rule 3: a strategy that moves nothing warns
        (``PlacementWarning``), or raises ``PlacementError`` with ``strict=True``."""
        self.check_program(program)
        with gc_paused():  # rewrites, placement, propagation and passes all build large graphs
            recipe = self.recipe(program)
            if self.stream_constants and not recipe.streamed:
                report_no_claim(self.nothing_moved(program, "parameter"), strict, stacklevel=2)
            if not self.claims_ops:
                placed = place(recipe.program, recipe.rules, strict=strict)
            else:
                rule, host_ops = recipe.rules, []

                def counted(node: torch.fx.Node) -> Optional[str]:
                    answer = rule(node)
                    if answer is None:
                        host_ops.append(node.name)
                    return answer

                placed = place(recipe.program, counted, strict=strict)
                if not host_ops:
                    report_no_claim(self.nothing_moved(program, "op's module path"), strict, stacklevel=2)
            dg = propagate(
                placed,
                skip_h2d_for_method_inputs=self.skip_copies,
                skip_d2h_for_method_outputs=self.skip_copies,
                stream_constants=recipe.streamed,
            )
            return run_passes(dg, recipe.passes, check=check)

    def recipe(self, program: Program) -> Recipe:
        """This strategy's ``Recipe`` for ``program``: its rules, its streamed weights and
        its passes (the ``schedule``)."""
        return Recipe(program, self.rules, self.streamed(program), (schedule_pass(self.schedule),))

    def streamed(self, program: Program) -> tuple[str, ...]:
        """``stream_constants`` for ``program``: only the names and globs that match a
        parameter of it."""
        constants = program.constants.values()
        return tuple(n for n in self.stream_constants if any(fnmatch.fnmatchcase(c, n) for c in constants))

    @property
    def claims_ops(self) -> bool:
        """Whether this strategy's rules pick ops to send to the host, so that picking
        none means it did not do its job (rule 3)."""
        return False

    def nothing_moved(self, program: Program, what: str) -> str:
        """Rule 3, in words: what this strategy looked for in ``program`` and found none of."""
        given = ", ".join(map(repr, self.stream_constants))
        return f"{self.label} moved nothing in this program of {program.num_ops()} ops: {given} match no {what}; every op stays on {self.device}"

    def check_program(self, program: Program) -> None:
        """Rule 2: the program's hints fit ``prefetch`` (``hint_problem`` words what does not)."""
        if not self.reads_hints:
            return
        hinted = any(n.op == "call_function" and n.target is SELECT_ROWS for n in program.graph.nodes)
        if hinted != self.prefetch:
            raise StrategyError(self.hint_problem(hinted))

    @property
    def reads_hints(self) -> bool:
        """Whether prefetch hints in the program matter to this strategy (it streams or prefetches)."""
        return bool(self.stream_constants) or self.prefetch

    def hint_problem(self, hinted: bool) -> str:
        """Why a program with (``hinted``) or without prefetch hints does not fit this strategy."""
        if not hinted:
            return f"{self.label} prefetches from hints, but this program has none (no workbench::select_rows node)"
        return (
            f"{self.label} streams without prefetch, but this program carries prefetch hints (workbench::select_rows "
            f"nodes), which propagation would prefetch; use {self.name}(prefetch=True) or a program without them"
        )


@dataclass(frozen=True)
class EveryOpOn:
    """The placement rule "every op on ``device``". A value, not a closure: two strategies
    built with the same arguments compare equal, so a plan made for one serves the other."""

    device: str  # the device every op is placed on, e.g. "cuda:0"

    def __call__(self, node: torch.fx.Node) -> str:
        return self.device


def all_on_device(device: str = "cuda:0", skip_copies: bool = True) -> Strategy:
    """Rule 4: everything on ``device``: weights resident, only inputs/outputs cross."""
    check_flag(skip_copies, "skip_copies")
    dev = str(Device.parse(device))
    return Strategy("all_on_device", f"every op and weight on {dev}", EveryOpOn(dev), skip_copies, device=dev)
