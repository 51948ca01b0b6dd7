"""Streamed constants: weights kept on the host, only the selected rows gathered to the device."""


import pytest
import torch

import workbench as wb
from conftest import moe_tiny
from workbench import CPU, Device
from workbench.copy_ops import GATHER_H2D

EXPERTS = "layers.*.mlp.experts.*"


def _moe():
    return moe_tiny()


def test_index_select_of_a_streamed_weight_becomes_one_gather():
    """Each routed-expert index_select on the device becomes a gather_h2d_copy of exactly
    k expert slabs; expert weights stay resident on the host only."""
    cfg, model, inputs, prog = _moe()
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), True, True, stream_constants=[EXPERTS])
    gathers = [c for c in dg.copies if c.name.endswith("_gather")]
    assert len(gathers) == 2 * cfg.num_hidden_layers
    k, H, I = cfg.num_experts_per_tok, cfg.hidden_size, cfg.moe_intermediate_size
    w1_slab, w2_slab = 2 * I * H * 4, H * I * 4
    assert sorted({c.nbytes for c in gathers}) == sorted({k * w1_slab, k * w2_slab})
    for c in gathers:
        node = next(n for n in dg.graph.nodes if n.name == c.name)
        assert node.target is GATHER_H2D and c.src == CPU and c.dst == Device("cuda", 0)
        assert dg.program.constants[c.value].endswith(("experts.w1", "experts.w2"))
    for name, fqn in dg.program.constants.items():
        expected = (CPU,) if "experts" in fqn else (Device("cuda", 0),)
        assert dg.residency[name] == expected, fqn


def test_streaming_runs_like_eager():
    """The streamed graph computes the model's outputs, with and without skip flags."""
    cfg, model, inputs, prog = _moe()
    placed = wb.place(prog, lambda n: "cuda:0")
    expected = model(*inputs)
    for flags in ((False, False), (True, True)):
        dg = wb.propagate(placed, *flags, stream_constants=[EXPERTS])
        for got, want in zip(dg.module()(*inputs), expected):
            assert torch.allclose(got, want, atol=1e-5)


def test_gather_copies_exactly_the_routed_rows():
    """The gathered tensor equals the routed experts' weights chosen by the router."""
    cfg, model, inputs, prog = _moe()
    x = torch.randn(1, cfg.hidden_size)
    weights, idx = model.layers[0].mlp.route(x)
    w1 = model.layers[0].mlp.experts.w1
    got = torch.ops.workbench.gather_h2d_copy(w1, idx.reshape(-1), "cpu", "cuda:0")
    assert torch.equal(got, w1[idx.reshape(-1)])


def test_streamed_weight_used_whole_is_copied_whole():
    """A device op that reads a streamed weight other than by row selection copies it whole,
    every call, and the copy says why."""

    class Lin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 8))

        def forward(self, x):
            return x @ self.w

    prog = wb.capture(Lin(), (torch.randn(2, 8),))
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.matmul"]}), stream_constants=["w"])
    whole = [c for c in dg.copies if c.value == "p_w"]
    assert len(whole) == 1 and whole[0].nbytes == 8 * 8 * 4 and "streamed host weight 'w'" in whole[0].reason
    assert dg.residency["p_w"] == (CPU,)


def test_bad_stream_patterns():
    """A stream pattern that matches no parameter, or is not a string, is a clear error."""
    *_, prog = _moe()
    placed = wb.place(prog, lambda n: "cuda:0")
    with pytest.raises(wb.PropagationError, match="match no parameter"):
        wb.propagate(placed, stream_constants=["layers.*.moe.*"])
    with pytest.raises(wb.PropagationError, match="globs"):
        wb.propagate(placed, stream_constants=[3])


def test_metadata_checks_cause_no_copies():
    """Shape assertions read metadata only: a device input checked by one is not copied."""
    *_, prog = _moe()
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), True, True)
    assert dg.copies == ()
