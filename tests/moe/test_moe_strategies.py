"""partial_offload and expert_cache: eager-equal over several decode steps on sim, the
cache in the graph does what the replay says, slots are device memory."""

import functools

import numpy as np
import pytest
import torch

import workbench as wb
from workbench import Device
from workbench.models import QwenMoEDecoder
from workbench.moe import RoutingRecorder, replay, slab_bytes
from workbench.moe.cache_ops import ADMIT, ExpertCacheError, expert_cache_admit
from workbench.moe.decode import DecodeError, decode
from workbench.moe.strategies import expert_cache, partial_offload
from workbench.planning.arena_execution import run_in_arenas
from workbench.strategies import StrategyError

from conftest import moe_tiny

CUDA0 = Device("cuda", 0)
STEPS = 6


@functools.lru_cache(maxsize=None)
def reference():
    config, _, inputs, program = moe_tiny()
    return config, program


def _decode(strategy, steps=STEPS, skip=True):
    """Plan the strategy on the tiny model and decode; the eager model, recorded, runs
    alongside as the reference."""
    config, program = reference()
    plan = wb.plan(strategy.apply(program), "greedy")
    eager = QwenMoEDecoder(config).eval()
    with RoutingRecorder(eager) as rec:
        result = decode(plan, steps, reference=eager)
    return plan, result, rec.trace()


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("skip", [True, False])
def test_partial_offload_is_eager_equal_over_steps(n, skip):
    """partial_offload(n) decodes several steps on sim with the eager model's logits."""
    _, result, _ = _decode(partial_offload(n, skip_copies=skip))
    assert result.matches_eager == (True,) * STEPS


def test_partial_offload_places_the_first_layers_experts_on_the_host():
    """Exactly layers < n keep their expert weights on the host; the rest are resident on the device."""
    config, program = reference()
    dg = partial_offload(2).apply(program)
    for name, fqn in program.constants.items():
        if ".mlp.experts." in fqn:
            layer = int(fqn.split(".")[1])
            assert dg.residency[name] == ((wb.CPU,) if layer < 2 else (CUDA0,)), fqn


@pytest.mark.parametrize("policy", ["lru", "lfu", "static_hot"])
@pytest.mark.parametrize("skip", [True, False])
def test_expert_cache_is_eager_equal_over_steps(policy, skip):
    """Every cache policy decodes several steps on sim with the eager model's logits, and
    its planned graph also runs in arenas and eagerly (DeviceGraph.module) to the same outputs."""
    strategy = expert_cache(4, policy, skip_copies=skip)
    _, result, _ = _decode(strategy)
    assert result.matches_eager == (True,) * STEPS
    config, model, inputs, program = moe_tiny()
    dg = strategy.apply(program)
    want = model(*inputs)
    for got, expected in zip(dg.module()(*inputs), want):
        assert torch.allclose(got, expected, atol=1e-5)
    for got, expected in zip(run_in_arenas(wb.plan(dg, "greedy"), *inputs), want):
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("policy, slots", [("lru", 2), ("lru", 5), ("lfu", 3), ("lfu", 6)])
def test_graph_cache_hits_equal_the_replay(policy, slots):
    """Hits per layer per step of the cache in the graph (counted by the executor) equal
    the replay of the routing the eager model recorded over the same decode."""
    _, result, trace = _decode(expert_cache(slots, policy), steps=10)
    k = trace.top_k
    expected = replay(trace, policy, slots, 1).hits.T  # (L, T)
    np.testing.assert_array_equal(result.hit_rate_matrix() * k, expected)


def test_static_hot_hits_equal_the_replay_with_the_same_popularity():
    """static_hot pinned from a popularity table hits exactly where the replay says."""
    config, program = reference()
    eager = QwenMoEDecoder(config).eval()
    from workbench.moe import record_decode

    warmup, _ = record_decode(QwenMoEDecoder(config).eval(), 12)
    popularity = warmup.counts()
    _, result, trace = _decode(expert_cache(3, "static_hot", popularity=popularity), steps=8)
    expected = replay(trace, "static_hot", 3, 1, popularity=popularity).hits.T
    np.testing.assert_array_equal(result.hit_rate_matrix() * trace.top_k, expected)
    assert eager is not None


def test_cache_slots_are_device_memory():
    """Each layer's slabs (S rows of w1 and w2) and tables are resident on the device:
    constant bytes grow by S slabs per layer over streaming, the host keeps every expert."""
    config, program = reference()
    streaming = wb.strategies.expert_streaming().apply(program)
    for slots in (2, 6):
        dg = expert_cache(slots, "lru").apply(program)
        extra = dg.constant_bytes["cuda:0"] - streaming.constant_bytes["cuda:0"]
        tables = config.num_hidden_layers * 8 * (2 * slots + config.num_experts + 1)  # slots, keys, requests, clock
        assert extra == config.num_hidden_layers * slots * slab_bytes(config) + tables
        assert dg.constant_bytes["cpu"] == streaming.constant_bytes["cpu"]
        plan = wb.plan(dg, "greedy")
        assert plan.total_bytes()["cuda:0"] >= dg.constant_bytes["cuda:0"]


def test_cache_state_carries_across_steps():
    """In one session the cache warms up: a step repeating the last token's routing hits
    everything; a fresh apply starts cold again (step 0 never hits an lru cache)."""
    _, first, _ = _decode(expert_cache(8, "lru"), steps=4)
    assert (first.hit_rate_matrix()[:, 0] == 0).all()
    assert first.hits["hits"].sum() > 0
    _, again, _ = _decode(expert_cache(8, "lru"), steps=1)
    assert (again.hit_rate_matrix()[:, 0] == 0).all()


def test_decode_timeline_marks_steps():
    """One timeline across steps: step bounds tile it in order, every event falls in one
    step, and each step's events are its own run's events shifted by the step start."""
    _, result, _ = _decode(expert_cache(4, "lru"), steps=4)
    bounds = result.step_bounds_us
    assert bounds[0][0] == 0.0 and all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert max(e.end_us for e in result.timeline) == pytest.approx(bounds[-1][1])
    counts = np.bincount([result.step_of(e) for e in result.timeline], minlength=4)
    assert counts.tolist() == [len(r.timeline) for r in result.steps]
    assert len(result.per_step()) == 4 and result.per_step()["equals_eager"].all()
    fig = result.figure()
    assert len(fig.get_axes()) >= 2


def test_expert_cache_bad_settings():
    """Too few or too many slots, unknown policies and unbuilt modes are clear errors."""
    config, program = reference()
    with pytest.raises(StrategyError, match=r"must be in \[2, 8\]"):
        expert_cache(1, "lru").apply(program)
    with pytest.raises(StrategyError, match=r"must be in \[0, 8\]"):
        expert_cache(9, "static_hot").apply(program)
    with pytest.raises(StrategyError, match="unknown cache policy"):
        expert_cache(4, "fifo")
    with pytest.raises(StrategyError, match="not built yet"):
        expert_cache(4, "lru", on_miss="host_compute")
    with pytest.raises(StrategyError, match="not built yet"):
        expert_cache(4, "lru", prefetch=True)
    with pytest.raises(StrategyError, match=r"n_host_layers must be in \[0, 4\]"):
        partial_offload(5).apply(program)


def test_admit_refuses_mismatched_state_and_cuda():
    """The admit op checks its state's shapes, and refuses real CUDA tensors (rule 6)."""
    rows = [torch.zeros(2, 3)]
    good = dict(slabs=[torch.zeros(4, 3)], slots=torch.full((4,), -1), keys=torch.full((4,), -1),
                requests=torch.zeros(8, dtype=torch.long), clock=torch.zeros(1, dtype=torch.long))  # fmt: skip
    with pytest.raises(ExpertCacheError, match="rows must be"):
        expert_cache_admit(torch.tensor([1, 2, 3]), rows, policy="lru", **good)
    with pytest.raises(ExpertCacheError, match="policy must be"):
        expert_cache_admit(torch.tensor([1, 2]), rows, policy="fifo", **good)
    assert ADMIT is torch.ops.workbench.expert_cache_admit.default


def test_decode_checks_its_arguments():
    """decode needs a MemoryPlan, a positive token count within the KV cache."""
    config, program = reference()
    plan = wb.plan(partial_offload(1).apply(program), "greedy")
    with pytest.raises(DecodeError, match="max_seq_len=32"):
        decode(plan, 33)
    with pytest.raises(TypeError, match="MemoryPlan"):
        decode("plan", 2)
