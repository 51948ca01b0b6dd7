"""The tiny decode step measured on a GPU: read from the committed file, set beside a model
with its ratio and ranks, and refused when damaged."""

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from workbench.app.measured_decode import (
    GATHER_COLUMNS,
    MeasuredDecodeError,
    beside_model,
    measured_decode,
    measured_gathers,
    rank_changes,
)
from workbench.machine.cost_model import MEASURED_DIR_ENV, measured_dir

@pytest.fixture()
def folder(tmp_path, monkeypatch):
    """A measured folder holding a copy of the committed H200 calibration."""
    shutil.copy(measured_dir() / "h200.json", tmp_path / "h200.json")
    monkeypatch.setenv(MEASURED_DIR_ENV, str(tmp_path))
    return tmp_path


def test_the_committed_measurement_is_read_whole():
    """Every strategy with a measured span is read, with the GPU and date of the calibration
    of the same name, and the spans as the file states them."""
    decoded = measured_decode("h200")
    shipped = pd.read_csv(measured_dir() / "h200_moe_decode.csv").set_index("strategy")
    assert decoded is not None and decoded.gpu == "NVIDIA H200" and re.fullmatch(r"\d{4}-\d\d-\d\d", decoded.date)
    assert list(decoded.spans.index) == list(shipped.index)
    assert (decoded.spans["measured_us"] == shipped["measured_span_us"]).all()


def test_beside_a_model_the_ratio_and_ranks_follow_the_numbers():
    """The ratio is measured / modeled; ranks are 1 for the fastest; a strategy whose rank
    moves is named, one that keeps it is not; a strategy the model lacks is left out."""
    decoded = measured_decode("h200")
    measured = decoded.spans["measured_us"]
    modeled = {s: float(v) for s, v in (measured / 10).items()}  # the same order, ten times faster
    same = beside_model(decoded, modeled)
    assert same["measured / modeled"].round(9).eq(10).all() and rank_changes(same) == []
    fastest, slowest = measured.idxmin(), measured.idxmax()
    swapped = {**modeled, fastest: modeled[slowest], slowest: modeled[fastest]}
    assert set(rank_changes(beside_model(decoded, swapped))) >= {fastest, slowest}
    fewer = beside_model(decoded, {fastest: 1.0})
    assert list(fewer.index) == [fastest] and fewer.loc[fastest, "rank measured"] == 1


def test_no_committed_measurement_is_none(folder):
    """A calibration without a decode file (or none at all) gives None, not an error."""
    assert measured_decode("h200") is None
    assert measured_decode("a100") is None


def test_a_damaged_file_is_refused_naming_what_is_wrong(folder):
    """A file without the columns it needs, or without one measured span, or a directory in
    its place is a MeasuredDecodeError naming the file."""
    path = folder / "h200_moe_decode.csv"
    path.write_text("strategy,measured_span_us\nall_on_device,12\n")
    with pytest.raises(MeasuredDecodeError, match="lacks the columns modeled_h200_us"):
        measured_decode("h200")
    path.write_text("strategy,measured_span_us,modeled_h200_us,modeled_measured_us,outputs_equal_eager\nx,,1,1,True\n")
    with pytest.raises(MeasuredDecodeError, match="no strategy with a measured span"):
        measured_decode("h200")
    path.unlink()
    path.mkdir()
    with pytest.raises(MeasuredDecodeError, match="h200_moe_decode.csv"):
        measured_decode("h200")


def test_the_committed_gathers_are_read_per_slab_size():
    """Every gather row of the committed bandwidth file is read, keyed by its slab bytes, with
    the times the file states."""
    gathers = measured_gathers("h200")
    shipped = pd.read_csv(measured_dir() / "h200_copy_bandwidth.csv").query("direction == 'gather'").set_index("size")
    assert gathers is not None and sorted(gathers.index) == sorted(shipped.index)
    assert list(gathers.columns) == list(GATHER_COLUMNS)
    for size in shipped.index:
        assert gathers.loc[size].tolist() == shipped.loc[size, list(GATHER_COLUMNS)].tolist()


def test_damaged_gathers_are_refused_naming_what_is_wrong(folder):
    """No bandwidth file gives None; one lacking the gather columns, with no gather row, with a
    time that is not a positive number, or with a fractional size is refused."""
    assert measured_gathers("h200") is None
    path = folder / "h200_copy_bandwidth.csv"
    path.write_text("direction,size,gather_kernel\ngather,16384,3\n")
    with pytest.raises(MeasuredDecodeError, match="lacks the columns gather_auto"):
        measured_gathers("h200")
    header = "direction,size," + ",".join(GATHER_COLUMNS) + "\n"
    path.write_text(header + "h2d,16384,1,1,1,1,1,1\n")
    with pytest.raises(MeasuredDecodeError, match="no gather row"):
        measured_gathers("h200")
    path.write_text(header + "gather,16384,1,1,-2,1,1,1\n")
    with pytest.raises(MeasuredDecodeError, match="16384 B has a time"):
        measured_gathers("h200")
    path.write_text(header + "gather,16384.5,1,1,1,1,1,1\n")
    with pytest.raises(MeasuredDecodeError, match="not a whole number of bytes"):
        measured_gathers("h200")
    path.unlink()
    path.mkdir()
    with pytest.raises(MeasuredDecodeError):
        measured_gathers("h200")
