"""StreamScheduler: modeled time follows CUDA stream ordering."""

import pytest

from workbench.runtime import StreamScheduler
from workbench.machine import CostModel


def test_two_independent_copies_on_one_stream_serialize():
    """The second copy on the copy stream starts when the first ends, though nothing links them."""
    cm = CostModel.preset("h200", link="pcie_gen5")
    s = StreamScheduler()
    t = cm.copy_time_us("h2d", 50_000_000)
    a = s.schedule("h2d", "x", "cuda:0", "copy", t, nbytes=50_000_000)
    b = s.schedule("h2d", "y", "cuda:0", "copy", t, nbytes=50_000_000)
    assert a.start_us == 0 and b.start_us == a.end_us and s.timeline().span_us == 2 * t


def test_copy_and_compute_on_different_streams_overlap():
    """An independent copy and compute start together on their own streams; the span is the longer one."""
    s = StreamScheduler()
    copy = s.schedule("h2d", "w", "cuda:0", "copy", 30.0, nbytes=1000)
    comp = s.schedule("compute", "mm", "cuda:0", "compute", 50.0, flops=10)
    assert copy.start_us == comp.start_us == 0.0
    assert s.timeline().span_us == 50.0
    assert s.timeline().overlap_fraction() == 1.0


def test_dependent_op_waits_for_its_dependency():
    """Compute that needs a copied input starts at the copy's end, even with its stream idle."""
    s = StreamScheduler()
    copy = s.schedule("h2d", "x", "cuda:0", "copy", 40.0, nbytes=8)
    comp = s.schedule("compute", "mm", "cuda:0", "compute", 10.0, deps=[copy])
    d2h = s.schedule("d2h", "out", "cuda:0", "copy", 5.0, deps=[comp.id], nbytes=8)
    assert comp.start_us == 40.0 and d2h.start_us == 50.0 and s.now_us == 55.0


def test_start_is_max_of_stream_free_and_all_deps():
    """With a busy stream and two deps, the start is the latest of the three."""
    s = StreamScheduler()
    a = s.schedule("compute", "a", "cuda:0", "compute", 10.0)
    b = s.schedule("h2d", "b", "cuda:0", "copy", 25.0)
    c = s.schedule("host", "c", "cpu", "main", 5.0)
    d = s.schedule("compute", "d", "cuda:0", "compute", 1.0, deps=[b, c])
    assert d.start_us == max(a.end_us, b.end_us, c.end_us) == 25.0


def test_lanes_are_per_device():
    """The same stream name on two devices is two lanes, so their work overlaps."""
    s = StreamScheduler()
    s.schedule("compute", "a", "cuda:0", "compute", 10.0)
    b = s.schedule("compute", "b", "cuda:1", "compute", 10.0)
    assert b.start_us == 0.0
    assert s.timeline().streams() == [("cuda:0", "compute"), ("cuda:1", "compute")]


def test_bad_dependencies_and_durations_are_errors():
    """An unknown dep id or a negative duration is refused with the reason."""
    s = StreamScheduler()
    with pytest.raises(ValueError, match="unknown dependency"):
        s.schedule("compute", "a", "cuda:0", "compute", 1.0, deps=[7])
    with pytest.raises(ValueError, match="duration"):
        s.schedule("compute", "a", "cuda:0", "compute", -1.0)
    with pytest.raises(ValueError, match="event kind"):
        s.schedule("prefetch", "a", "cuda:0", "copy", 1.0)
