"""Host-resident experts computed by PyTorch's own CPU kernels, not ggml's."""

import pytest

from workbench.machine.cost_model import CostModel
from workbench.machine.parts import part_facts
from workbench.machine.runtime_profiles import host_matvec
from workbench.speed.layout import DecodeLayout, ExpertPlacement, ModelFacts
from workbench.speed.regime_model import regime_model, runtime_profile
from workbench.speed.timer import time_decode

QWEN3_30B = ModelFacts("Qwen3-30B-A3B", layers=48, total_params=30.5e9, active_params=3.3e9, num_experts=128, top_k=8,
                       expert_params=3 * 2048 * 768, hidden=2048)  # fmt: skip


def _timed(profile: str, host: str, threads: int):
    layout = DecodeLayout.for_machine(gpu="rtx_4090", host=host, link="pcie_gen4", model=QWEN3_30B, formats="bf16",
                                      placement=ExpertPlacement("experts_on_host_compute"))  # fmt: skip
    machine = CostModel.compose(gpu="rtx_4090", host=host, link="pcie_gen4", runtime=runtime_profile(profile).with_settings(threads))
    return layout, machine, time_decode(layout, machine)


def test_bf16_experts_on_the_host_run_at_pytorchs_measured_rate():
    """On one thread, bf16 experts computed by PyTorch's CPU linear are bound by its
    measured per-core rate (scaled to this host's core), above the DRAM time, and take
    longer than ggml's kernels on the same thread: the runtime's kernel family is a term of
    the time, not a label."""
    host = "core_i3_8100"
    layout, machine, torch_time = _timed("torch_cpu_experts", host, 1)
    rate, measured_on = next((r, c) for f, r, c in host_matvec("torch") if f == "bf16")
    facts = part_facts("host", host)
    expected_rate = rate * (machine.host_flops / facts["cores"]) / measured_on
    assert dict(machine.host_matvec_rates)["bf16"] == pytest.approx(expected_rate)
    compute = layout.host_weights / expected_rate
    assert compute > layout.host_bytes / machine.host_memory_bandwidth and torch_time.host_bound == "compute"
    assert torch_time.host == pytest.approx(compute + layout.host_calls * machine.host_op_overhead)
    assert torch_time.host > _timed("ggml", host, 1)[2].host


def test_a_pytorch_cpu_expert_runtime_is_an_unvalidated_runtime():
    """No published run names a PyTorch-CPU-expert engine yet: its predictions carry the
    widened interval of an unvalidated runtime."""
    interval = regime_model().interval("torch_cpu_experts", "experts_on_host_compute")
    assert interval is not None and interval.evidence == "unvalidated runtime" and not interval.own
