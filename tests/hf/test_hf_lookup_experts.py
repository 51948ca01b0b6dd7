"""Experts held as rows of lookup tables (transformers' Doge: single-neuron experts whose
weights are rows of two [E, H] embedding tables, picked by the router's top-k ids): found
from the graph, placed on the host, streamed and cached by the rows the router chose (a
cache miss copied or computed on the host), each equal to eager; a copy moves the gathered
rows, never a whole table, and a miss computed on the host moves none."""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("transformers")

from workbench import hf  # noqa: E402
from workbench.devices import CPU  # noqa: E402
from workbench.moe.discovery import find_experts  # noqa: E402
from workbench.moe.strategies import expert_cache, expert_streaming, experts_on_host  # noqa: E402
from workbench.planning.memory_plan import plan as make_plan  # noqa: E402
from workbench.runtime import stage_inputs  # noqa: E402
from workbench.runtime.executor import run  # noqa: E402

TABLES = ("mlp.down_embed.weight", "mlp.up_embed.weight")


@functools.lru_cache(maxsize=None)
def doge():
    return hf.tiny_family_model("doge")


@functools.lru_cache(maxsize=None)
def decode_step():
    return hf.capture_decode(doge(), "static", past=4, max_cache_len=8)


def _table_bytes(program, fqn: str) -> int:
    name = next(n for n, f in program.constants.items() if f == fqn)
    t = program.constant_tensor(name)
    return t.numel() * t.element_size()


def test_lookup_table_experts_are_found_from_the_graph():
    """In a program, each layer's two tables are one expert layer (their ids come from a
    topk, computed from the block's router_gate): its ops are the lookups and the
    experts' matmuls, not the router's, the shared expert's, nor the add that combines
    them; the token embedding (ids from the input) is no expert. In the module the same
    tables are found by the declared count, so nothing is reported unexpressed."""
    program = decode_step().program
    experts = find_experts(program)
    assert [layer.layer for layer in experts] == [0, 1]
    nodes = {n.name: n for n in program.graph.nodes}
    for layer in experts:
        assert layer.weights == tuple(f"model.layers.{layer.layer}.{t}" for t in TABLES)
        assert layer.router == f"model.layers.{layer.layer}.mlp.router_gate.weight"
        assert layer.num_experts == 8 and layer.expert_nbytes == 2 * 64 * 4
        targets = {nodes[op].target for op in layer.ops}
        assert torch.ops.aten.embedding.default in targets and torch.ops.aten.matmul.default in targets
        assert torch.ops.aten.linear.default not in targets  # router and shared expert stay outside
        assert torch.ops.aten.topk.default not in targets and torch.ops.aten.add.Tensor not in targets
    assert "model.embed_tokens.weight" not in experts.weights
    module_side = find_experts(doge())
    assert module_side.weights == experts.weights and hf.unexpressed_experts(doge()) == ""


def test_lookup_experts_equal_eager_under_every_strategy():
    """Prefill and decode under all_on_device, experts_on_host and expert_streaming, and
    4-token decodes through LRU and static expert caches of 2 slots, equal eager."""
    stages = (
        *(f"{step}/{s}" for step in ("prefill", "decode_static") for s in ("all_on_device", "experts_on_host", "expert_streaming")),
        "decode_4_tokens/partial_offload",
        "decode_4_tokens/expert_cache_lru_copy",
        "decode_4_tokens/expert_cache_static_hot_copy",
    )
    report = hf.try_stages(doge(), stages=stages)
    assert report.ok, report.to_dataframe().to_string()


def test_lookup_experts_move_only_the_gathered_rows():
    """experts_on_host copies no table (only activations cross); expert_streaming gathers
    each table's routed rows, records of at most min(E, tokens x k) rows and a run that
    moves exactly the distinct ids' rows; an expert cache reads the routed rows through
    its slots. No copy is ever a whole table."""
    step = decode_step()
    program = step.program
    tables = {f"model.layers.{i}.{t}" for i in (0, 1) for t in TABLES}
    placeholders = {n: f for n, f in program.constants.items() if f in tables}
    row_bytes = 64 * 4
    whole = {_table_bytes(program, f) for f in tables}
    assert whole == {8 * row_bytes}

    on_host = experts_on_host().apply(program)
    assert not [c for c in on_host.copies if c.value in placeholders]

    streaming = expert_streaming().apply(program)
    gathers = [c for c in streaming.copies if c.value in placeholders]
    assert len(gathers) == 4 and all(c.role.name == "COUNTED" for c in gathers)
    assert all(c.slots == 2 and c.nbytes == 2 * row_bytes for c in gathers)  # 1 token x top-2
    memory = make_plan(streaming, "greedy")
    result = run(memory, *stage_inputs(streaming, step.inputs, "sim"), backend="sim")
    stats = {s.node: s for s in result.counted_gathers}
    assert set(stats) == {c.name for c in gathers}
    assert all(s.row_bytes == row_bytes and 1 <= s.rows <= 2 for s in stats.values())

    cached = expert_cache(2, "lru").apply(program)
    reads = [c for c in cached.copies if c.value in placeholders]
    assert len(reads) == 4 and all(c.role.name == "REUSE" and c.nbytes == 2 * row_bytes for c in reads)


@pytest.mark.parametrize("policy", ["lru", "lfu", "static_hot"])
def test_lookup_experts_on_host_compute_equal_eager_and_copy_no_table(policy):
    """A cache miss of lookup-table experts is computed on the host: a 4-token decode
    through a 2-slot cache equals eager (with hits and misses both); no table row crosses
    the link for a miss (a static cache copies no table at all, an admitting cache only
    its admissions, reuse copies after the layer); the host ops read the host tables; the
    up table's matmul over a token's k rows is split into the device's hit rows plus the
    host's missed rows, and every host op is charged the miss share of the layer's hits."""
    from workbench.moe.cache_graph import cache_reads
    from workbench.moe.decode import decode
    from workbench.node_facts import row_share

    step = decode_step()
    program = step.program
    tables = {n for n, f in program.constants.items() if f.endswith(TABLES)}
    dg = expert_cache(2, policy, on_miss="host_compute").apply(program)
    copies = [c for c in dg.copies if c.value in tables]
    if policy == "static_hot":
        assert not copies
    else:
        assert copies and all(c.role.name == "REUSE" and c.name.endswith("_admission") for c in copies)
    readers = [n for n in dg.graph.nodes if n.op == "call_function" and any(a.name in tables for a in n.all_input_nodes)]
    on_host = [n.name for n in readers if not n.name.endswith("_admission")]
    assert len(on_host) == 4 and all(dg.node_device[n] == CPU for n in on_host)  # two tables, two layers
    splits = [n for n in dg.graph.nodes if n.name.endswith("_hits_and_misses")]
    assert len(splits) == 2 and all(n.target is torch.ops.aten.add.Tensor for n in splits)
    masks = cache_reads(dg.graph)
    charged = [n for n in dg.graph.nodes if row_share(n) is not None]
    assert charged and all(row_share(n).mask in masks and dg.node_device[n.name] == CPU for n in charged)
    result = decode(make_plan(dg, "greedy"), 4, first_token=5, reference=step.module, atol=1e-4)
    assert all(result.matches_eager)
    rates = result.hits["hit_rate"]
    assert rates.min() < 1 and rates.max() > 0  # both halves of the split were used


def test_lookup_experts_on_host_compute_stages_pass():
    """The 4-token decode stages through each policy's host-computing cache pass (equal eager)."""
    stages = tuple(f"decode_4_tokens/expert_cache_{p}_host_compute" for p in ("lru", "lfu", "static_hot"))
    report = hf.try_stages(doge(), stages=stages)
    assert report.ok, report.to_dataframe().to_string()


def test_per_expert_biases_of_stacked_experts_are_not_tables():
    """GPT-OSS's per-expert biases [E, I] are two-dim parameters gathered by the router's
    ids too (batched_mm): they stay weights of the stacked layer, never a second layer of
    lookup tables (each MoE layer found once)."""
    model = hf.load_model("gpt_oss", experts_implementation="batched_mm")
    experts = find_experts(hf.capture_prefill(model, tokens=2).program)
    assert experts.modules == ("model.layers.0.mlp.experts", "model.layers.1.mlp.experts")
    assert all(not layer.ops and f"{layer.module}.down_proj_bias" in layer.weights for layer in experts)


def test_routing_of_lookup_experts_is_recorded_and_pins_a_static_cache():
    """A RoutingRecorder reads each layer's ids at its first table's lookup (the ids the
    router chose: k distinct experts per token, among the num_keys² the product keys
    reach); the trace's counts pin a static_hot cache whose 4-token decode equals eager."""
    from workbench.hf.steps import example_tokens
    from workbench.moe import RoutingRecorder
    from workbench.moe.decode import decode

    model = doge()
    tokens = example_tokens(model.config.vocab_size, 1, 6, seed=3)
    with RoutingRecorder(model) as recorder, torch.no_grad():
        model(tokens)
    trace = recorder.trace()
    assert trace.experts.shape == (6, 2, 2)
    reachable = int(model.config.num_experts**0.5) ** 2
    assert ((trace.experts >= 0) & (trace.experts < reachable)).all()
    assert all(len(set(row)) == 2 for row in trace.experts.reshape(-1, 2).tolist())
    step = decode_step()
    memory = make_plan(expert_cache(2, "static_hot", popularity=trace.counts()).apply(step.program), "greedy")
    result = decode(memory, 4, first_token=5, reference=step.module, atol=1e-4)
    assert all(result.matches_eager)
