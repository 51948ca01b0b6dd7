"""``search`` beats ``greedy`` where greedy is suboptimal, and is optimal on tiny inputs."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.planning import Buffer, aligned_size, assign_offsets, lower_bound, verify


def _first_fit_arena(buffers, order, alignment):
    """Arena of placing ``order`` lowest-gap-first (written here, apart from the package)."""
    placed = []  # (buffer, offset)
    for b in order:
        size = aligned_size(b.size, alignment)
        busy = sorted(
            (o, o + aligned_size(p.size, alignment))
            for p, o in placed
            if p.start <= b.end and b.start <= p.end and p.size
        )
        offset = 0
        for lo, hi in busy:
            if lo - offset >= size:
                break
            offset = max(offset, hi)
        placed.append((b, offset))
    return max((o + aligned_size(b.size, alignment) for b, o in placed), default=0)


def _optimum(buffers, alignment):
    """The optimal arena by brute force: first fit over every order. Exact because pushing an
    optimal plan down in offset order (first fit) never raises any buffer."""
    return min(_first_fit_arena(buffers, order, alignment) for order in itertools.permutations(buffers))


def test_greedy_is_suboptimal_here_and_search_reaches_the_lower_bound():
    """Pinned case: largest-first puts b (64 B, step 3) at 0, so d, live with both a and b,
    must go on top: 160 B. Putting d under b gives 112 B, the lower bound."""
    buffers = [
        Buffer("a", 48, 1, 2),
        Buffer("b", 64, 3, 3),
        Buffer("c", 64, 1, 1),
        Buffer("d", 48, 2, 3),
    ]
    assert lower_bound(buffers) == 112
    assert assign_offsets(buffers, "greedy").arena_bytes == 160
    for name in ("search", "best"):
        plan = assign_offsets(buffers, name)
        verify(buffers, plan)
        assert plan.arena_bytes == 112, name


def test_exact_search_finds_what_no_greedy_order_finds():
    """Pinned case where every greedy order and both skyline rules stay above the lower bound
    (at best 240 B); the exact branch and bound reaches 224 B, the lower bound."""
    buffers = [
        Buffer("a", 48, 2, 3),
        Buffer("b", 96, 0, 1),
        Buffer("c", 128, 3, 4),
        Buffer("d", 16, 5, 8),
        Buffer("e", 96, 4, 4),
        Buffer("f", 96, 1, 2),
    ]
    assert lower_bound(buffers) == 224
    assert assign_offsets(buffers, "greedy").arena_bytes > 224
    plan = assign_offsets(buffers, "search")
    verify(buffers, plan)
    assert plan.arena_bytes == 224


def test_independent_parts_are_planned_separately():
    """Two groups of buffers that are never live together: the arena is the larger group's
    need, as if each were planned alone."""
    first = [Buffer("a", 48, 1, 2), Buffer("b", 64, 3, 3), Buffer("c", 64, 1, 1), Buffer("d", 48, 2, 3)]
    second = [Buffer(f"late{i}", 32, 10 + i, 11 + i) for i in range(5)]
    plan = assign_offsets(first + second, "search")
    verify(first + second, plan)
    assert plan.arena_bytes == 112


tiny = st.lists(
    st.tuples(st.integers(1, 6).map(lambda k: 16 * k), st.integers(0, 6), st.integers(0, 3)),
    min_size=1,
    max_size=6,
).map(lambda items: [Buffer(i, z, s, s + d) for i, (z, s, d) in enumerate(items)])


@settings(max_examples=150, deadline=None)
@given(buffers=tiny)
def test_search_is_optimal_on_tiny_inputs(buffers):
    """Up to 6 buffers, search's arena equals the brute-force optimum (never more), and
    greedy is never below it (a sanity check of the oracle)."""
    optimum = _optimum(buffers, 16)
    assert assign_offsets(buffers, "search").arena_bytes == optimum
    assert assign_offsets(buffers, "greedy").arena_bytes >= optimum
