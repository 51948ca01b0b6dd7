"""Expert prefetch in propagation, scheduling and strategies: a streamed select_rows becomes
a prefetch of the hinted rows plus a reuse copy, issued early enough to overlap compute."""

import functools

import pytest
import torch

import workbench as wb
from workbench import CPU, Device
from workbench.copy_ops import GATHER_H2D, GATHER_REUSE, SELECT_ROWS
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe.strategies import StrategyError, all_on_device, expert_streaming, experts_on_host

EXPERTS = "layers.*.mlp.experts.*"
CUDA0 = Device("cuda", 0)


@functools.lru_cache(maxsize=None)
def _moe(prefetch=True):
    cfg = MoEConfig.tiny()
    model = QwenMoEDecoder(cfg, expert_prefetch=prefetch).eval()
    inputs = model.example_inputs()
    return cfg, model, inputs, wb.capture(model, inputs)


def _nodes(dg):
    return {n.name: n for n in dg.graph.nodes}


def test_streamed_select_rows_becomes_prefetch_plus_reuse_copy():
    """Each device select_rows(w, idx, hint) of a streamed weight becomes
    p = gather_h2d_copy(w, hint) named *_prefetch and gather_h2d_reuse_copy(w, idx, p,
    hint); both are h2d CopyRecords of k slabs (the reuse copy's bound) from cpu to
    cuda:0; layer 0 (no hint) keeps its plain gather; the weights stay on the host."""
    cfg, _, _, prog = _moe()
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), True, True, stream_constants=[EXPERTS])
    nodes = _nodes(dg)
    selects = [n for n in prog.graph.nodes if n.op == "call_function" and n.target is SELECT_ROWS]
    k, H, I = cfg.num_experts_per_tok, cfg.hidden_size, cfg.moe_intermediate_size
    slab = {"w1": 2 * I * H * 4, "w2": H * I * 4}
    records = {c.name: c for c in dg.copies}
    for sel in selects:
        reuse, prefetch = nodes[f"{sel.name}_gather"], nodes[f"{sel.name}_prefetch"]
        weight, idx, hint = sel.args
        assert reuse.target is GATHER_REUSE and prefetch.target is GATHER_H2D
        assert prefetch.args == (nodes[weight.name], nodes[hint.name], "cpu", "cuda:0")
        assert reuse.args == (nodes[weight.name], nodes[idx.name], prefetch, nodes[hint.name], "cpu", "cuda:0")
        which = prog.constants[weight.name].rsplit(".", 1)[1]
        for record in (records[reuse.name], records[prefetch.name]):
            assert (record.kind, record.src, record.dst) == ("h2d", CPU, CUDA0)
            assert record.nbytes == k * slab[which]
        assert "only the rows it missed cross the link" in records[reuse.name].reason
        assert "predicted by" in records[prefetch.name].reason
    plain = [c for c in dg.copies if nodes[c.name].target is GATHER_H2D and not c.name.endswith("_prefetch")]
    assert len(plain) == 2 and len(dg.copies) == 2 + 2 * len(selects)
    for name, fqn in prog.constants.items():
        assert dg.residency[name] == ((CPU,) if ".experts." in fqn else (CUDA0,)), fqn


def test_propagated_prefetch_graph_runs_like_eager():
    """The propagated graph (prefetch and reuse copies run as plain PyTorch) returns the
    model's outputs bit for bit, with and without skip flags, and still exports."""
    _, model, inputs, prog = _moe()
    with torch.no_grad():
        expected = model(*inputs)
    for flags in ((False, False), (True, True)):
        dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), *flags, stream_constants=[EXPERTS])
        got = dg.module()(*inputs)
        assert all(torch.equal(g, w) for g, w in zip(got, expected))
    ep = dg.exported_program()
    assert sum(1 for n in ep.graph.nodes if n.op == "call_function" and n.target is GATHER_REUSE) == 6


def test_select_rows_of_resident_weights_runs_on_its_device():
    """Without streaming, select_rows is an ordinary op: on the device with resident
    weights (no copy at all), on the host for experts_on_host."""
    _, model, inputs, prog = _moe()
    dg = all_on_device().apply(prog)
    assert dg.copies == ()
    selects = [n for n in dg.graph.nodes if n.target is SELECT_ROWS]
    assert selects and all(dg.node_device[n.name] == CUDA0 for n in selects)
    dg = experts_on_host().apply(prog)
    assert all(dg.node_device[n.name] == CPU for n in dg.graph.nodes if n.target is SELECT_ROWS)
    with torch.no_grad():
        expected = model(*inputs)
    assert all(torch.equal(g, w) for g, w in zip(dg.module()(*inputs), expected))


def test_overlap_order_issues_prefetch_after_this_layers_copy_and_before_next_attention():
    """In the overlap order, layer i+1's prefetches come after layer i's own expert copies
    (the copy stream is serial and those are on the critical path) and before layer i+1's
    attention begins (its input norm), so they overlap layer i's remaining compute."""
    cfg, _, _, prog = _moe()
    dg = expert_streaming(prefetch=True).apply(prog)
    order = {n.name: i for i, n in enumerate(dg.graph.nodes)}
    L = cfg.num_hidden_layers
    copies_of = {i: [] for i in range(L)}
    prefetch_of = {i: [] for i in range(L)}
    for n in dg.graph.nodes:
        if n.target is GATHER_REUSE or (n.target is GATHER_H2D and not n.name.endswith("_prefetch")):
            copies_of[int(dg.program.constants[n.args[0].name].split(".")[1])].append(order[n.name])
        elif n.target is GATHER_H2D:
            prefetch_of[int(dg.program.constants[n.args[0].name].split(".")[1])].append(order[n.name])
    # the first op of layer i+1's attention block: its input_layernorm's first op
    first_attention = {}
    for n in dg.graph.nodes:
        stack = n.meta.get("nn_module_stack") or {}
        for path, _ in stack.values():
            if path.endswith(".input_layernorm"):
                layer = int(path.split(".")[1])
                first_attention.setdefault(layer, order[n.name])
    for i in range(L - 1):
        assert len(prefetch_of[i + 1]) == 2 and len(copies_of[i]) == 2
        assert max(copies_of[i]) < min(prefetch_of[i + 1]), i
        assert max(prefetch_of[i + 1]) < first_attention[i + 1], i


def test_streaming_strategies_check_the_program_they_get():
    """expert_streaming(prefetch=True) needs a program with routing hints, and plain
    expert_streaming refuses one (it would prefetch under the wrong label); both errors
    say which model to capture. Other strategies take either program."""
    *_, hinted = _moe(True)
    *_, plain = _moe(False)
    with pytest.raises(StrategyError, match="expert_prefetch=True"):
        expert_streaming(prefetch=True).apply(plain)
    with pytest.raises(StrategyError, match=r"expert_streaming\(prefetch=True\)"):
        expert_streaming().apply(hinted)
    assert all_on_device().apply(hinted).copies == ()
    with pytest.raises(TypeError, match="True or False"):
        expert_streaming(prefetch=1)


def test_prefetch_variant_labels():
    """The prefetch variant is listed as its own strategy: variant and label say prefetch."""
    s = expert_streaming(prefetch=True, skip_copies=True)
    assert (s.variant, s.label) == ("expert_streaming+prefetch", "expert_streaming+prefetch+skip")
    assert expert_streaming(skip_copies=False).label == "expert_streaming"
