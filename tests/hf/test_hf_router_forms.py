"""Routers that score more than the experts they route: ZAYA's router is a small network
of its own width whose last layer scores 8 experts and a skip expert (no computation);
Inkling's router scores 8 routed experts and the 2 shared experts beside them. Discovery
finds their experts (in the model and in its captured program) with those facts, and
every expert strategy and expert caches give outputs equal to eager."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

from workbench import hf  # noqa: E402
from workbench.moe.discovery import find_experts  # noqa: E402
from workbench.hf.steps import example_tokens  # noqa: E402

#: Every expert strategy on a prefill and a decode step, and 4-token decodes through an
#: expert cache (a miss copied, and a miss computed on the host).
STAGES = (
    "prefill/all_on_device",
    "prefill/experts_on_host",
    "prefill/expert_streaming",
    "decode_static/expert_streaming",
    "decode_4_tokens/expert_cache_lru_copy",
    "decode_4_tokens/expert_cache_static_hot_host_compute",
)
#: ZAYA's skip-expert bias: transformers sets -1 (the skip expert is then never chosen);
#: this one makes the seeded router choose it for some prefill tokens and not others.
SKIP_BIAS = 0.0015


@functools.lru_cache(maxsize=None)
def family_model(model_type: str):
    model = hf.tiny_family_model(model_type)
    if model_type == "zaya":
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.gate.balancing_biases[-1] = SKIP_BIAS
    return model


@pytest.mark.parametrize(
    "model_type, router, zero, shared",
    [("zaya", "mlp.gate.router_mlp.out_proj.weight", 1, 0), ("inkling_text", "mlp.gate.weight", 0, 2)],
)
def test_experts_scored_beside_others_are_found(model_type, router, zero, shared):
    """Each decoder layer's 8 stacked experts are found, scored by a router of 8 + Z
    columns: ZAYA's last router layer (its network reads the hidden state through
    ``gate.down_proj``) with one zero-computation expert, Inkling's gate with its 2 shared
    experts; an expert's bytes are one slab of each weight."""
    model = family_model(model_type)
    experts = find_experts(model)
    assert [layer.module for layer in experts] == [f"model.layers.{i}.mlp.experts" for i in range(model.config.num_hidden_layers)]
    for layer in experts:
        assert layer.router == f"{layer.module.removesuffix('.experts')}.{router.removeprefix('mlp.')}"
        assert (layer.num_experts, layer.zero_experts, layer.scored_shared) == (8, zero, shared)
        assert model.get_parameter(layer.router).shape[0] == 8 + zero + shared
        gate_up, down = (model.get_parameter(w) for w in layer.weights)
        assert layer.expert_nbytes == gate_up[0].nbytes + down[0].nbytes
    assert hf.unexpressed_experts(model) == ""


def test_zaya_skip_expert_is_chosen():
    """The premise of the stage test: with the seeded weights and ``SKIP_BIAS``, ZAYA's
    router chooses its skip expert (a zero weight on expert 0) for some prefill tokens
    and a real expert for others, so both paths are compared with eager."""
    model = family_model("zaya")
    probs = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda _m, _a, out: probs.append(out[1].reshape(-1)))
             for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(example_tokens(model.config.vocab_size, 1, 4))
    finally:
        for hook in hooks:
            hook.remove()
    skipped = torch.cat(probs) == 0
    assert skipped.any() and not skipped.all(), skipped


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["zaya", "inkling_text"])
def test_router_forms_equal_eager_through_the_stages(model_type):
    """Prefill under all_on_device, experts_on_host and expert_streaming, a decode step
    under expert_streaming, and 4-token decodes through an LRU cache (misses copied) and
    a static-hot cache (misses computed on the host) each equal eager within tolerance
    (logits and every cache state); the captured program's experts are the model's."""
    model = family_model(model_type)
    step = hf.capture_decode(model, "static", past=4, max_cache_len=8)
    assert find_experts(step.program) == find_experts(model)
    report = hf.try_stages(model, stages=STAGES)
    assert report.ok, report.to_dataframe().to_string()


class _Unrouted(nn.Module):
    """A block whose config declares 4 stacked experts, while its router scores 7 (3 more
    than half of them)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(num_experts=4)
        self.mlp = nn.Module()
        self.mlp.experts = nn.Module()
        self.mlp.experts.gate_up_proj = nn.Parameter(torch.zeros(4, 8, 16))
        self.mlp.experts.down_proj = nn.Parameter(torch.zeros(4, 16, 4))
        self.mlp.gate = nn.Linear(16, 7, bias=False)


def test_router_beyond_the_bound_is_named():
    """A router that scores more columns than discovery takes is named in one paragraph:
    the container, the router-like parameter and its shape, the bound, and what to run."""
    message = hf.unexpressed_experts(_Unrouted())
    assert "mlp.experts stacks them" in message and "mlp.gate.weight (7, 16)" in message
    assert "at most 2 more" in message and "all_on_device" in message and "\n" not in message
