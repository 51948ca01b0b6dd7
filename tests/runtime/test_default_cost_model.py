"""The default cost model: the measured preset of the GPU at hand, else the datasheet H200."""

from __future__ import annotations

import dataclasses
import json

import pytest

import workbench as wb
from workbench.app import cli
from workbench.models.examples import example
from workbench.machine import CostModel
from workbench.machine import default_model
from workbench.machine.cost_model import CostModelError, measured_dir
from workbench.machine.default_model import (
    choose_default_cost_model,
    default_cost_model,
    default_device_preset,
    gpu_at_hand,
    measured_preset_for,
)


def _figures(model: CostModel) -> dict:
    return {k: v for k, v in model.to_dict().items() if k != "name"}


def test_matching_gpu_gets_its_measured_preset():
    """An H200 at hand (its name as CUDA reports it, in any case, spaces around) gets the
    measured H200's figures, and the name says so and why."""
    for name in ("NVIDIA H200", " nvidia h200 "):
        model = choose_default_cost_model(name)
        assert _figures(model) == _figures(CostModel.preset("measured:h200"))
        assert model.name == f"measured:h200 (GPU at hand: {name})"
    assert default_device_preset("NVIDIA H200") == "measured:h200"


def test_no_gpu_or_unmeasured_gpu_gets_the_datasheet_h200():
    """No GPU, or a GPU no measured preset was recorded on: the datasheet H200 on PCIe Gen5
    with an x86 server, figure for figure, named with the reason."""
    datasheet = _figures(CostModel.preset("h200", link="pcie_gen5", host="x86_server"))
    none = choose_default_cost_model(None)
    assert _figures(none) == datasheet
    assert none.name == "h200+pcie_gen5+x86_server (datasheet; no GPU at hand)"
    l4 = choose_default_cost_model("NVIDIA L4")
    assert _figures(l4) == datasheet and "no measured preset for GPU at hand: NVIDIA L4" in l4.name
    assert default_device_preset(None, detect=False) == "h200"
    assert measured_preset_for("NVIDIA L4") is None


def test_default_follows_the_gpu_at_hand_into_sim_runs(monkeypatch):
    """default_cost_model() asks for the GPU at hand; a sim run given no cost model is
    timed by it, and the walkthrough's line names it."""
    model, inputs = example("residual")
    plan = wb.plan(wb.propagate(wb.place(wb.capture(model, inputs), {"cuda:0": ["aten.linear"]})))
    monkeypatch.setattr(default_model, "gpu_at_hand", lambda: "NVIDIA H200")
    assert default_cost_model().name.startswith("measured:h200")
    assert wb.machine.default_cost_model() == default_cost_model()
    measured = wb.run(plan, *inputs, backend="sim")
    assert measured.cost_model is not None and measured.cost_model.name == "measured:h200 (GPU at hand: NVIDIA H200)"
    assert "measured:h200 (GPU at hand: NVIDIA H200)" in cli._cost_model_line("sim")
    monkeypatch.setattr(default_model, "gpu_at_hand", lambda: None)
    plain = wb.run(plan, *inputs, backend="sim")
    assert plain.cost_model is not None and "no GPU at hand" in plain.cost_model.name
    assert plain.time_us != measured.time_us  # the measured H200 is not the datasheet one
    assert "no GPU at hand" in cli._cost_model_line("sim")


def test_disabled_cuda_means_no_gpu_at_hand(monkeypatch):
    """WORKBENCH_DISABLE_CUDA=1 leaves no GPU at hand, whatever is installed."""
    monkeypatch.setenv("WORKBENCH_DISABLE_CUDA", "1")
    assert gpu_at_hand() is None
    assert "no GPU at hand" in default_cost_model().name


def test_presets_are_matched_by_the_gpu_they_record(tmp_path, monkeypatch):
    """In another measured folder, a preset recorded on an L4 is the L4's default; a file
    that is not a preset matches nothing and breaks nothing."""
    data = json.loads((measured_dir() / "h200.json").read_text())
    data["name"], data["machine"]["gpu"] = "l4", "NVIDIA L4"
    data["cost_model"]["name"] = "measured:l4"
    monkeypatch.setenv("WORKBENCH_MEASURED_DIR", str(tmp_path))
    (tmp_path / "l4.json").write_text(json.dumps(data))
    (tmp_path / "broken.json").write_text("{not json")
    model = choose_default_cost_model("NVIDIA L4")
    assert model.name == "measured:l4 (GPU at hand: NVIDIA L4)"
    assert dataclasses.replace(model, name="measured:l4") == CostModel.preset("measured:l4")
    assert "datasheet" in choose_default_cost_model("NVIDIA H200").name  # not in this folder


def test_bad_gpu_name_is_refused():
    """A GPU name that is not a string is a clear error."""
    with pytest.raises(CostModelError, match="GPU name"):
        choose_default_cost_model(200)  # type: ignore[arg-type]
