"""The capacity-planning strategies on transformers MoE models: partial offload and expert
caches (copy and host compute) decode several steps with the eager model's logits, the
caches hit where the replay of the recorded routing says, and a sweep takes the program."""

from __future__ import annotations

import numpy as np
import pytest

from hf_cases import MOE_FAMILIES, captured, tiny_model

import workbench as wb
from workbench.moe import RoutingRecorder, replay
from workbench.moe.decode import decode
from workbench.moe.strategies import expert_cache, partial_offload
from workbench.moe.strategies import StrategyError
from workbench.sweeps import InlineExecutor, sweep

STEPS = 6


def _decode(family, strategy):
    """Plan ``strategy`` on the family's batched_mm decode step and decode STEPS tokens,
    the eager step alongside, the routing recorded from the eager model."""
    step = captured(family, "decode", "batched_mm")
    plan = wb.plan(strategy.apply(step.program), "greedy")
    with RoutingRecorder(tiny_model(family, experts_implementation="batched_mm")) as rec:
        result = decode(plan, STEPS, first_token=5, reference=step.module)
    return result, rec.trace()


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_capacity_strategies_decode_equal_to_eager(family):
    """On every shipped MoE family, partial offload and expert caches (a miss copied, or
    computed on the host) decode several steps with the eager step's logits, and each
    cache's hits per layer per step equal the replay of the routing the eager model chose."""
    result, _ = _decode(family, partial_offload(1))
    assert result.matches_eager == (True,) * STEPS
    for policy, on_miss in (("lru", "copy"), ("lfu", "host_compute")):
        result, trace = _decode(family, expert_cache(3, policy, on_miss=on_miss))
        assert result.matches_eager == (True,) * STEPS, (policy, on_miss)
        assert trace.experts.shape[:2] == (STEPS, result.hit_rate_matrix().shape[0])
        expected = replay(trace, policy, 3, 1, on_miss=on_miss).hits.T  # (L, T)
        np.testing.assert_array_equal(result.hit_rate_matrix() * trace.top_k, expected)


def test_cache_needs_experts_selected_by_row():
    """transformers' default grouped_mm experts multiply the whole stack, so no cache can
    hold them: a StrategyError that names the fix; prefetch needs hints these models lack."""
    step = captured("qwen3_moe", "decode")
    with pytest.raises(StrategyError, match="experts_implementation='batched_mm'"):
        expert_cache(3, "lru").apply(step.program)
    hinted = captured("qwen3_moe", "decode", "batched_mm")
    with pytest.raises(StrategyError, match="transformers models carry no hints"):
        expert_cache(3, "lru", prefetch=True).apply(hinted.program)
    assert partial_offload(1).apply(step.program) is not None  # partial offload places, whatever the kernel


def test_sweep_takes_a_transformers_program():
    """A sweep of a transformers decode step estimates every setting, with the cache's hit
    rate replayed from a recorded trace and labelled with it; a static cache that computes
    its misses on the host moves fewer link bytes than one that copies them."""
    family = "qwen3_5_moe"
    _, trace = _decode(family, partial_offload(0))
    step = captured(family, "decode", "batched_mm")
    grid = {"partial_offload": {"n_host_layers": [0, 2]},
            "expert_cache": {"slots_per_layer": [3], "policy": ["lru", "static_hot"], "on_miss": ["copy", "host_compute"]}}  # fmt: skip
    result = sweep(step.program, budgets=[1.0], links=["pcie_gen4"], strategies=grid, executor=InlineExecutor(), trace=trace)
    points = result.points.set_index("label")
    assert (points["tok/s"] > 0).all() and len(points) == 6
    caches = points[points["strategy"] == "expert_cache"]
    assert caches["hit_rate_source"].str.startswith(trace.label).all()
    lru = caches.loc["expert_cache(on_miss=copy, policy=lru, slots_per_layer=3)"]
    assert lru["expected_hit_rate"] == pytest.approx(replay(trace, "lru", 3, 1).hit_rate(), abs=1e-6)
    copy, host = (caches.loc[f"expert_cache(on_miss={m}, policy=static_hot, slots_per_layer=3)"] for m in ("copy", "host_compute"))
    assert host["link_MiB/token"] < copy["link_MiB/token"]
