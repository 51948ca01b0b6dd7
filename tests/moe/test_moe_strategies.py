"""partial_offload and expert_cache: eager-equal over several decode steps on sim, the
cache in the graph does what the replay says, slots are device memory."""

import functools

import numpy as np
import pytest
import torch

import workbench as wb
from workbench import Device
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe import RoutingRecorder, RoutingTrace, record_decode, replay, slab_bytes
from workbench.moe.decode import DecodeError, decode
from workbench.moe.discovery import expert_modules
from workbench.moe.strategies import expert_cache, expert_streaming, partial_offload
from workbench.planning.arena_execution import run_in_arenas
from workbench.propagate import CopyRole
from workbench.moe.strategies import StrategyError

from cache_reference import reference_admit
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
@pytest.mark.parametrize("on_miss", ["copy", "host_compute"])
@pytest.mark.parametrize("skip", [True, False])
def test_expert_cache_is_eager_equal_over_steps(policy, on_miss, skip):
    """Every cache policy, whether a miss is copied or computed on the host, decodes several
    steps on sim with the eager model's logits, and its planned graph also runs in arenas
    and eagerly (DeviceGraph.module) to the same outputs."""
    strategy = expert_cache(3, policy, on_miss=on_miss, skip_copies=skip)
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
    streaming = expert_streaming().apply(program)
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
    heat, bars = fig.get_axes()[:2]
    layers = result.hit_rate_matrix().shape[0]
    assert heat.get_yticks().tolist() == list(range(layers))  # whole layers, no half ticks
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in bars.get_xticks())  # whole steps


def test_expert_cache_bad_settings():
    """Too few or too many slots, unknown policies and modes, a prefetch into a static
    cache or into a program without routing hints are clear StrategyErrors."""
    config, program = reference()
    with pytest.raises(StrategyError, match=r"must be in \[2, 8\]"):
        expert_cache(1, "lru").apply(program)
    with pytest.raises(StrategyError, match=r"must be in \[0, 8\]"):
        expert_cache(9, "static_hot").apply(program)
    with pytest.raises(StrategyError, match=r"must be in \[2, 8\]"):
        expert_cache(1, "lfu", on_miss="host_compute").apply(program)
    with pytest.raises(StrategyError, match="unknown cache policy"):
        expert_cache(4, "fifo")
    with pytest.raises(StrategyError, match="unknown on_miss 'skip'; valid: copy, host_compute"):
        expert_cache(4, "lru", on_miss="skip")
    with pytest.raises(StrategyError, match="static cache admits nothing"):
        expert_cache(4, "static_hot", prefetch=True)
    with pytest.raises(StrategyError, match="needs routing hints"):
        expert_cache(4, "lru", prefetch=True).apply(program)
    with pytest.raises(StrategyError, match="must not have routing hints"):
        expert_cache(4, "lru").apply(prefetch_reference()[1])
    with pytest.raises(wb.WorkbenchError, match="prefetch must be True or False"):
        expert_cache(4, "lru", prefetch=1)
    with pytest.raises(StrategyError, match=r"n_host_layers must be in \[0, 4\]"):
        partial_offload(5).apply(program)


# -- on_miss="host_compute" ------------------------------------------------------------------


def _expert_weights(program):
    return {name for name, fqn in program.constants.items() if ".mlp.experts." in fqn}


@pytest.mark.parametrize("policy, slots", [("lru", 2), ("lfu", 5), ("static_hot", 3)])
def test_host_compute_hits_equal_the_replay(policy, slots):
    """The hit masks of a host-computing cache count, per layer per step, exactly the hits
    the replay of the recorded routing finds (a miss is still admitted for later tokens)."""
    config, _ = reference()
    popularity = record_decode(QwenMoEDecoder(config).eval(), 12)[0].counts() if policy == "static_hot" else None
    _, result, trace = _decode(expert_cache(slots, policy, on_miss="host_compute", popularity=popularity), steps=10)
    expected = replay(trace, policy, slots, 1, on_miss="host_compute", popularity=popularity).hits.T  # (L, T)
    np.testing.assert_array_equal(result.hit_rate_matrix() * trace.top_k, expected)


def test_host_compute_moves_activations_not_experts():
    """With host_compute no expert weight crosses for a miss: a static cache has no copy of
    an expert weight at all and moves the same few KiB per step whatever it hits; an
    admitting cache's only expert copies are its admissions (reuse copies) after the layer.
    The host copy of each expert region runs on the host and reads host-resident weights."""
    config, program = reference()
    experts = _expert_weights(program)
    static = expert_cache(3, "static_hot", on_miss="host_compute")
    dg = static.apply(program)
    assert not [c.name for c in dg.copies if c.value in experts]
    host_ops = [n for n in dg.graph.nodes if n.op == "call_function" and dg.node_device[n.name] == wb.CPU
                and any(a.name in experts for a in n.all_input_nodes)]  # fmt: skip
    assert len(host_ops) == 2 * config.num_hidden_layers  # w1 and w2 rows of every layer, on the host
    assert all(dg.residency[w] == (wb.CPU,) for w in experts)
    _, result, _ = _decode(static)
    assert len(set(result.link_bytes)) == 1 and result.link_bytes[0] < slab_bytes(config)
    assert 0 < result.hits["hit_rate"].mean() < 1  # some steps hit, some miss: the bytes do not care
    lru = expert_cache(3, "lru", on_miss="host_compute").apply(program)
    copies = [c for c in lru.copies if c.value in experts]
    assert copies and all(c.role is CopyRole.REUSE and c.name.endswith("_admission") for c in copies)


def test_host_compute_charges_the_host_only_for_misses():
    """Each host op of an expert region is charged the share of its rows that missed: in a
    run, per step, the host time of layer l is (1 - hit rate of l) times its full time; in
    estimate, the expected miss rate 1 - prefetch_hit_rate."""
    from workbench.moe.cache_graph import cache_reads
    from workbench.runtime import estimate
    from workbench.machine import CostModel
    from workbench.node_facts import row_share

    plan, result, _ = _decode(expert_cache(3, "lru", on_miss="host_compute"), steps=5)
    graph = plan.device_graph.graph
    layer_of_mask = cache_reads(graph)
    layer_of = {n.name: layer_of_mask[row_share(n).mask] for n in graph.nodes if row_share(n) is not None}
    assert layer_of and all(plan.device_graph.node_device[n] == wb.CPU for n in layer_of)

    def host_time(events):
        out = {}
        for e in events:
            if e.node in layer_of:
                out[layer_of[e.node]] = out.get(layer_of[e.node], 0.0) + e.end_us - e.start_us
        return out

    full = host_time(estimate(plan, CostModel(), prefetch_hit_rate=0.0))
    half = host_time(estimate(plan, CostModel(), prefetch_hit_rate=0.5))
    assert set(full) == set(range(4)) and all(half[layer] == pytest.approx(full[layer] / 2) for layer in full)
    assert sum(host_time(estimate(plan, CostModel(), prefetch_hit_rate=1.0)).values()) == 0
    rates = result.hit_rate_matrix()  # (L, T)
    for step, res in enumerate(result.steps):
        got = host_time(res.timeline)
        for layer, t in full.items():
            assert got.get(layer, 0.0) == pytest.approx((1 - rates[layer, step]) * t)


# -- prefetch into the cache -----------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def prefetch_reference():
    config = MoEConfig.tiny()
    model = QwenMoEDecoder(config, expert_prefetch=True).eval()
    return config, wb.capture(model, model.example_inputs())


def _routing_with_hints(model):
    """A recorder of (chosen, predicted) expert ids per layer per call (predicted None for
    the first layer): the built-in experts are called as (x, expert ids, hint)."""
    seen = {i: [] for i, _ in expert_modules(model)}
    hooks = [
        module.register_forward_hook(lambda m, args, out, i=i: seen[i].append((args[1], args[2])))
        for i, module in expert_modules(model)
    ]
    return seen, hooks


def _reference_hits(seen, policy, slots, experts):
    """(L, T) hits of a cache that admits each layer's predicted experts (not requested)
    before the layer reads, then admits the chosen ones: the plain reference of the op."""
    hits = np.zeros((len(seen), len(seen[0])), dtype=int)
    for layer, calls in seen.items():
        state = dict(slabs=[torch.zeros(slots, 1)], slots=torch.full((slots,), -1), keys=torch.full((slots,), -1),
                     requests=torch.zeros(experts, dtype=torch.long), clock=torch.zeros(1, dtype=torch.long))  # fmt: skip
        for step, (chosen, predicted) in enumerate(calls):
            if predicted is not None:
                reference_admit(predicted, [torch.zeros(predicted.numel(), 1)], policy=policy, requested=False, **state)
            hits[layer, step] = sum(int(e) in state["slots"].tolist() for e in chosen.reshape(-1))
            reference_admit(chosen, [torch.zeros(chosen.numel(), 1)], policy=policy, requested=True, **state)
    return hits


@pytest.mark.parametrize("policy, on_miss", [("lru", "copy"), ("lfu", "copy"), ("lru", "host_compute"), ("lfu", "host_compute")])
def test_prefetching_cache_is_eager_equal_and_hits_as_the_reference(policy, on_miss):
    """A cache that admits each layer's predicted experts before the layer's read decodes
    with the eager model's logits, and hits exactly where the reference admit, fed the
    predictions and then the routed experts layer by layer, says: a correct prediction is
    a hit (the admit is ordered before the read by a graph edge)."""
    config, program = prefetch_reference()
    plan = wb.plan(expert_cache(3, policy, on_miss=on_miss, prefetch=True).apply(program), "greedy")
    eager = QwenMoEDecoder(config, expert_prefetch=True).eval()
    seen, hooks = _routing_with_hints(eager)
    try:
        result = decode(plan, STEPS, reference=eager)
    finally:
        for h in hooks:
            h.remove()
    assert result.matches_eager == (True,) * STEPS
    want = _reference_hits(seen, policy, 3, config.num_experts)
    np.testing.assert_array_equal(result.hit_rate_matrix() * config.num_experts_per_tok, want)
    unhinted = replay(RoutingTrace(np.stack([np.stack([c.reshape(-1).numpy() for c, _ in seen[layer]]) for layer in seen], 1),
                                   config.num_experts, False, "recorded"), policy, 3, 1).hits.T  # fmt: skip
    assert want.sum() >= unhinted.sum()  # predictions only add hits here


def test_decode_checks_its_arguments():
    """decode needs a MemoryPlan, a positive token count within the KV cache."""
    config, program = reference()
    plan = wb.plan(partial_offload(1).apply(program), "greedy")
    with pytest.raises(DecodeError, match="max_seq_len=32"):
        decode(plan, 33)
    with pytest.raises(TypeError, match="MemoryPlan"):
        decode("plan", 2)
