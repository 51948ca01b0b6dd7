"""Timeline summaries: totals, bytes, lanes, span and the overlap fraction."""

import pytest

from workbench.runtime import Event, Timeline


def ev(kind, start, end, device="cuda:0", stream=None, nbytes=0):
    stream = stream or ("compute" if kind in ("compute", "host") else "copy")
    return Event(kind, f"{kind}@{start}", device, stream, start, end, nbytes)


def test_overlap_zero_when_copies_and_compute_are_disjoint():
    """Copies before and after compute overlap nothing."""
    tl = Timeline([ev("h2d", 0, 10), ev("compute", 10, 30), ev("d2h", 30, 35)])
    assert tl.overlap_fraction() == 0.0


def test_overlap_partial():
    """A 10 µs copy with compute over its last 5 µs is half hidden."""
    tl = Timeline([ev("h2d", 0, 10), ev("compute", 5, 20)])
    assert tl.overlap_fraction() == pytest.approx(0.5)


def test_overlap_full():
    """A copy entirely inside compute is fully hidden."""
    tl = Timeline([ev("compute", 0, 100), ev("h2d", 20, 40)])
    assert tl.overlap_fraction() == 1.0


def test_overlap_counts_concurrent_copies_once_and_merges_compute():
    """Two copies on different streams over [0,10) and [5,15) make 15 µs of copy time; compute
    pieces [0,3) and [2,6) (host and device) cover 6 µs of it: 6/15."""
    tl = Timeline([
        ev("h2d", 0, 10, stream="copy0"),
        ev("d2d", 5, 15, stream="copy1"),
        ev("compute", 0, 3),
        ev("host", 2, 6, device="cpu", stream="main"),
    ])
    assert tl.overlap_fraction() == pytest.approx(6 / 15)
    assert tl.overlap_fraction(compute_kinds=("compute",)) == pytest.approx(3 / 15)


def test_overlap_without_copies_is_zero():
    """No copy time: nothing to hide, the fraction is 0."""
    assert Timeline([ev("compute", 0, 5)]).overlap_fraction() == 0.0
    assert Timeline().overlap_fraction() == 0.0


def test_totals_bytes_span_streams_and_dataframe():
    """Totals per kind, bytes per copy kind, span, sorted lanes and the DataFrame agree with the events."""
    tl = Timeline([
        ev("h2d", 0, 4, nbytes=100),
        ev("h2d", 4, 6, nbytes=50),
        ev("compute", 2, 12),
        ev("d2h", 12, 13, nbytes=8),
        ev("host", 13, 20, device="cpu", stream="main"),
    ])
    assert tl.totals_by_kind() == {"h2d": 6.0, "d2h": 1.0, "d2d": 0.0, "compute": 10.0, "host": 7.0}
    assert tl.bytes_moved() == {"h2d": 150, "d2h": 8, "d2d": 0}
    assert tl.span_us == 20.0
    assert tl.streams() == [("cpu", "main"), ("cuda:0", "compute"), ("cuda:0", "copy")]
    df = tl.to_dataframe()
    assert len(df) == 5 and df["duration_us"].sum() == 24.0 and list(df["start_us"]) == sorted(df["start_us"])


def test_event_validation():
    """Unknown kinds, backwards times and bad devices are refused; devices are canonical."""
    with pytest.raises(ValueError, match="kind"):
        Event("memcpy", "n", "cuda:0", "copy", 0, 1)
    with pytest.raises(ValueError, match="before it starts"):
        Event("h2d", "n", "cuda:0", "copy", 5, 1)
    with pytest.raises(ValueError, match="device type"):
        Event("h2d", "n", "tpu:0", "copy", 0, 1)
    assert Event("h2d", "n", "CUDA", "copy", 0, 1).device == "cuda:0"
    assert Event("h2d", "n", "cuda", "copy", 0, 2, nbytes=4000).gb_per_s == pytest.approx(2.0)
