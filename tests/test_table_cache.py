"""Data tables are cached by the identity of their file, never by the path alone.

Properties:
- An edited table is read again: the edit is seen, and an edit that breaks the table is
  refused with the reader's error naming the file (never the old table "read" again).
- A relative path is read in the folder it is read from: the same name in two folders
  gives each folder's table.
- An unchanged table is parsed once; a table modified moments ago (file times are as
  coarse as the kernel's tick) is parsed every time; a failed read is never kept; a
  named pipe reaches the reader (which refuses it) instead of blocking the cache.

Each reader is checked with its shipped table copied to a temporary folder; file times
are set into the past so that the cache keeps what it reads (a fresh file is never kept).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from workbench import weight_formats as formats_module
from workbench.file_reading import cached_by_file, file_identity
from workbench.moe.locality import LocalityError, locality_path, published_locality
from workbench.machine.op_cost import CostModelError
from workbench.machine.parts import parts, parts_path
from workbench.weight_formats import WeightFormatError, formats_path, weight_formats


def _settle(path: Path, seconds_ago: float) -> None:
    """Give ``path`` a modification time ``seconds_ago`` in the past, and let its status
    change (which no call can set back) age past the kernel's clock tick."""
    then = time.time() - seconds_ago
    os.utime(path, (then, then))
    time.sleep(0.06)


def _bits_of_bf16(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(formats_module, "formats_path", lambda: path)
    return weight_formats()["bf16"].bits_per_weight


@dataclass(frozen=True)
class Case:
    shipped: Path
    read: Callable[[Path, pytest.MonkeyPatch], Any]  # a value the edit changes
    old: str  # text in the shipped table
    new: str  # the same length: an edit that keeps the file's size
    broken: str  # replaces ``old``: the table is refused
    error: type[Exception]
    before: Any
    after: Any


CASES = {
    "hardware parts": Case(parts_path(), lambda p, _m: parts(p).loc[0, "value"], "gpu,h200,device_flops_fp64,67e12",
                           "gpu,h200,device_flops_fp64,68e12", "gpu,h200,device_flops_fp64,fast!", CostModelError,
                           "67e12", "68e12"),
    "weight formats": Case(formats_path(), _bits_of_bf16, "bf16,,16,0", "bf16,,15,0", "bf16,,1e9,0", WeightFormatError,
                           16.0, 15.0),
    "routing locality": Case(locality_path(), lambda p, _m: published_locality(p).loc[0, "value"],
                             "0,first_choice_repeat,0.140", "0,first_choice_repeat,0.150",
                             "0,first_choice_repeat,1.140", LocalityError, 0.14, 0.15),
}  # fmt: skip


def _copy(case: Case, folder: Path, text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.shipped.name
    if text is None:
        shutil.copyfile(case.shipped, path)
    else:
        path.write_text(text)
    return path


def _edited(case: Case, replacement: str) -> str:
    text = case.shipped.read_text()
    assert text.count(case.old) == 1, "the test's edit must hit exactly one place"
    return text.replace(case.old, replacement)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_edited_table_is_read_again(name, tmp_path, monkeypatch):
    """Read (and kept), edited in place to the same size at a later time: the edit is seen."""
    case = CASES[name]
    path = _copy(case, tmp_path)
    _settle(path, 100)
    assert case.read(path, monkeypatch) == case.before
    assert case.read(path, monkeypatch) == case.before  # kept
    path.write_text(_edited(case, case.new))
    _settle(path, 50)
    assert case.read(path, monkeypatch) == case.after


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_edit_that_breaks_a_read_table_is_refused(name, tmp_path, monkeypatch):
    """A table read and kept, then broken by an edit: the next read is the reader's
    error naming the file, not the kept table."""
    case = CASES[name]
    path = _copy(case, tmp_path)
    _settle(path, 100)
    assert case.read(path, monkeypatch) == case.before
    path.write_text(_edited(case, case.broken))
    _settle(path, 50)
    with pytest.raises(case.error, match=str(path.name)):
        case.read(path, monkeypatch)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_relative_path_is_read_in_the_folder_it_is_read_from(name, tmp_path, monkeypatch):
    """Two folders hold a table of the same name, size and time: the relative name read
    from each gives that folder's table."""
    case = CASES[name]
    first = _copy(case, tmp_path / "a")
    second = _copy(case, tmp_path / "b", _edited(case, case.new))
    for path in (first, second):
        _settle(path, 100)
    assert first.stat().st_size == second.stat().st_size
    relative = Path(case.shipped.name)
    monkeypatch.chdir(first.parent)
    assert case.read(relative, monkeypatch) == case.before
    monkeypatch.chdir(second.parent)
    assert case.read(relative, monkeypatch) == case.after


def _counting_parser() -> tuple[Callable[[Path], str], list[Path]]:
    calls: list[Path] = []

    def parse(path: Path) -> str:
        calls.append(path)
        text = path.read_text()
        if "bad" in text:
            raise ValueError("bad table")
        return text

    return cached_by_file(parse), calls


def test_an_unchanged_table_is_parsed_once_and_a_fresh_one_every_time(tmp_path):
    """A file last modified long ago is parsed once for many reads; one modified moments
    ago is parsed on every read (its time cannot yet tell a same-size edit apart)."""
    read, calls = _counting_parser()
    old, fresh = tmp_path / "old.csv", tmp_path / "fresh.csv"
    old.write_text("a\n1\n")
    fresh.write_text("a\n2\n")
    _settle(old, 100)
    assert [read(old) for _ in range(3)] == ["a\n1\n"] * 3
    assert calls.count(old) == 1
    assert [read(fresh) for _ in range(3)] == ["a\n2\n"] * 3
    assert calls.count(fresh) == 3


def test_a_failed_read_is_never_kept(tmp_path):
    """A table whose parse fails is parsed again on the next read: once fixed, its new
    content is returned; the error is never replayed from a cache, nor a result kept for it."""
    read, calls = _counting_parser()
    path = tmp_path / "t.csv"
    path.write_text("bad\n")
    _settle(path, 100)
    with pytest.raises(ValueError):
        read(path)
    path.write_text("ok!\n")
    _settle(path, 100)  # the same size and the same time: only the failure is not kept
    assert read(path) == "ok!\n" and len(calls) == 2


def test_a_file_that_cannot_be_identified_goes_to_the_reader(tmp_path):
    """A missing file or a named pipe has no identity (``stat`` never opens it): the parser
    is called and gives its own error; nothing blocks."""
    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)
    assert file_identity(pipe) is None and file_identity(tmp_path / "absent.csv") is None
    with pytest.raises(CostModelError, match="named pipe"):
        parts(pipe)
    with pytest.raises(CostModelError, match="not found"):
        parts(tmp_path / "absent.csv")


def test_the_default_cost_model_follows_an_edited_measured_preset(tmp_path, monkeypatch):
    """The default model for a GPU is chosen again when the measured preset it comes from
    is edited: the new figure is used, not the one chosen before."""
    from workbench.machine.cost_model import MEASURED_DIR_ENV, measured_dir
    from workbench.machine.default_model import choose_default_cost_model

    preset = tmp_path / "h200.json"
    shutil.copyfile(measured_dir() / "h200.json", preset)
    monkeypatch.setenv(MEASURED_DIR_ENV, str(tmp_path))
    data = json.loads(preset.read_text())
    assert choose_default_cost_model("NVIDIA H200").h2d_bandwidth == data["cost_model"]["h2d_bandwidth"]
    data["cost_model"]["h2d_bandwidth"] = 1.25e9
    preset.write_text(json.dumps(data))
    assert choose_default_cost_model("NVIDIA H200").h2d_bandwidth == 1.25e9


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("how", ["written in place", "renamed over it", "restored by copy"])
def test_a_table_replaced_with_the_same_size_and_time_is_read_again(name, how, tmp_path, monkeypatch):
    """A kept table replaced by another of the same size and the same modification time
    (``cp -p``, a restore, an editor that keeps the time): the replacement is read, as the
    kernel's status-change time, which no user call sets back, tells the two apart."""
    case = CASES[name]
    path = _copy(case, tmp_path)
    _settle(path, 100)
    assert case.read(path, monkeypatch) == case.before
    assert case.read(path, monkeypatch) == case.before  # kept
    old = path.stat()
    edited = _edited(case, case.new)
    if how == "written in place":
        path.write_text(edited)
    elif how == "renamed over it":
        other = tmp_path / "other.tmp"
        other.write_text(edited)
        os.replace(other, path)
    else:
        other = tmp_path / "backup" / path.name
        other.parent.mkdir()
        other.write_text(edited)
        shutil.copy2(other, path)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    assert case.read(path, monkeypatch) == case.after
