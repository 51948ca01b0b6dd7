"""A planned graph's decode token as a layout (``layout_of``), and the same token laid out
from facts: one physics, two ways in."""

import dataclasses

import pytest
import torch

import workbench as wb
from workbench.capture import capture
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe.strategies import expert_streaming, experts_on_host
from workbench.machine import CostModel
from workbench.speed.graph_layout import plan_decode_time, layout_of
from workbench.speed.layout import DecodeLayout, ModelFacts, ExpertPlacement
from workbench.speed.timer import time_decode
from workbench.runtime.executor import estimate
from workbench.strategy import all_on_device


def _program(config):
    with torch.device("meta"):
        model = QwenMoEDecoder(config)
        inputs = model.example_inputs()
    return capture(model, inputs, shape_only=True)


@pytest.fixture(scope="module")
def tiny():
    return _program(MoEConfig.tiny())


def _layouts(program):
    return {s.name: layout_of(wb.plan(s.apply(program))) for s in (all_on_device(skip_copies=True), experts_on_host(),
                                                                      expert_streaming())}  # fmt: skip


def test_a_token_reads_the_same_bytes_wherever_its_experts_live(tiny):
    """A pick of expert rows is charged what it reads, not the rows it writes and reads
    again: streaming the experts in moves their rows over the link without adding device
    bytes, and computing them on the host moves their bytes from the GPU to the host."""
    layouts = _layouts(tiny)
    gpu, host, streamed = layouts["all_on_device"], layouts["experts_on_host"], layouts["expert_streaming"]
    assert streamed.device_bytes == pytest.approx(gpu.device_bytes, rel=0.01)
    assert streamed.expert_loads > 0 and streamed.expert_bytes > 0 and gpu.expert_loads == 0
    assert host.device_bytes + host.host_bytes == pytest.approx(gpu.device_bytes, rel=0.02)
    assert host.host_calls == MoEConfig.tiny().num_hidden_layers and host.host_weights > 0


def test_expert_rows_count_per_token_not_per_stack():
    """Twice the experts with the same top-k barely change the device bytes (the router
    grows, the rows read do not), while the constants on the device double their expert
    share: row picks count the rows a token reads."""
    small, large = MoEConfig.tiny(), dataclasses.replace(MoEConfig.tiny(), num_experts=2 * MoEConfig.tiny().num_experts)
    a, b = (layout_of(wb.plan(all_on_device(skip_copies=True).apply(_program(c)))) for c in (small, large))
    assert b.device_bytes == pytest.approx(a.device_bytes, rel=0.05)
    assert b.layers == a.layers == small.num_hidden_layers


def test_its_kernels_are_the_device_compute_steps_of_the_plan(tiny):
    """``kernels`` counts the plan's device compute steps, as the op-by-op schedule does."""
    memory = wb.plan(all_on_device(skip_copies=True).apply(tiny))
    timeline = estimate(memory, CostModel.preset("h200"), in_place_writes=True)
    compute = sum(1 for e in timeline.events if e.kind == "compute")
    assert layout_of(memory).kernels == compute


def test_decode_time_of_a_plan_is_time_decode_of_its_layout(tiny):
    """``plan_decode_time(plan, model)`` is ``time_decode(layout_of(plan), model)``; a layout
    and its time are plain data."""
    memory = wb.plan(expert_streaming().apply(tiny))
    model = CostModel.compose(gpu="h200", link="pcie_gen4")
    assert plan_decode_time(memory, model) == time_decode(layout_of(memory), model)
    with pytest.raises(wb.errors.WorkbenchError, match="MemoryPlan"):
        layout_of(tiny)  # type: ignore[arg-type]


@pytest.mark.slow
def test_graph_and_facts_agree_within_five_percent_on_a_published_model():
    """Qwen3-MoE 15B-A2B's published configuration captured shape-only and laid out from
    its graph agrees within 5% with the same setup laid out from its facts (sizes from its
    config), in device, host and link bytes and in tokens/s on one machine — all on the
    GPU, experts on the host, and experts streamed."""
    hf = pytest.importorskip("workbench.hf")
    pytest.importorskip("transformers")
    model = hf.load_model(hf.published_config("qwen3_moe"), shape_only=True)
    step = hf.capture_decode(model, "static", past=8, max_cache_len=16)
    c = model.config
    expert = 3 * c.hidden_size * c.moe_intermediate_size
    total = sum(p.numel() for p in model.parameters())
    embedding = c.vocab_size * c.hidden_size  # one row of it is read per token
    inactive = c.num_hidden_layers * (c.num_experts - c.num_experts_per_tok) * expert
    facts = ModelFacts("qwen3_moe_15b_a2b", c.num_hidden_layers, total, total - embedding - inactive, c.num_experts,
                       c.num_experts_per_tok, expert, hidden=c.hidden_size,
                       kv_bytes_per_token=c.num_hidden_layers * 2 * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 2)  # fmt: skip
    machine = dataclasses.replace(CostModel.compose(gpu="h200", host="epyc_9355", link="pcie_gen5", runtime="compiled_graph"),
                                  kernels_per_layer=40.0, kernel_gap=3e-6, copies_per_expert=1.0, overlap=0.0)  # fmt: skip
    for strategy, placement in ((all_on_device(skip_copies=True), ExpertPlacement("all_on_gpu", context_tokens=16)),
                                (experts_on_host(), ExpertPlacement("experts_on_host_compute", context_tokens=16)),
                                (expert_streaming(), ExpertPlacement("experts_copied", cache=False, context_tokens=16))):  # fmt: skip
        graph = layout_of(wb.plan(strategy.apply(step.program)))
        laid = DecodeLayout.for_machine(gpu="h200", host="epyc_9355", link="pcie_gen5", model=facts, formats="bf16",
                                        placement=placement)  # fmt: skip
        assert graph.device_bytes == pytest.approx(laid.device_bytes, rel=0.05), strategy.label
        assert graph.host_bytes == pytest.approx(laid.host_bytes, rel=0.05, abs=1e6), strategy.label
        assert graph.expert_loads * graph.expert_bytes == pytest.approx(laid.expert_loads * laid.expert_bytes, rel=0.05)
        assert time_decode(graph, machine).tok_s == pytest.approx(time_decode(laid, machine).tok_s, rel=0.05), strategy.label


@pytest.mark.slow
def test_graph_and_facts_agree_on_executorchs_published_runs():
    """The built-in 35B-A3B, int4 as ExecuTorch ran it, laid out from its graph and from
    the published run's facts, timed on the A100 with ExecuTorch's fitted runtime
    profiles: within 5% of each other."""
    from workbench.app.anchors import anchors_table

    table = anchors_table()
    assert (table["graph ms/token"] / table["facts ms/token"]).between(0.95, 1.05).all(), table
