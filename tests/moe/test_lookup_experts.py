"""Experts held as rows of lookup tables, in a hand-written model (no transformers): found
by what the graph does — a table's rows gathered by ids a router's topk chose — not by a
family's names, and moved, streamed and cached by those rows, equal to eager."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.moe.discovery import find_experts
from workbench.moe.strategies import expert_cache, expert_streaming, experts_on_host
from workbench.runtime import stage_inputs

from conftest import assert_matches_eager

HIDDEN, EXPERTS, TOP_K, LAYERS, VOCAB = 16, 6, 2, 2, 10


class _LookupMoE(nn.Module):
    """Single-neuron experts: expert e is row e of ``keys`` and of ``values``; a shared
    expert beside them, added to their sum."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.keys = nn.Embedding(EXPERTS, HIDDEN)
        self.values = nn.Embedding(EXPERTS, HIDDEN)
        self.shared = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, H)
        scores, ids = self.router(x).topk(TOP_K, dim=-1)  # (N, k)
        gates = torch.softmax(scores, -1)
        act = torch.relu((self.keys(ids) * x.unsqueeze(1)).sum(-1)) * gates  # (N, k)
        return x + self.shared(x) + (act.unsqueeze(-1) * self.values(ids)).sum(1)


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)  # a lookup too, by the input's ids: no expert
        self.layers = nn.Sequential(*(_LookupMoE() for _ in range(LAYERS)))
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.embed(ids)))


@functools.lru_cache(maxsize=None)
def lookup_model():
    """(model, inputs, program): seeded weights, captured once."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _Model().eval()
    inputs = (torch.tensor([3, 7]),)  # 2 tokens x top-2: 4 routed rows of 6 experts
    return model, inputs, wb.capture(model, inputs)


def test_tables_gathered_by_a_routers_choice_are_experts():
    """Each layer's two tables are one expert layer, scored by its router; the token
    embedding (ids from the input) is not; the layer's ops are the lookups and what
    computes from them, never the router's linear, the shared expert nor the add that
    combines the two. Without a graph or a declared count, the module shows none."""
    model, _, program = lookup_model()
    experts = find_experts(program)
    assert [layer.weights for layer in experts] == [(f"layers.{i}.keys.weight", f"layers.{i}.values.weight") for i in range(LAYERS)]
    assert [layer.router for layer in experts] == [f"layers.{i}.router.weight" for i in range(LAYERS)]
    assert all(layer.num_experts == EXPERTS and layer.module == f"layers.{layer.layer}" for layer in experts)
    nodes = {n.name: n for n in program.graph.nodes}
    for layer in experts:
        targets = {nodes[op].target for op in layer.ops}
        assert torch.ops.aten.embedding.default in targets and torch.ops.aten.relu.default in targets
        assert torch.ops.aten.linear.default not in targets and torch.ops.aten.topk.default not in targets
        combine = [nodes[op] for op in layer.ops if nodes[op].target is torch.ops.aten.add.Tensor]
        assert not combine
    assert not find_experts(model)


@pytest.mark.parametrize("make", [experts_on_host, expert_streaming, lambda: expert_cache(2 * TOP_K, "lru"),
                                  lambda: expert_cache(3, "static_hot")])  # fmt: skip
def test_lookup_experts_run_equal_to_eager(make):
    """Experts on the host, streamed by their routed rows, and cached (admitting and
    static), each equal eager; streaming's copies are the routed rows of the tables, at
    min(E, tokens x k) of them, never a whole table."""
    model, inputs, program = lookup_model()
    dg = make().apply(program)
    session = wb.load(wb.plan(dg, "greedy"), "sim")
    assert_matches_eager(session.run(*stage_inputs(dg, inputs, "sim")).outputs, model(*inputs), "planned run")
    tables = {n for n, f in program.constants.items() if ".keys." in f or ".values." in f}
    moved = [c for c in dg.copies if c.value in tables]
    if make is experts_on_host:
        assert not moved
    elif make is expert_streaming:
        assert len(moved) == 2 * LAYERS
        assert all(c.slots == 2 * TOP_K and c.nbytes == 2 * TOP_K * HIDDEN * 4 for c in moved)  # min(6, 2 x 2) rows


@pytest.mark.parametrize("policy, slots", [("lru", 2 * TOP_K), ("lfu", 2 * TOP_K), ("static_hot", 3)])
def test_lookup_experts_compute_misses_on_the_host_equal_to_eager(policy, slots):
    """With on_miss='host_compute' each routed row's product act * values_row is row-wise:
    the device computes it from the cache, the host from the host tables, merged per row
    before the sum over a token's k rows; the run equals eager, its hit mask counts hits
    and misses, and no table row crosses for a miss (a static cache copies none, an
    admitting cache only its admissions after the layer)."""
    model, inputs, program = lookup_model()
    dg = expert_cache(slots, policy, on_miss="host_compute").apply(program)
    tables = {n for n, f in program.constants.items() if ".keys." in f or ".values." in f}
    moved = [c for c in dg.copies if c.value in tables]
    if policy == "static_hot":
        assert not moved
    else:
        assert moved and all(c.role.name == "REUSE" and c.name.endswith("_admission") for c in moved)
    merges = [n for n in dg.graph.nodes if n.name.endswith("_merged")]
    assert merges and all(n.target is torch.ops.aten.where.self and dg.node_device[n.name] != wb.CPU for n in merges)
    session = wb.load(wb.plan(dg, "greedy"), "sim")
    want = model(*inputs)
    masks = []
    for call in range(2):
        res = session.run(*stage_inputs(dg, inputs, "sim"))
        assert_matches_eager(res.outputs, want, f"{policy} call {call}")
        masks += [(m.true_rows, m.rows) for m in res.row_masks]
    assert len(masks) == 2 * LAYERS and all(rows == 2 * TOP_K for _, rows in masks)
    assert any(hits < rows for hits, rows in masks) and any(hits > 0 for hits, _ in masks)


class _PooledLookupMoE(_LookupMoE):
    """Like ``_LookupMoE``, but the value rows of a token's k experts are pooled by a max
    before any activation reads them: no sum of per-row terms."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores, ids = self.router(x).topk(TOP_K, dim=-1)
        act = (torch.relu((self.keys(ids) * x.unsqueeze(1)).sum(-1)) * torch.softmax(scores, -1)).sum(-1, keepdim=True)
        return x + self.shared(x) + act * self.values(ids).amax(1)


def test_lookup_rows_pooled_without_activation_refuse_host_compute():
    """Weight rows that leave the row-wise ops through no activation nor a matmul linear in
    them (a max over a token's k value rows) cannot be split without copying weights to
    the device: host_compute is a StrategyError naming the op and on_miss='copy', which
    still runs equal to eager."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _Model().eval()
        model.layers = nn.Sequential(*(_PooledLookupMoE() for _ in range(LAYERS)))
    inputs = (torch.tensor([3, 7]),)
    program = wb.capture(model, inputs)
    with pytest.raises(wb.WorkbenchError, match=r"amax.*not row-wise.*matmul linear.*on_miss='copy'"):
        expert_cache(3, "static_hot", on_miss="host_compute").apply(program)
    dg = expert_cache(3, "static_hot").apply(program)
    session = wb.load(wb.plan(dg, "greedy"), "sim")
    assert_matches_eager(session.run(*stage_inputs(dg, inputs, "sim")).outputs, model(*inputs), "copy")
