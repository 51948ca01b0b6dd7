"""Measured preset files under hostile conditions: pipes, deep JSON, a full disk,
concurrent saves, and preset names that are paths.

Properties:
- ``measured_calibrations`` never waits on a named pipe among the presets: it is refused
  with a ``CalibrationError`` naming it; a save's hidden temporary file is no preset.
- JSON nested past the parser's recursion limit is a ``CalibrationError``, not a raw
  ``RecursionError``.
- A save that fills the disk is a ``WorkbenchError`` naming the target; the old preset is
  untouched and no temporary file stays behind.
- Two processes saving the same preset name at once never collide: every save succeeds
  and the file left is a complete preset; each save has a temporary file of its own.
- A preset name is a plain name: ``CostModel.preset("measured:<path>")`` is refused even
  when the path leads to a valid preset outside the measured folder; a plain name still
  loads; a calibration whose name is a path is not saved.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pathlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.machine import CostModel
from workbench.machine.calibration.calibrate import Calibration, CalibrationError, measured_calibrations
from workbench.machine.cost_model import MEASURED_DIR_ENV, CostModelError, measured_dir, measured_preset_names

from conftest import call_with_timeout

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = measured_dir() / "h200.json"


@pytest.fixture(scope="module")
def calibration():
    return Calibration.load(SHIPPED)


def test_a_pipe_among_the_presets_is_refused_at_once(tmp_path):
    """A FIFO named ``x.json`` in the presets' folder: listing them raises a
    CalibrationError naming it."""
    shutil.copyfile(SHIPPED, tmp_path / "h200.json")
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    raised = call_with_timeout(lambda _pipe: measured_calibrations(tmp_path), fifo)
    assert isinstance(raised, CalibrationError) and "x.json" in str(raised) and "named pipe" in str(raised)


def test_a_saves_temporary_file_is_not_a_preset(tmp_path, monkeypatch):
    """A hidden ``.h200.json.<pid>-<id>.tmp.json`` beside the presets (a save in progress)
    is neither listed nor loaded."""
    shutil.copyfile(SHIPPED, tmp_path / "h200.json")
    (tmp_path / ".h200.json.123-0123456789ab.tmp.json").write_text("{")
    monkeypatch.setenv(MEASURED_DIR_ENV, str(tmp_path))
    assert measured_preset_names() == ("h200",)
    assert [c.name for c in measured_calibrations(tmp_path)] == ["h200"]


def test_deep_json_is_a_calibration_error(tmp_path):
    """100,000 nested lists: a CalibrationError saying the JSON nests too deeply."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CalibrationError, match="too deeply"):
        Calibration.load(path)


def test_a_full_disk_leaves_the_old_preset_and_no_temporary_file(calibration, tmp_path, monkeypatch):
    """The write runs out of space after its first bytes (ENOSPC): the save fails with a
    WorkbenchError naming the target, the earlier preset is byte for byte as it was, and
    the folder holds nothing else."""
    target = calibration.save(tmp_path)
    before = target.read_bytes()
    real = pathlib.Path.write_text

    def full_disk(self, data, *args, **kwargs):
        real(self, data[:100], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    with pytest.raises(WorkbenchError, match=f"{target.name}.*No space left"):
        dataclasses.replace(calibration, date="2030-01-01T00:00:00+00:00").save(tmp_path)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h200.json"]


def test_concurrent_saves_use_their_own_temporary_files(calibration, tmp_path, monkeypatch):
    """Each save writes a temporary file of its own (two saves of one name never share one)."""
    used = []
    real = os.replace

    def recording(src, dst):
        used.append(Path(src).name)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", recording)
    calibration.save(tmp_path)
    calibration.save(tmp_path)
    assert len(used) == 2 and used[0] != used[1] and all(u.startswith(".h200.json.") for u in used)


_SAVER = """
import sys
from workbench.machine.calibration.calibrate import Calibration
calibration = Calibration.load(sys.argv[1])
for _ in range(25):
    calibration.save(sys.argv[2])
"""


def test_two_processes_saving_one_name_never_collide(tmp_path):
    """Two processes each save the same preset 25 times at once: no save fails, and the
    file left loads as the complete preset, with nothing else in the folder."""
    procs = [subprocess.Popen([sys.executable, "-c", _SAVER, str(SHIPPED), str(tmp_path)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    assert Calibration.load(tmp_path / "h200.json") == Calibration.load(SHIPPED)
    assert [p.name for p in tmp_path.iterdir()] == ["h200.json"]


@pytest.mark.parametrize("name", ["../../outside", "../outside", "/tmp/outside", "sub/h200", ".hidden", "", "h200\\..\\x"])
def test_a_measured_preset_name_that_is_a_path_is_refused(name, tmp_path, monkeypatch):
    """``measured:<name>`` takes a name, never a path: a valid preset placed where the path
    leads (two folders up) is not loaded, and the error says what a name may hold."""
    presets = tmp_path / "a" / "b"
    presets.mkdir(parents=True)
    shutil.copyfile(SHIPPED, tmp_path / "outside.json")
    shutil.copyfile(SHIPPED, presets / "h200.json")
    monkeypatch.setenv(MEASURED_DIR_ENV, str(presets))
    with pytest.raises(CostModelError, match="not a plain name.*letters, digits"):
        CostModel.preset(f"measured:{name}")
    assert CostModel.preset("measured:h200") == CostModel.load(SHIPPED)


def test_a_calibration_named_by_a_path_is_not_saved(calibration, tmp_path):
    """A calibration whose name holds a separator is refused before anything is written."""
    with pytest.raises(CalibrationError, match="no path separator"):
        dataclasses.replace(calibration, name="../escaped").save(tmp_path / "inner")
    assert list(tmp_path.iterdir()) == []
