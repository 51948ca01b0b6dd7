"""The building blocks of ``search`` each give safe plans on their own (the verifier is the judge).

``search`` keeps only its best candidate, so a block that produced an unsafe
plan could hide behind a better one; these tests check each block directly.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from lifetime_sets import lifetime_sets

from workbench.planning import Assignment, find_problems, make_problem
from workbench.planning.algorithms.base import compress_steps
from workbench.planning.algorithms.exact import solve_exact
from workbench.planning.algorithms.orders import ORDERS
from workbench.planning.algorithms.placement import TimeIndex, place_blocks
from workbench.planning.algorithms.search import _local_search, components
from workbench.planning.algorithms.skyline import skyline


def _problems(problem, offsets):
    plan = Assignment(
        {b.id: o for b, o in zip(problem.buffers, offsets)}, problem.arena_of(offsets), "part"
    )
    return find_problems(problem.buffers, plan, problem.alignment)


@settings(max_examples=200, deadline=None)
@given(intervals=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12))), query=st.tuples(st.integers(0, 40), st.integers(0, 12)))
def test_time_index_returns_exactly_the_overlapping_ranges(intervals, query):
    """TimeIndex.overlapping(s, e) returns each stored range live at some step of [s, e]
    exactly once, and nothing else (checked against a scan of all stored ranges)."""
    index = TimeIndex(53)
    stored = []
    for k, (start, length) in enumerate(intervals):
        end = min(52, start + length)
        index.add(start, end, k)
        stored.append((start, end))
    s = query[0]
    e = min(52, s + query[1])
    expected = sorted(k for k, (a, b) in enumerate(stored) if a <= e and s <= b)
    assert sorted(index.overlapping(s, e)) == expected


@settings(max_examples=150, deadline=None)
@given(buffers=lifetime_sets(), fit=st.sampled_from(["best", "first"]), seed=st.integers(0, 999))
def test_any_order_with_either_fit_is_safe(buffers, fit, seed):
    """place() is safe for every order, not only the curated ones: a random order with best
    or first fit passes the verifier."""
    problem = make_problem(buffers, 16)
    order = [i for i, z in enumerate(problem.sizes) if z]
    random.Random(seed).shuffle(order)
    assert _problems(problem, place_blocks(problem, order, fit)) == []


@settings(max_examples=150, deadline=None)
@given(buffers=lifetime_sets())
def test_every_named_order_and_skyline_rule_is_safe(buffers):
    """Each order in ORDERS lists every nonzero buffer once, and skyline placement with each
    rule passes the verifier."""
    problem = make_problem(buffers, 16)
    nonzero = sorted(i for i, z in enumerate(problem.sizes) if z)
    for make in ORDERS.values():
        assert sorted(make(problem)) == nonzero
    for rule in ("long", "size"):
        assert _problems(problem, skyline(problem, rule)) == []


@settings(max_examples=100, deadline=None)
@given(buffers=lifetime_sets(max_short=10, max_long=3))
def test_exact_and_local_search_are_safe_and_never_worse(buffers):
    """The branch and bound and the local search return safe plans no larger than the plan
    they started from."""
    problem = make_problem(buffers, 16)
    start = place_blocks(problem, ORDERS["size"](problem), "best")
    arena = problem.arena_of(start)
    improved = _local_search(problem, start, problem.lower_bound)
    assert _problems(problem, improved) == [] and problem.arena_of(improved) <= arena
    if sum(1 for z in problem.sizes if z) <= 12:
        result = solve_exact(problem, list(range(len(problem))), arena + 1)
        assert result.offsets is not None
        assert _problems(problem, list(result.offsets)) == []
        assert result.arena_bytes == problem.arena_of(list(result.offsets)) <= arena


@settings(max_examples=150, deadline=None)
@given(buffers=lifetime_sets())
def test_components_split_only_where_nothing_is_live_across(buffers):
    """Components partition the nonzero buffers; no buffer of one is live together with a
    buffer of another, so planning them apart is safe."""
    problem = make_problem(buffers, 16)
    groups = components(problem)
    flat = sorted(i for g in groups for i in g)
    assert flat == sorted(i for i, z in enumerate(problem.sizes) if z)
    owner = {i: k for k, g in enumerate(groups) for i in g}
    bufs = problem.buffers
    for i in flat:
        for j in flat:
            if owner[i] != owner[j]:
                assert bufs[i].end < bufs[j].start or bufs[j].end < bufs[i].start


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)), min_size=1, max_size=30))
def test_step_compression_keeps_every_overlap(intervals):
    """Compressed steps overlap exactly when the original ones do."""
    starts = [s for s, _ in intervals]
    ends = [s + d for s, d in intervals]
    cs, ce, count = compress_steps(starts, ends)
    assert all(0 <= a <= b < count for a, b in zip(cs, ce))
    for i in range(len(starts)):
        for j in range(len(starts)):
            assert (starts[i] <= ends[j]) == (cs[i] <= ce[j])
