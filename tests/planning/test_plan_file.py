"""Saving and loading a planned program: everything intact; bad files refused clearly."""

import json
import zipfile

import pytest
import torch

import workbench as wb
from workbench.planning.arena_execution import run_in_arenas
from workbench.planning.archive import VERSION

from conftest import captured


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model, inputs, prog = captured("residual")
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]}), True, False)
    plan = wb.plan(dg, "best")
    path = tmp_path_factory.mktemp("plans") / "residual.wbplan"
    plan.save(path)
    return plan, path, model, inputs


def test_round_trip_keeps_everything(saved):
    """Devices, copies, residency, flags, every allocation and the steps survive a save/load."""
    plan, path, *_ = saved
    loaded = wb.load_plan(path)
    assert loaded.allocations == plan.allocations
    assert loaded.arena_bytes == plan.arena_bytes and loaded.lower_bound == plan.lower_bound
    assert loaded.steps == plan.steps and loaded.storage_of == plan.storage_of
    assert loaded.device_graph.copies == plan.device_graph.copies
    assert loaded.device_graph.node_device == plan.device_graph.node_device
    assert loaded.device_graph.residency == plan.device_graph.residency
    assert loaded.device_graph.input_devices == plan.device_graph.input_devices
    assert loaded.device_graph.placement.delegates == plan.device_graph.placement.delegates
    assert loaded.device_graph.skip_h2d_for_method_inputs and not loaded.device_graph.skip_d2h_for_method_outputs
    loaded.verify()


def test_loaded_plan_runs(saved):
    """A loaded plan executes in its arenas and equals eager."""
    plan, path, model, inputs = saved
    got = run_in_arenas(wb.load_plan(path), *inputs)
    assert torch.allclose(got, model(*inputs), atol=1e-5)


def test_no_half_written_file_on_failure(tmp_path, saved):
    """A save that fails leaves no file behind at the target path."""
    plan, *_ = saved
    target = tmp_path / "missing_dir" / "p.wbplan"
    with pytest.raises(OSError):
        plan.save(target)
    assert not target.exists()


def _rewrite(path, tmp_path, **replace):
    out = tmp_path / "edited.wbplan"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.namelist():
            data = replace.get(item, src.read(item))
            if data is not None:
                dst.writestr(item, data)
    return out


def test_version_mismatch_is_refused(saved, tmp_path):
    """A file of another format version is refused with both versions named."""
    _, path, *_ = saved
    bad = _rewrite(path, tmp_path, **{"format.json": json.dumps({"format": "workbench-plan", "version": VERSION + 1})})
    with pytest.raises(wb.PlanFileError, match=f"version {VERSION + 1}.*version {VERSION}"):
        wb.load_plan(bad)


def test_corrupt_files_are_refused(saved, tmp_path):
    """Not a zip, missing members, bad JSON and missing fields are clear PlanFileErrors."""
    _, path, *_ = saved
    junk = tmp_path / "junk.wbplan"
    junk.write_bytes(b"not a plan")
    with pytest.raises(wb.PlanFileError, match="not a zip"):
        wb.load_plan(junk)
    with pytest.raises(wb.PlanFileError, match="no 'plan.json'"):
        wb.load_plan(_rewrite(path, tmp_path, **{"plan.json": None}))
    with pytest.raises(wb.PlanFileError, match="corrupt"):
        wb.load_plan(_rewrite(path, tmp_path, **{"plan.json": b"{not json"}))
    with pytest.raises(wb.PlanFileError, match="corrupt"):
        wb.load_plan(_rewrite(path, tmp_path, **{"plan.json": json.dumps({"program": {}})}))
    with pytest.raises(wb.PlanFileError, match="format"):
        wb.load_plan(_rewrite(path, tmp_path, **{"format.json": json.dumps({"format": "other", "version": 1})}))
    with pytest.raises(wb.PlanFileError, match="no plan file"):
        wb.load_plan(tmp_path / "absent.wbplan")
