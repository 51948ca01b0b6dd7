"""Expert caches over experts that are read whole: the hand-written switch MoE (one module
per expert, a Python loop in which every expert computes every token) is stacked for the
cache, and runs through it equal to eager, a miss copied or computed on the host (each
expert's module on its own); what cannot work is refused in words that say what would."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.moe.discovery import find_experts
from workbench.moe.expert_reads import rows_program
from workbench.moe.discovery import expert_layers
from workbench.moe.strategies import expert_cache
from workbench.runtime import stage_inputs
from workbench.moe.strategies import StrategyError

from conftest import assert_matches_eager

HIDDEN, EXPERTS, LAYERS = 16, 4, 2


class _Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, 64, bias=False)
        self.w2 = nn.Linear(32, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w1(x).chunk(2, -1)
        return self.w2(nn.functional.silu(gate) * up)


class _Switch(nn.Module):
    """Switch-style top-1 routing over a module list of experts, in a Python loop."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = nn.ModuleList(_Expert() for _ in range(EXPERTS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        prob, chosen = torch.softmax(self.router(x), -1).max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + ((chosen == e).to(x.dtype) * prob).unsqueeze(-1) * expert(x)
        return out


class _SwitchModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, HIDDEN)
        self.layers = nn.ModuleList(_Switch() for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


@functools.lru_cache(maxsize=None)
def switch():
    """(model, inputs, program): seeded weights, captured once."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _SwitchModel().eval()
    inputs = (torch.tensor([1, 2, 3, 7]),)
    return model, inputs, wb.capture(model, inputs)


def test_per_expert_modules_are_stacked_for_the_cache():
    """The rewrite stacks each expert weight name into one [E, ...] parameter equal to the
    experts' own, in expert order; the per-expert parameters leave the program; the
    rewritten program still computes the model's outputs; the captured program is
    untouched."""
    model, inputs, program = switch()
    before = dict(program.constants)
    new, layers, dense = rows_program(program, expert_layers(program))
    assert dense == {f"layers.{i}.experts" for i in range(LAYERS)}
    fqns = set(new.constants.values())
    for i, (_, layer) in enumerate(layers):
        assert layer.layout == "stacked" and layer.weights == (f"layers.{i}.experts.w1.weight", f"layers.{i}.experts.w2.weight")
        for w in layer.weights:
            stacked = new.constant_tensor(next(n for n, f in new.constants.items() if f == w))
            name = w.rsplit(".", 2)[-2]
            expected = torch.stack([getattr(model.layers[i].experts[e], name).weight for e in range(EXPERTS)])
            assert torch.equal(stacked, expected)
    assert not any(".experts.0." in f or ".experts.3." in f for f in fqns)
    assert dict(program.constants) == before
    assert_matches_eager(new.exported.module()(*inputs), model(*inputs), "stacked program")


@pytest.mark.parametrize("policy, slots", [("static_hot", 0), ("static_hot", 2), ("lru", EXPERTS), ("lfu", EXPERTS)])
def test_switch_moe_runs_through_the_cache_equal_to_eager(policy, slots):
    """Every policy caches the stacked experts: each call of a loaded session equals eager;
    a step reads all E experts of each layer through the cache, so a static cache of S
    slots hits S of them per layer every call, and an admitting cache of E slots misses
    every expert on the first call and hits every one on the next."""
    model, inputs, program = switch()
    dg = expert_cache(slots, policy).apply(program)
    session = wb.load(wb.plan(dg, "greedy"), "sim")
    want = model(*inputs)
    for call in range(2):
        res = session.run(*stage_inputs(dg, inputs, "sim"))
        assert_matches_eager(res.outputs, want, f"{policy} call {call}")
        reads = [s for s in res.prefetch if s.rows == EXPERTS]
        assert len(reads) == 2 * LAYERS  # w1 and w2 of each layer, all E rows
        expected = slots if policy == "static_hot" else (0 if call == 0 else EXPERTS)
        assert all(s.hits == expected for s in reads), [(s.node, s.hits) for s in reads]


def test_whole_reads_refuse_what_cannot_work():
    """An admitting cache smaller than the E experts a step reads is refused, naming why
    and what works (static_hot, E slots); a host-computing cache of no slot is refused,
    naming experts_on_host (every expert would run on the host)."""
    *_, program = switch()
    with pytest.raises(StrategyError, match=rf"must be in \[{EXPERTS}, {EXPERTS}\].*read every expert's weights.*static_hot"):
        expert_cache(2, "lru").apply(program)
    with pytest.raises(StrategyError, match=r"must be in \[1, 4\].*experts_on_host"):
        expert_cache(0, "static_hot", on_miss="host_compute").apply(program)


class _SwitchStep(nn.Module):
    """One decode step of a switch model: (tokens (1, 1), position (1,)) -> logits (1, 1, V)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = _SwitchModel()
        self.position = nn.Embedding(8, HIDDEN)

    def forward(self, tokens: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        x = self.model.embed(tokens) + self.position(position)
        for layer in self.model.layers:
            x = x + layer(x)
        return self.model.head(x)


@functools.lru_cache(maxsize=None)
def switch_step():
    """(model, program): the decode step, seeded, captured once."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        model = _SwitchStep().eval()
    return model, wb.capture(model, (torch.tensor([[1]]), torch.tensor([0])))


@pytest.mark.parametrize("policy, slots", [("static_hot", 2), ("lru", EXPERTS), ("lfu", EXPERTS)])
def test_per_expert_modules_compute_misses_on_the_host_equal_to_eager(policy, slots):
    """host_compute over one module per expert: each expert's subgraph runs on the device
    from its slot for a hit and on the host from the host weights for a miss. A 4-token
    decode equals eager; the hit masks count S of the E experts per layer per step for a
    static cache, none then all E for an admitting cache of E slots; no expert weight
    crosses for a miss (a static cache copies none, an admitting cache only admits after
    the layer); the host reads each expert's weights as views (select, no gather), and
    every host op is charged the miss share of its layer's hit mask."""
    from workbench.moe.cache_graph import cache_reads
    from workbench.moe.decode import decode
    from workbench.node_facts import row_share

    model, program = switch_step()
    dg = expert_cache(slots, policy, on_miss="host_compute").apply(program)
    stacked = {n for n, f in dg.program.constants.items() if ".experts." in f and not f.startswith("expert_cache.")}
    assert len(stacked) == 2 * LAYERS
    copies = [c for c in dg.copies if c.value in stacked]
    if policy == "static_hot":
        assert not copies
    else:
        assert copies and all(c.role.name == "REUSE" and c.name.endswith("_admission") for c in copies)
    reads = [n for n in dg.graph.nodes if n.op == "call_function" and any(a.name in stacked for a in n.all_input_nodes)
             and not n.name.endswith("_admission")]  # fmt: skip
    assert len(reads) == 2 * EXPERTS * LAYERS
    assert all(n.target is torch.ops.aten.select.int and dg.node_device[n.name] == wb.CPU for n in reads)
    masks = cache_reads(dg.graph)
    charged = [n for n in dg.graph.nodes if row_share(n) is not None]
    assert charged and all(row_share(n).mask in masks and dg.node_device[n.name] == wb.CPU for n in charged)
    result = decode(wb.plan(dg, "greedy"), 4, first_token=3, reference=model, atol=1e-5)
    assert all(result.matches_eager)
    hits = result.hits.groupby("step")["hits"].apply(list).tolist()
    expected = [[slots] * LAYERS] * 4 if policy == "static_hot" else [[0] * LAYERS] + [[EXPERTS] * LAYERS] * 3
    assert hits == expected


def test_experts_are_found_as_one_module_each():
    """Discovery sees the switch model's experts as one module per expert (the form the
    cache stacks), one layer per decoder layer."""
    model, *_ = switch()
    found = find_experts(model)
    assert [(layer.module, layer.layout, layer.num_experts) for layer in found] == [
        (f"layers.{i}.experts", "modules", EXPERTS) for i in range(LAYERS)
    ]
