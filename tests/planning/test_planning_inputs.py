"""Bad input to planning fails early with an error that says what is wrong and what is valid."""

from __future__ import annotations

import pytest

from workbench.planning import (
    ALGORITHMS,
    Assignment,
    Buffer,
    PlanningInputError,
    aligned_size,
    assign_offsets,
    find_problems,
    lower_bound,
    verify,
)

GOOD = [Buffer("a", 100, 0, 1), Buffer("b", 50, 1, 2)]


def test_negative_size_is_rejected_with_the_valid_range():
    """A negative size cannot be planned; the message names the buffer and says sizes must be >= 0."""
    with pytest.raises(PlanningInputError, match=r"'x'.*-5 bytes.*>= 0"):
        Buffer("x", -5, 0, 1)


def test_end_before_start_is_rejected():
    """A lifetime that ends before it starts is an error naming both steps."""
    with pytest.raises(PlanningInputError, match=r"\[4, 2\].*start <= end"):
        Buffer("x", 8, 4, 2)


@pytest.mark.parametrize("field,value", [("size", 1.5), ("start", "0"), ("end", None), ("size", True)])
def test_non_int_fields_are_rejected(field, value):
    """Sizes and steps must be ints (a float size or a bool would silently mis-plan)."""
    kwargs = {"id": "x", "size": 8, "start": 0, "end": 1, field: value}
    with pytest.raises(PlanningInputError, match=f"{field} must be an int"):
        Buffer(**kwargs)


def test_unhashable_id_is_rejected():
    """Ids key the offsets mapping, so they must be hashable."""
    with pytest.raises(PlanningInputError, match="not hashable"):
        Buffer(["a"], 8, 0, 1)


@pytest.mark.parametrize("alignment", [0, -16, 3, 24, 16.0, "16", True])
@pytest.mark.parametrize("entry", ["assign", "lower_bound", "verify"])
def test_bad_alignment_is_rejected_everywhere(alignment, entry):
    """Every entry point rejects an alignment that is not a positive power of two, saying so."""
    with pytest.raises(PlanningInputError, match="positive power of two"):
        if entry == "assign":
            assign_offsets(GOOD, "greedy", alignment)
        elif entry == "lower_bound":
            lower_bound(GOOD, alignment)
        else:
            verify(GOOD, Assignment({"a": 0, "b": 112}, 162, "x"), alignment)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_duplicate_ids_are_rejected(algorithm):
    """Two buffers with one id would share one offset entry; the error names the id."""
    buffers = [Buffer("a", 8, 0, 1), Buffer("b", 8, 0, 1), Buffer("a", 16, 3, 4)]
    with pytest.raises(PlanningInputError, match=r"duplicate buffer ids: 'a'"):
        assign_offsets(buffers, algorithm)


def test_unknown_algorithm_lists_the_valid_ones():
    """A misspelt algorithm name fails and the message lists every registered name."""
    with pytest.raises(PlanningInputError) as info:
        assign_offsets(GOOD, "gredy")
    message = str(info.value)
    assert "'gredy'" in message
    for name in ALGORITHMS:
        assert name in message


def test_non_buffer_items_are_rejected():
    """Tuples are not Buffers: the error says which item and how to build one."""
    with pytest.raises(PlanningInputError, match=r"item 1 is a tuple.*Buffer\(id, size, start, end\)"):
        assign_offsets([Buffer("a", 8, 0, 1), ("b", 8, 0, 1)])


def test_verify_needs_an_assignment():
    """verify() takes an Assignment; a bare dict is a clear error, not an AttributeError."""
    with pytest.raises(PlanningInputError, match="expected an Assignment"):
        find_problems(GOOD, {"a": 0, "b": 112})


@pytest.mark.parametrize(
    "size,alignment,expected",
    [(0, 16, 0), (1, 16, 16), (16, 16, 16), (17, 16, 32), (100, 1, 100), (4097, 4096, 8192)],
)
def test_aligned_size_rounds_up_to_the_alignment(size, alignment, expected):
    """aligned = ceil(size / alignment) * alignment; size 0 stays 0."""
    assert aligned_size(size, alignment) == expected


def test_empty_input_plans_to_an_empty_arena():
    """No buffers: every algorithm returns an empty plan with a 0-byte arena."""
    for name in ALGORITHMS:
        plan = assign_offsets([], name)
        assert plan.arena_bytes == 0 and dict(plan.offsets) == {}
    assert lower_bound([]) == 0


def test_a_registered_algorithm_runs_by_name_and_in_best(monkeypatch):
    """ALGORITHMS is the registry: a new entry is callable by name and best considers it;
    an entry returning a misaligned offset is stopped with its name in the error."""
    from workbench.planning import ALGORITHMS as registry

    def stacked_reverse(problem):  # no reuse, top-down: valid but never smaller than naive
        top = sum(problem.sizes)
        out, at = [], top
        for size in problem.sizes:
            at -= size
            out.append(at)
        return out

    monkeypatch.setitem(registry, "reverse", stacked_reverse)
    plan = assign_offsets(GOOD, "reverse")
    verify(GOOD, plan)
    assert plan.algorithm == "reverse" and plan.arena_bytes == 112 + 64

    monkeypatch.setitem(registry, "broken", lambda problem: [3] * len(problem.sizes))
    with pytest.raises(RuntimeError, match=r"'broken' gave buffer 'a' offset 3"):
        assign_offsets(GOOD, "broken")
    with pytest.raises(RuntimeError, match="'broken'"):
        assign_offsets(GOOD, "best")
