"""Every transformers family's tiny model, prefill and decode, under the strategies, run
on ``sim`` through capture → strategy → plan → ``wb.run``, equals eager PyTorch."""

from __future__ import annotations

import warnings

import pytest
import torch

from hf_cases import DENSE_FAMILIES, FAMILIES, KINDS, MOE_FAMILIES, assert_equal_to_eager, captured, run_on_sim, tiny_model

import workbench as wb
from workbench import hf
from workbench.moe.expert_ops import is_grouped_mm
from workbench.moe.discovery import find_experts
from workbench.machine import CostModelWarning
from workbench.moe.strategies import all_on_device, expert_streaming, experts_on_host

STRATEGIES = {
    "all_on_device": all_on_device(skip_copies=False),
    "all_on_device+skip": all_on_device(),
    "experts_on_host+skip": experts_on_host(),
    "expert_streaming": expert_streaming(skip_copies=False),
    "expert_streaming+skip": expert_streaming(),
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_strategy_equals_eager(family, kind, strategy):
    """Planned execution on sim returns what the model returns eagerly, for every family,
    prefill and decode (logits and every updated cache state)."""
    step = captured(family, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", wb.PlacementWarning)  # dense models have no experts to move
        _dg, _result, outputs = run_on_sim(step, STRATEGIES[strategy])
    assert_equal_to_eager(step, outputs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_experts_on_host_moves_expert_ops_and_weights_to_the_host(family, kind):
    """experts_on_host with no arguments puts every op of the found expert containers on
    the host and keeps their weights resident there only; no weight crosses the link."""
    step = captured(family, kind)
    experts = find_experts(step.program)
    dg, _result, _outputs = run_on_sim(step, experts_on_host())
    expert_weights = set(experts.weights)
    for name, fqn in step.program.constants.items():
        if fqn in expert_weights:
            assert dg.residency[name] == (wb.CPU,), fqn
    expert_ops = [n for n in step.program.graph.nodes if n.name in dg.placement.op_device and experts.contains(n)]
    assert expert_ops
    assert all(dg.placement.op_device[n.name] == wb.CPU for n in expert_ops)
    assert not any(c.value in step.program.constants for c in dg.copies)


@pytest.mark.parametrize("family", DENSE_FAMILIES)
def test_expert_strategies_on_a_dense_model_warn(family):
    """On a model without experts the expert strategies report that they moved nothing
    (and are an error with strict=True) instead of passing for a placement they did not make."""
    step = captured(family, "decode")
    for strategy in (experts_on_host(), expert_streaming()):
        with pytest.warns(wb.PlacementWarning, match="moved no expert"):
            strategy.apply(step.program)
        with pytest.raises(wb.PlacementError, match="no routed experts"):
            strategy.apply(step.program, strict=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_expert_streaming_gathers_only_routed_rows(family, kind):
    """expert_streaming with no arguments keeps every found expert weight on the host, and
    every copy of one is a routed copy (rule 10c, d) of at most min(E, tokens x k) slabs,
    whose count in the run is the distinct experts the router chose: nothing copies a
    whole stack."""
    step = captured(family, kind)
    dg, result, outputs = run_on_sim(step, expert_streaming())
    assert_equal_to_eager(step, outputs)
    streamed = _streamed_names(step)
    assert streamed and all(dg.residency[name] == (wb.CPU,) for name in streamed)
    weight_copies = [c for c in dg.copies if c.value in streamed]
    assert weight_copies and all(c.role is wb.CopyRole.ROUTED for c in weight_copies)
    config = step.module.hf_model.config
    experts, k = config.num_experts if hasattr(config, "num_experts") else None, config.num_experts_per_tok
    tokens = 1 if kind == "decode" else 4
    for record in weight_copies:
        assert record.routing is not None and record.routing.top_k == k and record.routing.tokens == tokens
        assert record.slots == min(record.routing.experts, tokens * k)
        assert experts is None or record.routing.experts == experts
    moved = {r.node: r for r in result.routed}
    assert set(moved) == {c.name for c in weight_copies}
    assert all(0 < r.rows <= r.slots for r in moved.values())


def _streamed_names(step) -> set[str]:
    """Placeholders of the found experts' weights (what expert_streaming keeps on the host)."""
    weights = set(find_experts(step.program).weights)
    return {name for name, fqn in step.program.constants.items() if fqn in weights}


def _distinct_routed_bytes(step) -> int:
    """Bytes of the distinct experts each layer's router picks in the eager decode step."""
    model = step.module.hf_model
    experts = find_experts(model)
    picked: list[int] = []

    def record(layer):
        return lambda module, args: picked.append(int(args[1].unique().numel()) * layer.expert_nbytes)

    hooks = [model.get_submodule(layer.module).register_forward_pre_hook(record(layer)) for layer in experts]
    try:
        step.eager()
    finally:
        for hook in hooks:
            hook.remove()
    return sum(picked)


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_streamed_decode_moves_only_the_routed_experts(family):
    """Streamed link bytes per decode step <= 1.1 x the distinct routed experts' bytes +
    the activations that cross (none with the skip flags): in the copy table (its upper
    bound) and on the run's timeline (what crossed)."""
    step = captured(family, "decode")
    dg, result, _outputs = run_on_sim(step, expert_streaming())
    streamed = _streamed_names(step)
    weight_bytes = sum(c.nbytes for c in dg.copies if c.value in streamed)
    activation_bytes = sum(c.nbytes for c in dg.copies if c.value not in streamed)
    routed = _distinct_routed_bytes(step)
    assert weight_bytes + activation_bytes <= 1.1 * routed + activation_bytes
    assert result.copy_bytes_by_kind()["h2d"] <= 1.1 * routed + activation_bytes


@pytest.mark.parametrize("family", ["qwen3_moe", "gpt_oss"])
def test_streamed_prefill_moves_each_routed_expert_once(family):
    """In a prefill several tokens pick the same expert: the run moves each distinct routed
    expert's slabs once (what the router chose, recorded by hooks on the eager model), not
    once per token, and no more than min(E, tokens x k) of them."""
    step = captured(family, "prefill")
    _dg, result, _outputs = run_on_sim(step, expert_streaming())
    assert sum(r.link_bytes for r in result.routed) == _distinct_routed_bytes(step)
    assert sum(r.link_bytes for r in result.routed) < sum(r.bound_bytes for r in result.routed)


OTHER_FORMS = [
    ("qwen3_moe", "grouped_mm", torch.bfloat16),
    ("gpt_oss", "batched_mm", torch.float32),
    ("mixtral", "batched_mm", torch.bfloat16),
]


@pytest.mark.parametrize("family, implementation, dtype", OTHER_FORMS)
def test_other_expert_forms_equal_eager(family, implementation, dtype):
    """transformers' other capturable expert forms — aten._grouped_mm (bfloat16) and the
    aten.index.Tensor gather of batched_mm — run on sim and equal eager too; streamed,
    every expert weight crosses as a routed copy and a decode step moves at most 1.1 x the
    distinct routed experts' bytes (plus activations)."""
    step = captured(family, "decode", implementation, dtype)
    targets = {str(n.target) for n in step.program.graph.nodes}
    form = "aten._grouped_mm.default" if implementation == "grouped_mm" else "aten.bmm.default"
    assert form in targets
    for strategy in (all_on_device(), experts_on_host(), expert_streaming()):
        dg, result, outputs = run_on_sim(step, strategy)
        assert_equal_to_eager(step, outputs, atol=1e-2 if dtype == torch.bfloat16 else 1e-5)
    streamed = _streamed_names(step)
    weight_copies = [c for c in dg.copies if c.value in streamed]
    assert weight_copies and all(c.role is wb.CopyRole.ROUTED for c in weight_copies)
    activation_bytes = sum(c.nbytes for c in dg.copies if c.value not in streamed)
    assert result.copy_bytes_by_kind()["h2d"] <= 1.1 * _distinct_routed_bytes(step) + activation_bytes


def _expert_matmul_flops_by_hand(step, tokens: int) -> int:
    """2 FLOPs per multiply-add: each of the tokens x k routed rows meets one slab of every
    stacked expert matrix ([E, in, out], biases aside) of every MoE layer."""
    config = step.module.hf_model.config
    experts = find_experts(step.program)
    slabs = 0
    for name, fqn in step.program.constants.items():
        if fqn in set(experts.weights):
            shape = step.program.graph.find_nodes(op="placeholder", target=name)[0].meta["val"].shape
            slabs += shape[1] * shape[2] if len(shape) == 3 else 0
    return 2 * tokens * config.num_experts_per_tok * slabs


@pytest.mark.parametrize(
    "family, kind, implementation, dtype",
    [("qwen3_moe", "decode", None, None), ("qwen3_moe", "prefill", None, None), *[(f, "decode", i, d) for f, i, d in OTHER_FORMS]],
)
def test_expert_matmul_flops_match_a_hand_count(family, kind, implementation, dtype):
    """The estimate's FLOPs for the expert matmuls (the grouped ops by cost model rule 3a,
    bmm by FlopCounterMode) are within 5% of the hand count 2·tokens·k·(in·out summed over
    the stacked expert matrices), resident or streamed, and the estimate names no op it
    could not count."""
    step = captured(family, kind, implementation, dtype)
    tokens = 1 if kind == "decode" else 4
    want = _expert_matmul_flops_by_hand(step, tokens)
    for strategy in (all_on_device(), expert_streaming()):
        plan = wb.plan(strategy.apply(step.program))
        with warnings.catch_warnings():
            warnings.simplefilter("error", CostModelWarning)
            timeline = wb.estimate(plan)
        matmuls = {
            n.name for n in plan.device_graph.graph.nodes
            if n.op == "call_function" and (is_grouped_mm(n) or n.target is torch.ops.aten.bmm.default)
        }  # fmt: skip
        got = sum(e.flops for e in timeline.events if e.node in matmuls and e.activity == "op")
        assert want > 0 and abs(got - want) <= 0.05 * want, (strategy.label, got, want)


def test_full_sliding_window_decode_equals_eager():
    """GPT-OSS decoding past its sliding window (the static cache rolls) equals eager: the
    roll indexes with torch.tensor([-1]), captured as lift_fresh_copy -> aten.detach_ of a
    value the executor binds to an arena slot."""
    model = tiny_model("gpt_oss")
    window = model.config.sliding_window
    step = hf.capture_decode(model, "static", past=window, max_cache_len=window + 4)
    _dg, _result, outputs = run_on_sim(step, all_on_device())
    assert_equal_to_eager(step, outputs)
