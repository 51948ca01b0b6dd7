"""One physics, checked: a planned token's simulated timeline beside the decode timer's time.

``agreement(plan, cost_model)`` times one call of ``plan`` twice on the same machine —
the event simulator's schedule (``runtime.estimate``, kernels writing their planned
memory as a compiled program's do) and the decode timer (``time_decode(layout_of(plan))``)
— and splits the difference into what each charges, so a reader sees whether the two
disagree on a cost or only on the schedule.

Rules:

1. ``work``: the time charged to the token's kernels, host ops and copies, before any
   overlap or launch. From the timeline: the sum of its compute, host and copy events
   (the steps that bind the call's inputs excepted: they are the caller's, rule 3); from
   the timer: ``device - kernels × kernel_gap + host + copy``. Both are sums of
   ``machine.costs`` over the same steps, so they agree unless a cost is charged twice
   or differently.
2. ``overlap``: the time the simulator's schedule hides — work, kernel gaps and launches
   less the span — beside the timer's ``hidden``. The timer's rule hides only prefetched
   copies and the runtime's share of the shorter side (``speed.timer`` rule 1); a
   schedule also hides a copy of an input issued before the layers that wait for it, or
   host work beside device work that does not depend on it. ``unseen_overlap`` is the
   difference: a named effect of the schedule, not a cost.
3. ``binding``: the simulator's host copies of the call's inputs into their planned
   slots, which a decode token's layout leaves to the caller.
4. ``ratio`` is the simulated call's time (from its start at 0, so the first launch
   counts as the timer counts it) / the timer's time; ``ratio_after_effects`` the same once the
   unseen overlap and the binding are set beside the timer's time: it is 1 exactly when
   the two charge the same work, and its distance from 1 is the share of the span the
   two physics disagree on.
5. Graph replay only: under eager launches the simulator interleaves issue and device
   work op by op while the timer takes ``launch_overlap`` of the shorter; that is a
   third effect this check does not split (``launch_mode`` is reported).
"""

from __future__ import annotations

from dataclasses import dataclass
from ..errors import ArgumentTypeError
from ..machine.cost_model import CostModel
from ..planning.memory_plan import MemoryPlan
from ..runtime.sim_timing import estimate
from ..runtime.steps import steps_of
from .graph_layout import layout_of
from .timer import time_decode

__all__ = ["PhysicsAgreement", "agreement"]

_COPIES = ("h2d", "d2h", "d2d")


@dataclass(frozen=True)
class PhysicsAgreement:
    """One plan on one machine, timed by the simulator and the timer (module rules); µs."""

    cost_model: str  # the machine's name
    launch_mode: str  # "graph" or "eager" (rule 5)
    sim_us: float  # the simulated call: from its start (the first launch included) to its last event's end
    timer_us: float  # the decode timer's time
    sim_work_us: float  # rule 1, from the timeline
    timer_work_us: float  # rule 1, from the timer
    sim_overlap_us: float  # rule 2: what the schedule hides
    timer_overlap_us: float  # rule 2: what the timer's rule hides
    binding_us: float  # rule 3

    @property
    def ratio(self) -> float:
        """Simulated span / timer time (rule 4)."""
        return self.sim_us / self.timer_us

    @property
    def unseen_overlap_us(self) -> float:
        """Overlap the schedule finds and the timer's rule does not (rule 2)."""
        return self.sim_overlap_us - self.timer_overlap_us

    @property
    def work_ratio(self) -> float:
        """The simulator's work / the timer's (rule 1)."""
        return self.sim_work_us / self.timer_work_us if self.timer_work_us else 1.0

    @property
    def ratio_after_effects(self) -> float:
        """Rule 4: the span against the timer's time with the named effects set beside it."""
        return self.sim_us / (self.timer_us - self.unseen_overlap_us + self.binding_us)


def agreement(plan: MemoryPlan, cost_model: CostModel, *, prefetch_hit_rate: float = 0.0) -> PhysicsAgreement:
    """``plan``'s token on ``cost_model``, simulated and timed (module rules);
    ``prefetch_hit_rate``: the share of a reuse copy's (or a cache's) rows expected on the
    device (``runtime.workload``), the same for both."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"agreement expects a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    if not isinstance(cost_model, CostModel):
        raise ArgumentTypeError(f"cost_model must be a CostModel, got {type(cost_model).__name__}")
    model, rate = cost_model, prefetch_hit_rate
    timeline = estimate(plan, model, in_place_writes=True, prefetch_hit_rate=rate)
    token = time_decode(layout_of(plan, prefetch_hit_rate=rate), model)
    inputs = {s.name for s in steps_of(plan).steps if s.op == "placeholder" and s.event is not None}
    binding = sum(e.duration_us for e in timeline if e.node in inputs)
    work = sum(e.duration_us for e in timeline if e.node not in inputs and e.kind in ("compute", "host", *_COPIES))
    kernels_gaps = token.kernels * model.kernel_gap * 1e6
    schedule = work + kernels_gaps + token.issue * 1e6 + binding
    span = max((e.end_us for e in timeline), default=0.0)  # the call starts at 0: its first launch counts
    timer_work = (token.device + token.host + token.copy) * 1e6 - kernels_gaps
    return PhysicsAgreement(
        cost_model=model.name, launch_mode=model.launch_mode, sim_us=span, timer_us=token.seconds * 1e6,
        sim_work_us=work, timer_work_us=timer_work, sim_overlap_us=schedule - span,
        timer_overlap_us=token.hidden * 1e6, binding_us=binding,
    )  # fmt: skip
