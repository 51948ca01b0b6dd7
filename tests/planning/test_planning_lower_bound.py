"""The lower bound is the peak, over steps, of the aligned bytes live at that step."""

from __future__ import annotations

from hypothesis import given, settings
from lifetime_sets import MAX_STEP, alignments, lifetime_sets

from workbench.planning import Buffer, aligned_size, lower_bound


@settings(max_examples=300, deadline=None)
@given(buffers=lifetime_sets(), alignment=alignments)
def test_lower_bound_is_the_peak_live_bytes(buffers, alignment):
    """Equals a step-by-step count over every step (inclusive lifetimes, aligned sizes)."""
    peak = max(
        (
            sum(aligned_size(b.size, alignment) for b in buffers if b.start <= t <= b.end)
            for t in range(MAX_STEP + 1)
        ),
        default=0,
    )
    assert lower_bound(buffers, alignment) == peak


def test_touching_lifetimes_add_up_at_the_shared_step():
    """A buffer ending at step 3 and one starting at 3 are both counted at step 3."""
    assert lower_bound([Buffer("a", 64, 0, 3), Buffer("b", 32, 3, 5)]) == 96
    assert lower_bound([Buffer("a", 64, 0, 2), Buffer("b", 32, 3, 5)]) == 64


def test_sizes_are_aligned_before_summing():
    """Two 1-byte buffers live together need two aligned slots, not 2 bytes."""
    buffers = [Buffer("a", 1, 0, 1), Buffer("b", 1, 1, 2)]
    assert lower_bound(buffers, 64) == 128
    assert lower_bound(buffers, 1) == 2


def test_huge_sizes_stay_exact():
    """Sizes beyond 2**63 sum exactly (Python ints), so a full-size model never overflows."""
    big = 2**62
    assert lower_bound([Buffer("a", big, 0, 1), Buffer("b", big, 1, 1), Buffer("c", big, 1, 2)]) == 3 * big
