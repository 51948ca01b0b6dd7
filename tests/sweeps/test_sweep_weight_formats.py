"""Sweeps of quantized programs: budgets, copy bytes and times follow the stored format."""

import math

import pytest

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.sweeps import InlineExecutor, sweep
from workbench.weight_formats import WeightFormatError, weight_format

TINY = MoEConfig.tiny()
GRID = {"all_on_device": {}, "expert_streaming": {"prefetch": [False]}}
RULES = {"q4_k": ["module:layers.*.mlp.experts"]}


def test_sweep_of_a_quantized_config_holds_and_moves_fewer_bytes():
    """With Q4_K experts (fp32 tiny model: 32 bits → 4.5), all-on-device resident bytes
    fall by the experts' bytes × (1 - 4.5/32), streamed experts cross the link at 4.5/32
    of the fp32 bytes, and a program quantized by the caller sweeps to the same points."""
    base = sweep(TINY, (1.0,), ("pcie_gen4",), GRID, InlineExecutor()).points.set_index("strategy")
    quant = sweep(TINY, (1.0,), ("pcie_gen4",), GRID, InlineExecutor(), weights=RULES).points.set_index("strategy")
    model = QwenMoEDecoder(TINY)
    expert_elements = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    saved = (base.loc["all_on_device", "resident_GiB"] - quant.loc["all_on_device", "resident_GiB"]) * 2**30
    assert saved == pytest.approx(expert_elements * (4 - 4.5 / 8), abs=2**30 * 1e-3)
    link = base.loc["expert_streaming", "link_MiB/token"], quant.loc["expert_streaming", "link_MiB/token"]
    assert link[1] == pytest.approx(link[0] * 4.5 / 32, abs=0.0011), link  # the column is rounded to 0.001 MiB
    program = wb.quantize(wb.capture(model, model.example_inputs(), shape_only=True), RULES)
    same = sweep(program, (1.0,), ("pcie_gen4",), GRID, InlineExecutor()).points.set_index("strategy")
    assert same["device_bytes"].tolist() == quant["device_bytes"].tolist()
    assert weight_format("q4_k").bits_per_weight == 4.5 and math.isfinite(quant["tok/s"].min())


def test_bad_weight_rules_fail_before_any_work():
    """An unknown format in ``weights=`` is refused at once, naming the valid ones."""
    with pytest.raises(WeightFormatError, match="unknown weight format 'q7'"):
        sweep(TINY, (1.0,), ("pcie_gen4",), GRID, InlineExecutor(), weights={"q7": ["*"]})
