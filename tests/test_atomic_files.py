"""Writes are atomic and clean: a failed write (a full disk, an error of the writer, an
interrupt, a directory as the target) leaves the target as it was and no temporary file."""

from __future__ import annotations

import errno
import zipfile

import pytest

import workbench as wb
from workbench.atomic_files import FileWriteError, atomic_path
from workbench.planning.archive import PlanWriteError

from conftest import captured


@pytest.fixture(scope="module")
def plan():
    return wb.plan(wb.propagate(wb.place(captured("mlp")[2], {"cuda:0": ["aten.linear"]})))


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_saving_to_a_directory_leaves_nothing(plan, tmp_path):
    """``plan.save(<a directory>)`` is refused before anything is written."""
    with pytest.raises(PlanWriteError, match="it is a directory"):
        plan.save(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_leaves_the_old_file_and_no_temporary(plan, tmp_path, monkeypatch):
    """A save that runs out of space midway: the earlier plan at the target is untouched
    and the half-written temporary file is gone."""
    target = tmp_path / "p.wbplan"
    plan.save(target)
    before = target.read_bytes()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", full)
    with pytest.raises(PlanWriteError, match="No space left on device"):
        plan.save(target)
    assert target.read_bytes() == before and _leftovers(tmp_path) == []


@pytest.mark.parametrize("failure", [ValueError("bad table"), KeyboardInterrupt()], ids=["writer-error", "interrupt"])
def test_a_writer_that_fails_leaves_nothing(tmp_path, failure):
    """The writer's own exception passes through unchanged; the target keeps its old
    content; no temporary file stays."""
    target = tmp_path / "table.csv"
    target.write_text("old")
    with pytest.raises(type(failure)):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise failure
    assert target.read_text() == "old" and _leftovers(tmp_path) == []


def test_the_temporary_file_keeps_the_suffix_and_replaces_the_target(tmp_path):
    """Writers that pick a format by suffix see the target's; on success the target holds
    exactly the new content."""
    target = tmp_path / "figure.png"
    with atomic_path(target) as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and _leftovers(tmp_path) == []


def test_a_writer_that_writes_nothing_is_an_error(tmp_path):
    """A writer that silently wrote no file does not leave the target looking written."""
    with pytest.raises(FileWriteError, match="wrote nothing"):
        with atomic_path(tmp_path / "t.json"):
            pass
    assert list(tmp_path.iterdir()) == []
