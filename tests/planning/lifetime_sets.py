"""Hypothesis strategies for one arena's buffers, shared by the planning property tests.

Random lifetime sets look like an inference graph's: mostly short lifetimes
(a value dies within a few steps), plus clusters of long-lived buffers that
start together (graph inputs, caches) or end together (outputs). Sizes run
from 0 to 2**20 bytes, with repeated sizes and odd ones so ties and alignment
are both exercised; steps run over 0..200.
"""

from __future__ import annotations

from hypothesis import strategies as st

from workbench.planning import Buffer

MAX_STEP = 200

sizes = st.one_of(
    st.integers(0, 2**20),
    st.sampled_from([0, 1, 16, 48, 4096, 65536, 2**20]),
    st.integers(1, 64).map(lambda k: k * 1024 + 3),
)


@st.composite
def lifetime_sets(draw, max_short: int = 40, max_long: int = 8) -> list[Buffer]:
    short = draw(
        st.lists(st.tuples(sizes, st.integers(0, MAX_STEP), st.integers(0, 4)), max_size=max_short)
    )
    buffers = [Buffer(f"s{i}", z, s, min(MAX_STEP, s + d)) for i, (z, s, d) in enumerate(short)]
    clusters = draw(st.integers(0, 2))
    for c in range(clusters):
        anchor = draw(st.integers(0, MAX_STEP))
        ends_together = draw(st.booleans())
        members = draw(st.lists(st.tuples(sizes, st.integers(0, MAX_STEP)), max_size=max_long))
        for j, (z, other) in enumerate(members):
            if ends_together:  # outputs: made at different steps, all read at the end
                start, end = min(other, anchor), anchor
            else:  # inputs / caches: all there from the start, last read at different steps
                start, end = anchor, max(other, anchor)
            buffers.append(Buffer(f"l{c}.{j}", z, start, end))
    return buffers


alignments = st.sampled_from([1, 8, 16, 64, 256])
