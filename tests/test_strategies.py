"""MoE placement strategies: what each puts where, and that each computes the model."""


import pytest
import torch

import workbench as wb
from conftest import moe_tiny
from workbench import CPU, Device
from workbench.copy_ops import GATHER_H2D
from workbench.planning.arena_execution import run_in_arenas
from workbench.moe.strategies import (
    STRATEGIES,
    all_on_device,
    expert_streaming,
    experts_on_host,
    strategy_variants,
)

CUDA0 = Device("cuda", 0)


def _moe():
    return moe_tiny()


def test_variants_cover_every_strategy_with_and_without_skips():
    """Six variants: three strategies, skip flags off and on, with distinct labels."""
    labels = [s.label for s in strategy_variants()]
    assert labels == [f"{n}{s}" for n in STRATEGIES for s in ("", "+skip")]


@pytest.mark.parametrize("strategy", strategy_variants(), ids=lambda s: s.label)
def test_every_strategy_computes_the_model(strategy):
    """Each variant's propagated graph, and its planned execution in arenas, equal eager."""
    cfg, model, inputs, prog = _moe()
    dg = strategy.apply(prog)
    expected = model(*inputs)
    for got, want in zip(dg.module()(*inputs), expected):
        assert torch.allclose(got, want, atol=1e-5)
    plan = wb.plan(dg, "best")
    plan.verify()
    for got, want in zip(run_in_arenas(plan, *inputs), expected):
        assert torch.allclose(got, want, atol=1e-5)


def test_all_on_device_with_skips_copies_nothing():
    """All on device with both skip flags: tokens, caches and logits stay on the device."""
    *_, prog = _moe()
    dg = all_on_device().apply(prog)
    assert dg.copies == ()
    assert set(dg.input_devices.values()) == {CUDA0} and set(dg.output_devices) == {CUDA0}
    assert dg.constant_bytes["cpu"] == 0


def test_experts_on_host_moves_activations_not_weights():
    """Experts on host: expert weights are resident on the host only, every other weight on
    the device; copies move activations (no copy's value is a weight)."""
    cfg, _, _, prog = _moe()
    dg = experts_on_host().apply(prog)
    for name, fqn in prog.constants.items():
        assert dg.residency[name] == ((CPU,) if ".mlp.experts." in fqn else (CUDA0,)), fqn
    assert not any(c.value in prog.constants for c in dg.copies)
    assert dg.copy_counts()["h2d"] >= cfg.num_hidden_layers and dg.copy_counts()["d2h"] >= cfg.num_hidden_layers


def _router_choices(model, inputs):
    """The experts each layer's router picks in eager execution, in layer order."""
    picks = []
    hooks = [
        layer.mlp.register_forward_pre_hook(lambda mod, args: picks.append(mod.route(args[0])[1].reshape(-1)))
        for layer in model.layers
    ]
    try:
        model(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return picks


def test_expert_streaming_gathers_exactly_the_routed_experts():
    """Expert streaming copies, per layer, exactly the experts the router chose (w1 and w2
    slabs), and the bytes of each gather are k slabs."""
    cfg, model, inputs, prog = _moe()
    dg = expert_streaming().apply(prog)
    plan = wb.plan(dg, "best")
    gathered = []

    def hook(node, args, kwargs):
        if node.target is GATHER_H2D:
            gathered.append((dg.program.constants[node.args[0].name], args[1].reshape(-1).clone()))
        return node.target(*args, **kwargs)

    run_in_arenas(plan, *inputs, run_node=hook)
    picks = _router_choices(model, inputs)
    assert len(gathered) == 2 * cfg.num_hidden_layers
    k, H, I = cfg.num_experts_per_tok, cfg.hidden_size, cfg.moe_intermediate_size
    slab = {"w1": 2 * I * H * 4, "w2": H * I * 4}
    for layer, pick in enumerate(picks):
        for which in ("w1", "w2"):
            (index,) = [i for fqn, i in gathered if fqn == f"layers.{layer}.mlp.experts.{which}"]
            assert torch.equal(index, pick)
    bytes_by_weight = {}
    for c in dg.copies:
        if c.name.endswith("_gather"):
            bytes_by_weight[dg.program.constants[c.value]] = c.nbytes
    for layer in range(cfg.num_hidden_layers):
        for which in ("w1", "w2"):
            assert bytes_by_weight[f"layers.{layer}.mlp.experts.{which}"] == k * slab[which]


def test_strategies_reject_bad_devices():
    """A strategy for an unknown device is a clear error."""
    with pytest.raises(wb.DeviceError):
        all_on_device("tpu:0")


def test_strategies_find_the_experts_without_a_glob():
    """With no arguments the expert strategies find the routed experts in the program: the
    same placement as the explicit glob of the built-in decoder's expert modules."""
    *_, prog = _moe()
    found = experts_on_host().apply(prog).placement.op_device
    explicit = experts_on_host(experts="layers.*.mlp.experts").apply(prog).placement.op_device
    assert found == explicit and CPU in set(found.values())
    streamed = expert_streaming().apply(prog)
    glob = expert_streaming(weights="layers.*.mlp.experts.*").apply(prog)
    assert [c.nbytes for c in streamed.copies] == [c.nbytes for c in glob.copies]


def test_an_expert_map_can_name_the_experts():
    """An ExpertMap (from find_experts, e.g. of one layer only) says which experts move."""
    from workbench.moe.discovery import ExpertMap, find_experts

    *_, prog = _moe()
    first = ExpertMap(find_experts(prog).layers[:1])
    dg = experts_on_host(experts=first).apply(prog)
    on_host = {fqn for name, fqn in prog.constants.items() if dg.residency[name] == (CPU,)}
    assert on_host == {"layers.0.mlp.experts.w1", "layers.0.mlp.experts.w2"}


def test_a_glob_that_matches_nothing_warns_or_raises():
    """A strategy that moves no expert reports it: a PlacementWarning, an error if strict."""
    *_, prog = _moe()
    with pytest.warns(wb.PlacementWarning, match="matches no op's module path"):
        experts_on_host(experts="model.layers.*.mlp.experts").apply(prog)
    with pytest.raises(wb.PlacementError, match="matches no parameter"):
        expert_streaming(weights="model.*.experts.*").apply(prog, strict=True)


@pytest.mark.parametrize("bad", ["", 3, ["layers.*"]])
def test_bad_expert_specs_are_refused(bad):
    """Experts are named by None, a non-empty glob or an ExpertMap; anything else is an error."""
    from workbench.moe.strategies import StrategyError

    with pytest.raises(StrategyError, match="ExpertMap"):
        experts_on_host(experts=bad)
    with pytest.raises(StrategyError, match="ExpertMap"):
        expert_streaming(weights=bad)
