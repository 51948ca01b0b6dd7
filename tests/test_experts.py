"""Expert discovery: routed experts found by what they are, in any MoE, not by a path."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import workbench as wb
from conftest import moe_tiny
from workbench.moe.discovery import ExpertDiscoveryError, ExpertMap, find_experts
from workbench.place import module_paths


def test_builtin_decoder_experts():
    """The built-in decoder's experts are layers.N.mlp.experts (w1, w2), one per layer, with
    the config's expert count and their router; the same from the module and the program."""
    cfg, model, _inputs, prog = moe_tiny()
    found = find_experts(model)
    assert found.modules == tuple(f"layers.{i}.mlp.experts" for i in range(cfg.num_hidden_layers))
    assert found.weights == tuple(f"layers.{i}.mlp.experts.{w}" for i in range(cfg.num_hidden_layers) for w in ("w1", "w2"))
    assert found.num_experts == cfg.num_experts
    assert [layer.router for layer in found] == [f"layers.{i}.mlp.gate.weight" for i in range(cfg.num_hidden_layers)]
    slab = 3 * cfg.moe_intermediate_size * cfg.hidden_size * 4
    assert all(layer.expert_nbytes == slab and layer.layout == "stacked" for layer in found)
    assert find_experts(prog) == found


def test_contains_marks_exactly_the_expert_containers_ops():
    """contains(node) is true for the ops traced inside an expert container, false for the
    router, the shared expert and everything else."""
    *_, prog = moe_tiny()
    found = find_experts(prog)
    inside = [n for n in prog.graph.nodes if n.op == "call_function" and found.contains(n)]
    assert inside
    for node in prog.graph.nodes:
        if node.op != "call_function":
            continue
        paths = module_paths(node)
        assert found.contains(node) == any(p.endswith(".mlp.experts") for p in paths), node.name


class _Expert(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, inner, bias=False)
        self.w2 = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.relu(self.w1(x)))


class _ListMoE(nn.Module):
    """Mixtral-style legacy block: a router and a module list of experts."""

    def __init__(self, hidden: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(_Expert(hidden, 32) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, H)
        weights, idx = torch.topk(torch.softmax(self.gate(x), -1), 1)
        outs = torch.stack([e(x) for e in self.experts], 1)  # (T, E, H): every expert, dense
        return (outs.gather(1, idx[:, :, None].expand(-1, -1, x.shape[-1])) * weights[:, :, None]).sum(1)


class _ListModel(nn.Module):
    def __init__(self, layers: int = 4) -> None:  # as many layers as experts: no confusion allowed
        super().__init__()
        self.embed = nn.Embedding(10, 16)
        self.layers = nn.ModuleList(_ListMoE() for _ in range(layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = x + layer(x)
        return x


def test_one_module_per_expert():
    """A module list of identical experts scored by a router is found (layout 'modules'),
    with every expert's weights; the list of decoder layers (as many as experts) is not."""
    model = _ListModel()
    found = find_experts(model)
    assert found.modules == tuple(f"layers.{i}.experts" for i in range(4))
    assert all(layer.layout == "modules" and layer.num_experts == 4 for layer in found)
    assert found.layers[0].weights == tuple(f"layers.0.experts.{e}.{w}.weight" for e in range(4) for w in ("w1", "w2"))
    prog = wb.capture(model, (torch.tensor([1, 2, 3]),))
    assert find_experts(prog) == found
    ops = [n for n in prog.graph.nodes if n.op == "call_function" and found.contains(n)]
    assert {p for n in ops for p in module_paths(n)} >= {"layers.0.experts.3.w2"}


class _NotExperts(nn.Module):
    """Look-alikes: a depthwise conv's [C, 1, K] weight, a stacked parameter with no router,
    a shared expert, a router whose width matches nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 8, 4, groups=8, bias=False)  # weight (8, 1, 4)
        self.proj = nn.Linear(16, 8, bias=False)  # (8, 16): leading 8, but no stack of width 16
        self.stack = nn.Parameter(torch.zeros(6, 5, 7))  # stacked, no (6, 5|7) router anywhere
        self.shared_expert = _Expert(16, 32)
        self.gate = nn.Linear(16, 6, bias=False)  # (6, 16): 16 is not a dim of the stack


def test_look_alikes_are_not_experts():
    """Rule 2: without a router of matching width nothing is an expert."""
    assert not find_experts(_NotExperts())
    assert find_experts(_NotExperts()).num_experts is None


def test_expected_count_filters_candidates():
    """Rule 3: with an expected count, containers of another size are not experts; a bad
    count is an error."""
    *_, prog = moe_tiny()
    assert len(find_experts(prog, num_experts=8)) == 4
    assert not find_experts(prog, num_experts=16)
    with pytest.raises(ExpertDiscoveryError, match="integer >= 2"):
        find_experts(prog, num_experts=1)
    with pytest.raises(ExpertDiscoveryError, match="nn.Module or a Program"):
        find_experts("layers.*.mlp.experts")


def test_dataframe_and_sizes():
    """The table lists one row per layer with bytes per expert and per layer."""
    cfg, model, *_ = moe_tiny()
    found = find_experts(model)
    frame = found.to_dataframe()
    assert list(frame["module"]) == list(found.modules)
    assert found.nbytes == sum(p.numel() * 4 for n, p in model.named_parameters() if ".mlp.experts." in n)
    assert isinstance(found, ExpertMap) and len(found) == cfg.num_hidden_layers


@pytest.mark.parametrize(
    "family",
    ["qwen3_moe", "qwen3_5_moe", "qwen3_next", "mixtral", "deepseek_v3", "deepseek_v2", "gpt_oss", "olmoe", "qwen3", "llama"],
)
def test_every_transformers_family(family):
    """Every family's routed experts are model.layers.N.mlp.experts with the config's count:
    the stacked gate_up_proj / down_proj (and GPT-OSS's per-expert biases), never a shared
    expert, a DeltaNet conv or a dense first layer; dense models have none."""
    pytest.importorskip("transformers")
    from workbench import hf

    model = hf.load_model(family)
    found = find_experts(model)
    if not hf.family(family).moe:
        assert not found
        return
    layers = model.config.num_hidden_layers
    dense = getattr(model.config, "first_k_dense_replace", 0) or 0
    assert found.modules == tuple(f"model.layers.{i}.mlp.experts" for i in range(dense, layers))
    assert found.num_experts == 8
    expected = {"gate_up_proj", "down_proj"} | ({"gate_up_proj_bias", "down_proj_bias"} if family == "gpt_oss" else set())
    for layer in found:
        assert {w.removeprefix(layer.module + ".") for w in layer.weights} == expected
        assert layer.router in {f"{layer.module[: -len('.experts')]}.{r}.weight" for r in ("gate", "router")}
    assert not any("shared" in w or "conv" in w for w in found.weights)


class _TwoMixtures(nn.Module):
    """Two MLP mixtures in one decoder layer: no way to tell their caches apart by layer."""

    def __init__(self) -> None:
        super().__init__()
        self.a = _ListMoE()
        self.b = _ListMoE()


def test_two_groups_of_one_kind_in_a_layer_are_refused():
    """A decoder layer may hold one MLP and one attention expert group (JetMoE, tested
    with transformers); two MLP groups in one layer share a name, which expert_map
    refuses, naming the groups and how containers are named."""
    from workbench.moe.discovery import expert_map

    model = nn.Module()
    model.layers = nn.ModuleList([_TwoMixtures()])
    assert len(find_experts(model)) == 2
    with pytest.raises(ExpertDiscoveryError, match=r"share a name \['layers.0', 'layers.0'\].*one of attention"):
        expert_map(model)


class _ScoredBeyond(nn.Module):
    """A block of 4 stacked experts (width 16) whose router scores ``scored`` columns; with
    ``shared``, a stack of that many shared experts beside them; with ``mlp_width``, the
    router is the last layer of a small network of that width (``gate.read`` reads the
    hidden state, ``gate.out`` scores); ``reader=False`` leaves that network without its
    reading layer."""

    def __init__(self, scored: int, shared: int = 0, mlp_width: int = 0, reader: bool = True, exact: bool = False) -> None:
        super().__init__()
        self.experts = nn.Module()
        self.experts.gate_up_proj = nn.Parameter(torch.zeros(4, 8, 16))
        self.experts.down_proj = nn.Parameter(torch.zeros(4, 16, 4))
        self.gate = nn.Module()
        if mlp_width:
            if reader:
                self.gate.read = nn.Linear(16, mlp_width)
            self.gate.out = nn.Linear(mlp_width, scored, bias=False)
        else:
            self.gate.weight = nn.Parameter(torch.zeros(scored, 16))
        if exact:
            self.exact = nn.Parameter(torch.zeros(4, 16))
        if shared:
            self.shared_experts = nn.Module()
            self.shared_experts.up_proj = nn.Parameter(torch.zeros(shared, 8, 16))


@pytest.mark.parametrize(
    "block, router, zero, shared",
    [
        (_ScoredBeyond(5), "gate.weight", 1, 0),  # a skip expert the router scores (ZAYA's)
        (_ScoredBeyond(6, shared=2), "gate.weight", 0, 2),  # shared experts it weights (Inkling's)
        (_ScoredBeyond(5, mlp_width=12), "gate.out.weight", 1, 0),  # a router network of its own width
        (_ScoredBeyond(5, exact=True), "exact", 0, 0),  # a router of exactly E comes first
    ],
)
def test_router_scoring_more_than_the_experts(block, router, zero, shared):
    """Rule 2: a router may score Z <= E // 2 columns beyond the container's E experts —
    recorded as zero-computation experts, or as shared experts when the block holds a
    stack of Z slabs beside the container — and may read the hidden state through a
    layer of its own module; E stays the container's count, the bytes its slabs'."""
    (layer,) = find_experts(block)
    assert (layer.module, layer.num_experts, layer.router) == ("experts", 4, router)
    assert (layer.zero_experts, layer.scored_shared) == (zero, shared)
    assert layer.expert_nbytes == (8 * 16 + 16 * 4) * 4
    assert list(find_experts(block).to_dataframe()[["zero_experts", "scored_shared"]].iloc[0]) == [zero, shared]


@pytest.mark.parametrize(
    "block",
    [
        _ScoredBeyond(7),  # 3 extra columns for 4 experts: more than E // 2
        _ScoredBeyond(5, mlp_width=12, reader=False),  # width 12 read from nothing the block holds
        _ScoredBeyond(3),  # fewer columns than experts
    ],
)
def test_router_look_alikes_beyond_the_experts(block):
    """Rule 2 bounds: a parameter scoring more than E + E // 2 columns, or a network whose
    width no layer of its own module reads from the hidden state, or fewer than E
    columns, is no router: nothing is found."""
    assert not find_experts(block)
