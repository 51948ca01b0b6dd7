"""Weight formats through the expert rewrites: a program ``quantize`` stored in a format
keeps it when an expert cache or the stacking of per-expert modules rewrites its graph —
the host experts, the stacks and the cache's slabs are counted at the format's bytes, and
a format the executor runs still runs equal to its dequantized eager reference."""

from __future__ import annotations

import functools

import pytest
import torch

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe.expert_reads import rows_program
from workbench.moe.discovery import expert_layers
from workbench.moe.strategies import expert_cache, expert_streaming
from workbench.planning.memory_plan import plan
from workbench.runtime import ExecutorError, stage_inputs
from workbench.moe.strategies import StrategyError
from workbench.weight_formats import weight_format

from test_expert_reads import EXPERTS, LAYERS, switch

EXPERT_RULES = {"q4_k": ["module:layers.*.mlp.experts"]}


@functools.lru_cache(maxsize=None)
def decoder():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = QwenMoEDecoder(MoEConfig.tiny()).eval()
    return model, wb.capture(model, model.example_inputs())


def test_a_cache_of_quantized_experts_holds_them_at_their_format():
    """With q4_k experts, an expert cache's host experts take the bytes streaming's do (the
    format's, not the captured dtype's), its slabs shrink by the same bits ratio, and every
    slab buffer carries the experts' format."""
    _, program = decoder()
    q = wb.quantize(program, EXPERT_RULES)
    bits = weight_format("q4_k").bits_per_weight / (program.constant_tensor(next(iter(program.constants))).element_size() * 8)
    for slots in (2, 4):
        full, small = plan(expert_cache(slots, "lru").apply(program)), plan(expert_cache(slots, "lru").apply(q))
        streamed = plan(expert_streaming().apply(q))
        assert small.constant_bytes["cpu"] == streamed.constant_bytes["cpu"] < full.constant_bytes["cpu"] * bits * 1.05
        cached = small.device_graph.program
        slabs = [n for n, f in cached.constants.items() if f.startswith("expert_cache.") and f.rsplit(".", 1)[-1] not in
                 ("slots", "keys", "requests", "clock")]  # fmt: skip
        assert slabs and all(cached.stored_formats[n].name == "q4_k" for n in slabs)
        base_device = plan(expert_streaming().apply(program)).constant_bytes["cuda:0"]
        grown_full = full.constant_bytes["cuda:0"] - base_device
        grown_small = small.constant_bytes["cuda:0"] - base_device
        assert 0 < grown_small < grown_full * bits * 1.2  # the slabs (plus small int64 tables)


def test_a_cached_quantized_program_is_estimated_never_run_at_full_precision():
    """With int8 experts every cache variant reads rows stored in the format into planned
    memory (its reads, or the host path's row picks), so a run is refused as streaming's
    is — never computed with the captured full-precision values, which a rewrite that
    dropped the format would silently do — while ``estimate`` times it."""
    model, program = decoder()
    q = wb.quantize(program, {"int8": ["module:layers.*.mlp.experts"]})
    strategies = (expert_streaming(), expert_cache(2, "lru"), expert_cache(2, "static_hot"),
                  expert_cache(2, "static_hot", on_miss="host_compute"))  # fmt: skip
    for strategy in strategies:
        memory = plan(strategy.apply(q), "greedy")
        with pytest.raises(ExecutorError, match="stored in a weight format into planned memory"):
            wb.run(memory, *stage_inputs(memory.device_graph, model.example_inputs(), "sim"), backend="sim")
        assert wb.estimate(memory).span_us > 0


def test_a_cache_of_quantized_experts_copies_and_estimates_at_their_format():
    """The cache's copies of int8 experts move the format's bytes (about a quarter of the
    fp32 capture's), and the modeled copies take less time for it."""
    _, program = decoder()
    q = wb.quantize(program, {"int8": ["module:layers.*.mlp.experts"]})
    full, small = (expert_cache(2, "lru").apply(p) for p in (program, q))
    moved = [sum(c.nbytes for c in dg.copies if c.role.name == "REUSE") for dg in (full, small)]
    bits = weight_format("int8").bits_per_weight / (program.constant_tensor(next(iter(program.constants))).element_size() * 8)
    assert moved[0] > 0 and moved[1] == pytest.approx(moved[0] * bits, rel=0.05)
    timed = [sum(e.end_us - e.start_us for e in wb.estimate(plan(dg, "greedy")) if e.kind == "h2d") for dg in (full, small)]
    assert 0 < timed[1] < timed[0]


def test_stacked_per_expert_weights_keep_their_format():
    """Stacking one module per expert carries the experts' format to the stack, and its
    values are the stacked dequantized values where the format runs; the other constants
    keep theirs."""
    *_, program = switch()
    q = wb.quantize(program, {"int8": ["module:layers.*.experts"], "q4_k": ["module:head"]})
    new, layers, _ = rows_program(q, expert_layers(q))
    by_fqn = {f: n for n, f in new.constants.items()}
    for i, (_, layer) in enumerate(layers):
        for w in layer.weights:
            assert new.stored_formats[by_fqn[w]].name == "q8_0"
            sources = [next(n for n, f in q.constants.items() if f == w.replace(".experts.", f".experts.{e}.")) for e in range(EXPERTS)]
            assert torch.equal(new.constant_tensor(by_fqn[w]), torch.stack([q.dequantized[s] for s in sources]))
    assert new.stored_formats[by_fqn["head.weight"]].name == "q4_k"
    assert len(layers) == LAYERS


def test_experts_of_one_weight_in_different_formats_are_refused():
    """A stack is one tensor in one format: experts of one layer quantized differently are
    refused (a CacheGraphError, as the strategy's StrategyError) naming the formats and
    what to do."""
    *_, program = switch()
    q = wb.quantize(program, {"int8": ["module:layers.0.experts.0"]})
    with pytest.raises(StrategyError, match=r"different formats \(as captured, q8_0\).*quantize every expert of a layer alike"):
        expert_cache(EXPERTS, "static_hot").apply(q)
