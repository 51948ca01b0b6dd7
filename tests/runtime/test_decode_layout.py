"""A decode token laid out from facts: ``DecodeLayout.for_machine`` and the facts it takes."""

import math

import pytest

from workbench.errors import WorkbenchError
from workbench.speed.layout import DecodeLayout, LayoutError, ModelFacts, ExpertPlacement, UniformRouting, WeightBits

QWEN3_30B = dict(name="qwen3_30b", layers=48, total_params=30.5e9, active_params=3.3e9, num_experts=128, top_k=8,
                 expert_params=3 * 2048 * 768, hidden=2048, kv_bytes_per_token=98304)  # fmt: skip


def _model(**changes):
    return ModelFacts(**{**QWEN3_30B, **changes})


def _lay(placement, formats="q4_k", **kw):
    return DecodeLayout.for_machine(gpu=kw.pop("gpu", "rtx_4090"), model=_model(), formats=formats, placement=placement, **kw)


def test_every_active_byte_is_read_once_somewhere():
    """The GPU's and the host's bytes add up to the token's active bytes (plus the KV cache
    of its context), whatever the split; the host computes its share of the experts."""
    m = _model()
    active = (m.expert_active * 4.5 + m.other_active * 4.5) / 8
    for placement, host_share in ((ExpertPlacement("all_on_gpu"), 0.0), (ExpertPlacement("partial_offload", host_layers=12), 0.25),
                                  (ExpertPlacement("experts_on_host_compute"), 1.0),
                                  (ExpertPlacement("experts_on_host_compute", gpu_experts=32), 0.75)):  # fmt: skip
        layout = _lay(placement, host="epyc_9355")
        assert layout.host_share == pytest.approx(host_share)
        assert layout.device_bytes + layout.host_bytes == pytest.approx(active)
        assert layout.host_weights == pytest.approx(host_share * m.expert_active)
    with_context = _lay(ExpertPlacement("all_on_gpu", context_tokens=1000))
    assert with_context.device_bytes == pytest.approx(active + 1000 * 98304)


def test_host_layers_call_the_host_and_exchange_activations_over_the_link():
    """Each MoE layer whose experts the host computes is one host call and four copies
    (the hidden state, the experts' ids and weights there, the result back); the link is
    the GPU's own host interface unless one is named."""
    layout = _lay(ExpertPlacement("partial_offload", host_layers=12), host="epyc_9355")
    assert layout.host_calls == 12 and layout.copies == 48
    assert layout.link_bytes == pytest.approx(12 * (2 * 2048 * 2 + 2 * 8 * 4))
    assert layout.link == "pcie_gen4" and layout.host_format == "q4_k" and layout.host_dequant_ops == 3
    named = _lay(ExpertPlacement("partial_offload", host_layers=12), host="epyc_9355", link="pcie_gen5")
    assert named.link == "pcie_gen5"


def test_a_copied_expert_cache_misses_what_its_routing_does_not_hold():
    """Experts copied in: the cache holds the GPU's memory less the rest of the weights and
    a reserve (or the bytes stated); each miss loads one expert's bytes; a routing with
    reuse misses less than uniform routing for the same share held."""
    uniform = _lay(ExpertPlacement("experts_copied"), formats="bf16")
    m = _model()
    expert_bytes = m.expert_total * 2
    held = 24 * 2**30 * 0.9 - m.other_total * 2  # the rtx_4090's 24 GiB as it reports them
    assert uniform.cache_share == pytest.approx(held / expert_bytes)
    assert uniform.hit_rate == pytest.approx(uniform.cache_share)
    assert uniform.expert_loads == pytest.approx((1 - uniform.hit_rate) * 48 * 8)
    assert uniform.expert_bytes == pytest.approx(m.expert_params * 2)
    assert uniform.experts_offloaded == pytest.approx((1 - uniform.cache_share) * 48 * 128)

    class Reused:
        label = "a trace with reuse"

        def hit_rate(self, share):
            return min(1.0, 1.5 * share)

    reused = _lay(ExpertPlacement("experts_copied", routing=Reused()), formats="bf16")
    assert reused.expert_loads < uniform.expert_loads
    stated = _lay(ExpertPlacement("experts_copied", resident_expert_bytes=0.1 * expert_bytes), formats="bf16")
    assert stated.cache_share == pytest.approx(0.1)
    streamed = _lay(ExpertPlacement("experts_copied", cache=False), formats="bf16")
    assert streamed.expert_loads == 48 * 8 and streamed.cache_share == 0


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(active_params=40e9), r"active parameters .* exceed the total"),
        (dict(top_k=200), r"top_k 200 exceeds num_experts 128"),
        (dict(top_k=1e9), r"top_k must be a whole number"),
        (dict(layers=-5), r"layers must be a whole number in \[1"),
        (dict(layers=0), r"layers must be a whole number in \[1"),
        (dict(num_experts=0, top_k=0, expert_params=0), None),
        (dict(expert_params=1e9), r"leave nothing .* for the rest"),
        (dict(total_params=math.nan), r"total_params must be a finite number"),
        (dict(hidden=2.5), r"hidden must be a whole number"),
    ],
)
def test_impossible_model_sizes_are_refused_by_name(changes, message):
    """Sizes no model has — active above total, top-k above the experts, a negative or
    non-whole layer count, experts larger than the model, NaN — are refused naming the
    figure; a dense model (no experts) is valid."""
    if message is None:
        assert _model(**changes).moe_layers == 0
        return
    with pytest.raises(LayoutError, match=message) as info:
        _model(**changes)
    assert isinstance(info.value, WorkbenchError)


@pytest.mark.parametrize("formats, message", [
    (1e9, r"bits per weight must be a number in \(0, 64\]"), (-4.25, r"\(0, 64\]"), (math.inf, r"finite number"),
    (math.nan, r"finite number"), ("q9_9", r"unknown weight format 'q9_9'; valid: .*q4_k"),
    ({"experts": "q4_k"}, r"must give 'experts' and 'other'"), (True, r"finite number"),
])  # fmt: skip
def test_bits_outside_the_format_tables_range_are_refused(formats, message):
    """Bits per weight are a format of the table or a number in its range (0, 64]."""
    with pytest.raises(LayoutError, match=message):
        WeightBits.of(formats)
    assert WeightBits.of({"experts": "q4_k", "other": 8}).other == 8


def test_placements_and_parts_the_facts_cannot_use_are_refused():
    """An unknown regime, a partial offload without its layers, weights larger than an
    all-on-GPU card, a host split without a host, an unknown part: each a LayoutError
    naming what is valid."""
    with pytest.raises(LayoutError, match="none of all_on_gpu"):
        ExpertPlacement("everything_everywhere")
    with pytest.raises(LayoutError, match="names host_layers"):
        ExpertPlacement("partial_offload")
    with pytest.raises(LayoutError, match=r"do not fit the 24.0 GiB of a rtx_4090"):
        _lay(ExpertPlacement("all_on_gpu"), formats="bf16")
    with pytest.raises(LayoutError, match=r"give host= one of .*epyc_9355"):
        _lay(ExpertPlacement("experts_on_host_compute"))
    with pytest.raises(LayoutError, match=r"give gpu= one of .*h200"):
        _lay(ExpertPlacement("all_on_gpu"), gpu="gtx_480")
    with pytest.raises(LayoutError, match="routing must have a label and hit_rate"):
        ExpertPlacement("experts_copied", routing="zipf")  # type: ignore[arg-type]
    assert UniformRouting().hit_rate(0.3) == 0.3
