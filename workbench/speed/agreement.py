"""One physics, checked: a planned token's simulated timeline beside the decode timer's time.

``agreement(plan, cost_model)`` times one call of ``plan`` on one machine three ways —
the event simulator's timeline (``runtime.estimate``, kernels writing their planned
memory as a compiled program's do), the decode timer (``time_decode(layout_of(plan))``),
and the timer's totals rule on the same layout (the rule a layout from facts is timed
by) — and splits what differs into named effects, so a reader sees whether two times
disagree on a cost or only on the schedule.

Rules:

1. ``work``: the time charged to the token's kernels, host ops and copies, before any
   overlap or launch. From the timeline: the sum of its compute, host and copy events;
   from the timer: ``device - kernels × kernel_gap + host + copy``, summed over the
   layout's op groups. Both are sums of ``machine.costs`` over the same steps, counted
   apart, so they agree unless a cost is charged twice or differently.
2. ``sim`` is the timeline's span with the call's inputs in their slots when it starts
   (``estimate(..., bind_inputs=False)``: a decode loop leaves them there), from 0, so the
   first launch counts as the timer counts it; ``timer`` is ``time_decode``'s time. A
   planned graph's token is timed by replaying the same schedule (``speed.timer`` rule
   6), so the two agree in either launch mode unless the timer stops using it.
3. Named effects, printed beside both: ``binding``, what binding the call's inputs into
   their slots first adds to the span (this executor's calling convention, a copy per
   input: the caller's in a decode token); ``schedule_overlap``, the totals rule's time
   less the timer's: what running side by side saves that a rule over totals (``hidden``
   = the runtime's overlap share of the shorter side) does not see — copies issued ahead
   of the layers that wait for them, host work beside device work that does not need it,
   kernel gaps absorbed while a kernel waits.
4. ``ratio`` = sim / timer and ``work_ratio`` = the simulator's work / the timer's; each
   is 1 when the two agree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ArgumentTypeError
from ..machine.cost_model import CostModel
from ..planning.memory_plan import MemoryPlan
from ..runtime.sim_timing import estimate
from .graph_layout import layout_of
from .timer import time_decode

__all__ = ["PhysicsAgreement", "agreement"]

_COPIES = ("h2d", "d2h", "d2d")


@dataclass(frozen=True)
class PhysicsAgreement:
    """One plan on one machine, timed by the simulator and the timer (module rules); µs."""

    cost_model: str  # the machine's name
    launch_mode: str  # "graph" or "eager"
    sim_us: float  # rule 2: the simulated call, inputs in place, from 0 to its last event's end
    timer_us: float  # rule 2: the decode timer's time
    totals_us: float  # rule 3: the timer's totals rule on the same layout
    sim_work_us: float  # rule 1, from the timeline
    timer_work_us: float  # rule 1, from the timer's op groups
    binding_us: float  # rule 3: what binding the inputs first adds to the span

    @property
    def ratio(self) -> float:
        """Simulated span / timer time (rule 4)."""
        return self.sim_us / self.timer_us

    @property
    def work_ratio(self) -> float:
        """The simulator's work / the timer's (rule 4)."""
        return self.sim_work_us / self.timer_work_us if self.timer_work_us else 1.0

    @property
    def schedule_overlap_us(self) -> float:
        """Rule 3: what the schedule hides that the totals rule does not see."""
        return self.totals_us - self.timer_us


def agreement(plan: MemoryPlan, cost_model: CostModel, *, prefetch_hit_rate: float = 0.0) -> PhysicsAgreement:
    """``plan``'s token on ``cost_model``, simulated and timed (module rules);
    ``prefetch_hit_rate``: the share of a reuse copy's (or a cache's) rows expected on the
    device (``runtime.workload``), the same for all three."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"agreement expects a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    if not isinstance(cost_model, CostModel):
        raise ArgumentTypeError(f"cost_model must be a CostModel, got {type(cost_model).__name__}")
    model, rate = cost_model, prefetch_hit_rate
    timeline = estimate(plan, model, in_place_writes=True, prefetch_hit_rate=rate, bind_inputs=False)
    bound = estimate(plan, model, in_place_writes=True, prefetch_hit_rate=rate)
    layout = layout_of(plan, prefetch_hit_rate=rate)
    token = time_decode(layout, model)
    totals = time_decode(dataclasses.replace(layout, call=None), model)
    work = sum(e.duration_us for e in timeline if e.kind in ("compute", "host", *_COPIES))
    timer_work = (token.device + token.host + token.copy - token.kernels * model.kernel_gap) * 1e6
    return PhysicsAgreement(
        cost_model=model.name, launch_mode=model.launch_mode, sim_us=timeline.end_us, timer_us=token.seconds * 1e6,
        totals_us=totals.seconds * 1e6, sim_work_us=work, timer_work_us=timer_work,
        binding_us=bound.end_us - timeline.end_us,
    )  # fmt: skip
