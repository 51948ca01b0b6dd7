"""A runtime that dequantizes low-bit experts into a 16-bit copy before its matmul pays for it."""

import dataclasses

import pytest

from workbench.machine.cost_model import CostModel
from workbench.speed.layout import DecodeLayout, ExpertPlacement, ModelFacts
from workbench.speed.regime_model import runtime_profile
from workbench.speed.timer import time_decode

QWEN3_30B = ModelFacts("Qwen3-30B-A3B", layers=48, total_params=30.5e9, active_params=3.3e9, num_experts=128, top_k=8,
                       expert_params=3 * 2048 * 768, hidden=2048)  # fmt: skip
COPIED = ExpertPlacement("experts_copied", resident_expert_bytes=2e9)


def _machine(kernels_per_expert: float) -> CostModel:
    model = CostModel.compose(gpu="rtx_4090", host="ryzen_9_7950x", link="pcie_gen4", runtime=runtime_profile("hf_offloaders"))
    return dataclasses.replace(model, dequant_kernels_per_expert=kernels_per_expert)


def _layout(formats: str) -> DecodeLayout:
    return DecodeLayout.for_machine(gpu="rtx_4090", host="ryzen_9_7950x", link="pcie_gen4", model=QWEN3_30B,
                                    formats=formats, placement=COPIED)  # fmt: skip


def test_a_2_bit_copied_expert_costs_a_dequantization_a_16_bit_one_does_not():
    """Dequantizing 2-bit experts into 16-bit copies adds their write and read (4 bytes per
    weight the GPU computes) and the dequantization kernels; a bf16 expert has nothing to
    dequantize and takes the same time either way."""
    unfused, fused = _machine(9), _machine(0)
    low = _layout("int2_g64")
    extra = time_decode(low, unfused).device - time_decode(low, fused).device
    kernels = low.gpu_experts * 9
    expected = 4 * low.gpu_expert_weights / unfused.device_memory_bandwidth + kernels * unfused.kernel_gap
    assert extra == pytest.approx(expected, rel=0.02) and extra > 0
    assert time_decode(low, unfused).kernels == pytest.approx(time_decode(low, fused).kernels + kernels)
    wide = _layout("bf16")
    assert time_decode(wide, unfused).seconds == pytest.approx(time_decode(wide, fused).seconds)


def test_only_the_experts_the_gpu_computes_are_dequantized_there():
    """Experts the host computes are not dequantized on the GPU: a placement that moves half
    the experts' work to the host halves the added copy bytes."""
    partial = DecodeLayout.for_machine(gpu="rtx_4090", host="ryzen_9_7950x", link="pcie_gen4", model=QWEN3_30B,
                                       formats="int2_g64", placement=ExpertPlacement("partial_offload", host_layers=24))  # fmt: skip
    assert partial.gpu_expert_weights == pytest.approx(QWEN3_30B.expert_active / 2)
    assert partial.gpu_experts == pytest.approx(24 * 8)
