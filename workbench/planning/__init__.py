"""Memory planning: byte offsets for buffers that share one arena.

This is the pure core: given one arena's buffers (size, inclusive lifetime
over execution steps), assign offsets so that buffers live at the same step
never share bytes, and check any such assignment independently.

    from workbench.planning import Buffer, assign_offsets, lower_bound, verify
    bufs = [Buffer("a", 1000, 0, 2), Buffer("b", 500, 1, 3), Buffer("c", 1000, 3, 4)]
    plan = assign_offsets(bufs, algorithm="best", alignment=16)
    verify(bufs, plan, alignment=16)          # raises PlanVerificationError if unsafe
    plan.arena_bytes >= lower_bound(bufs, 16)  # always
"""

from .algorithms import ALGORITHMS, Algorithm, Assignment, Problem, assign_offsets, make_problem
from .buffers import Buffer, PlanningInputError, aligned_size, check_alignment
from .lower_bound import lower_bound
from .verify import PlanVerificationError, conflicting_pairs, find_problems, verify

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Assignment",
    "Buffer",
    "PlanVerificationError",
    "PlanningInputError",
    "Problem",
    "aligned_size",
    "assign_offsets",
    "check_alignment",
    "conflicting_pairs",
    "find_problems",
    "lower_bound",
    "make_problem",
    "verify",
]
