"""Every planning algorithm gives a safe, aligned, deterministic plan no smaller than the lower bound."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from lifetime_sets import alignments, lifetime_sets

from workbench.planning import (
    ALGORITHMS,
    Buffer,
    aligned_size,
    assign_offsets,
    find_problems,
    lower_bound,
)

NAMES = sorted(ALGORITHMS)


@settings(max_examples=400, deadline=None)
@given(buffers=lifetime_sets(), alignment=alignments)
def test_every_algorithm_is_safe_and_bounded(buffers, alignment):
    """For each algorithm: the verifier finds no problem, offsets are aligned, the arena is
    the highest aligned end, the lower bound is never beaten, naive is the sum of aligned
    sizes, and best is no larger than any other algorithm."""
    lb = lower_bound(buffers, alignment)
    arenas = {}
    for name in NAMES:
        plan = assign_offsets(buffers, name, alignment)
        assert plan.algorithm == name
        assert find_problems(buffers, plan, alignment) == []
        assert all(o % alignment == 0 for o in plan.offsets.values())
        assert plan.arena_bytes == max(
            (plan.offsets[b.id] + aligned_size(b.size, alignment) for b in buffers), default=0
        )
        assert plan.arena_bytes >= lb
        arenas[name] = plan.arena_bytes
    assert arenas["naive"] == sum(aligned_size(b.size, alignment) for b in buffers)
    assert arenas["best"] == min(arenas.values())
    assert arenas["search"] <= arenas["greedy"]


@settings(max_examples=150, deadline=None)
@given(buffers=lifetime_sets(), alignment=alignments, seed=st.integers(0, 2**32))
def test_same_buffers_same_offsets(buffers, alignment, seed: int):
    """Planning twice, and planning the same buffers listed in another order, gives
    identical offsets: nothing depends on hash order, clocks or input order."""
    shuffled = list(buffers)
    random.Random(seed).shuffle(shuffled)
    for name in NAMES:
        first = assign_offsets(buffers, name, alignment)
        assert assign_offsets(buffers, name, alignment) == first
        assert assign_offsets(shuffled, name, alignment) == first


def test_touching_lifetimes_never_share_bytes():
    """Lifetimes are inclusive: a buffer ending at step 3 and one starting at step 3 are
    live together, so no algorithm may overlap their bytes."""
    buffers = [Buffer("a", 64, 0, 3), Buffer("b", 64, 3, 5)]
    for name in NAMES:
        plan = assign_offsets(buffers, name)
        a, b = plan.offsets["a"], plan.offsets["b"]
        assert a + 64 <= b or b + 64 <= a, name
        assert plan.arena_bytes == 128


def test_disjoint_lifetimes_share_bytes():
    """Buffers whose lifetimes do not meet (end < other.start) reuse the same bytes under
    every reusing algorithm; naive never reuses."""
    buffers = [Buffer("a", 64, 0, 2), Buffer("b", 64, 3, 5), Buffer("c", 64, 6, 6)]
    for name in NAMES:
        plan = assign_offsets(buffers, name)
        assert plan.arena_bytes == (192 if name == "naive" else 64), name


def test_size_zero_buffers_take_no_space_but_get_aligned_offsets():
    """A size-0 buffer adds nothing to the arena, yet has an aligned offset inside it."""
    buffers = [Buffer("a", 100, 0, 4), Buffer("empty", 0, 1, 2), Buffer("b", 20, 2, 3)]
    for name in NAMES:
        plan = assign_offsets(buffers, name, alignment=64)
        assert plan.arena_bytes == 192, name
        assert plan.offsets["empty"] % 64 == 0 and 0 <= plan.offsets["empty"] <= plan.arena_bytes


def test_sparse_steps_plan_like_dense_ones():
    """Only the order of steps matters: stretching the step numbers (as a graph with
    unplanned nodes does) changes no offset."""
    dense = [Buffer("a", 48, 0, 1), Buffer("b", 64, 1, 2), Buffer("c", 32, 2, 3), Buffer("d", 80, 0, 3)]
    sparse = [Buffer(b.id, b.size, b.start * 1000 + 7, b.end * 1000 + 7) for b in dense]
    for name in NAMES:
        assert assign_offsets(dense, name).offsets == assign_offsets(sparse, name).offsets


def test_mixed_id_types_plan_deterministically():
    """Ids that do not compare (str and int) are still ordered deterministically."""
    buffers = [Buffer("x", 64, 0, 1), Buffer(3, 64, 0, 1), Buffer(("t", 1), 32, 1, 2)]
    for name in NAMES:
        plans = {tuple(assign_offsets(order, name).offsets.items()) for order in (buffers, buffers[::-1])}
        assert len(plans) == 1
