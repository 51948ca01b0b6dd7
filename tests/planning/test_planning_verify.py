"""The verifier catches every unsafe plan, names the buffers involved, and passes safe ones."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lifetime_sets import lifetime_sets

from workbench.planning import (
    ALGORITHMS,
    Assignment,
    Buffer,
    PlanVerificationError,
    assign_offsets,
    conflicting_pairs,
    find_problems,
    verify,
)


def _plan(offsets: dict, arena: int) -> Assignment:
    return Assignment(offsets=offsets, arena_bytes=arena, algorithm="hand")


def _oracle_pairs(buffers, offsets) -> set[frozenset]:
    """All conflicting pairs by brute force over every pair (the definition, O(n^2))."""
    out = set()
    for a, b in itertools.combinations(buffers, 2):
        if a.size and b.size and a.start <= b.end and b.start <= a.end:
            oa, ob = offsets[a.id], offsets[b.id]
            if oa < ob + b.size and ob < oa + a.size:
                out.add(frozenset((a.id, b.id)))
    return out


@settings(max_examples=400, deadline=None)
@given(buffers=lifetime_sets(max_short=30, max_long=6), data=st.data())
def test_conflicts_match_brute_force(buffers, data):
    """On random (mostly unsafe) plans the sweep reports exactly the pairs that a check of
    every pair finds: none missed, none invented, none twice."""
    slots = data.draw(st.integers(1, 6))
    offsets = {b.id: data.draw(st.integers(0, slots)) * 4096 for b in buffers}
    found = conflicting_pairs(buffers, _plan(offsets, 1 << 40))
    assert len(found) == len(set(map(frozenset, found)))
    assert set(map(frozenset, found)) == _oracle_pairs(buffers, offsets)


@settings(max_examples=200, deadline=None)
@given(buffers=lifetime_sets(), data=st.data())
def test_moving_a_buffer_onto_a_live_neighbour_is_caught(buffers, data):
    """Take a valid plan, move one buffer onto another that is live at the same time:
    verify raises and the message names both buffers."""
    plan = assign_offsets(buffers, data.draw(st.sampled_from(sorted(ALGORITHMS))))
    verify(buffers, plan)
    pairs = [
        (a, b) for a, b in itertools.permutations(buffers, 2)
        if a.size and b.size and a.start <= b.end and b.start <= a.end
    ]
    if not pairs:
        return
    moved, onto = data.draw(st.sampled_from(pairs))
    offsets = dict(plan.offsets)
    offsets[moved.id] = offsets[onto.id]
    broken = Assignment(offsets, max(plan.arena_bytes, offsets[moved.id] + moved.size), "broken")
    with pytest.raises(PlanVerificationError) as info:
        verify(buffers, broken)
    overlap = [p for p in info.value.problems if "share bytes" in p]
    assert any(repr(moved.id) in p and repr(onto.id) in p for p in overlap)


def test_touching_lifetimes_conflict_and_disjoint_ones_do_not():
    """Inclusive lifetimes: end == other.start shares that step (a conflict when bytes
    overlap); end < other.start shares nothing, so the same bytes are fine."""
    touching = [Buffer("a", 64, 0, 3), Buffer("b", 64, 3, 5)]
    with pytest.raises(PlanVerificationError, match=r"'a'.*'b'.*live together at step 3"):
        verify(touching, _plan({"a": 0, "b": 0}, 64))
    disjoint = [Buffer("a", 64, 0, 2), Buffer("b", 64, 3, 5)]
    verify(disjoint, _plan({"a": 0, "b": 0}, 64))


def test_adjacent_byte_ranges_do_not_conflict():
    """[0, 64) and [64, 128) share no byte, even when live together."""
    buffers = [Buffer("a", 64, 0, 3), Buffer("b", 64, 0, 3)]
    verify(buffers, _plan({"a": 0, "b": 64}, 128))
    with pytest.raises(PlanVerificationError, match=r"share bytes \[48, 64\)"):
        verify(buffers, _plan({"a": 0, "b": 48}, 112))


def test_misaligned_offset_is_caught():
    """An offset that is not a multiple of the alignment is reported with both numbers."""
    buffers = [Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2)]
    with pytest.raises(PlanVerificationError, match=r"'b': offset 72 is not a multiple of the alignment 16"):
        verify(buffers, _plan({"a": 0, "b": 72}, 136))
    verify(buffers, _plan({"a": 0, "b": 72}, 136), alignment=8)


def test_shrunk_arena_is_caught():
    """An arena smaller than the top buffer's end leaves that buffer outside: reported."""
    buffers = [Buffer("a", 64, 0, 1), Buffer("b", 100, 1, 2)]
    plan = assign_offsets(buffers, "greedy")
    verify(buffers, plan)
    top = max(buffers, key=lambda b: plan.offsets[b.id] + b.size)
    small = Assignment(dict(plan.offsets), plan.offsets[top.id] + top.size - 1, "shrunk")
    with pytest.raises(PlanVerificationError, match=rf"{top.id!r}.*ends outside the arena") as info:
        verify(buffers, small)
    assert len(info.value.problems) == 1


def test_missing_extra_and_bad_offsets_are_all_listed():
    """Every problem is listed in one error: a missing id, an unknown id, a negative and a
    non-int offset, and a negative arena."""
    buffers = [Buffer("a", 16, 0, 1), Buffer("b", 16, 0, 1), Buffer("c", 16, 0, 1), Buffer("d", 16, 2, 3)]
    plan = _plan({"a": 0, "c": -16, "d": 1.5, "zzz": 0}, -1)
    problems = find_problems(buffers, plan)
    text = "\n".join(problems)
    assert "'b' has no offset" in text
    assert "'zzz'" in text and "not buffers of this arena" in text
    assert "'c': offset -16 is negative" in text
    assert "'d': offset 1.5 is not an int" in text
    assert "arena_bytes is -1" in text
    with pytest.raises(PlanVerificationError) as info:
        verify(buffers, plan)
    assert info.value.problems == problems


def test_size_zero_buffers_conflict_with_nothing():
    """A size-0 buffer owns no bytes, so sitting on a live buffer is fine."""
    buffers = [Buffer("a", 64, 0, 3), Buffer("empty", 0, 1, 2)]
    verify(buffers, _plan({"a": 0, "empty": 0}, 64))


def test_listing_stops_at_the_limit_and_says_so():
    """A plan with many overlaps lists at most ``limit`` pairs and then says there are more
    (so a degenerate plan cannot make the verifier quadratic in output)."""
    buffers = [Buffer(i, 16, 0, 0) for i in range(100)]
    problems = find_problems(buffers, _plan({i: 0 for i in range(100)}, 16), limit=25)
    assert sum("share bytes" in p for p in problems) == 25
    assert problems[-1] == "more overlapping pairs exist; listing stopped after 25"


def test_large_valid_plan_verifies():
    """A 20,000-buffer plan from a real algorithm passes; one planted overlap in it is found
    and named (the sweep handles big inputs without comparing all pairs)."""
    rng = random.Random(0)
    buffers = [Buffer(i, rng.randrange(1, 1 << 16), i, i + rng.randrange(4)) for i in range(20_000)]
    buffers += [Buffer(f"long{k}", 4096, 0, 19_999) for k in range(20)]
    plan = assign_offsets(buffers, "greedy")
    verify(buffers, plan)
    offsets = dict(plan.offsets)
    offsets[12_345] = offsets["long7"]
    problems = find_problems(buffers, Assignment(offsets, plan.arena_bytes + (1 << 16), "x"))
    assert len(problems) >= 1
    assert all("12345" in p for p in problems) and any("'long7'" in p for p in problems)
