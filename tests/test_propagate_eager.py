"""The propagated graph computes what the model computes, under any placement."""

import random

import pytest
import torch

import workbench as wb
from workbench.models.examples import EXAMPLES

from conftest import assert_no_cross_device_reads, captured

DEVICES = ["cpu", "cuda:0", "cuda:1"]


def _random_rule(seed):
    rng = random.Random(seed)
    return lambda node: rng.choice(DEVICES)


def _assert_same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.allclose(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("decompose", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_random_placements_equal_eager(name, decompose, seed):
    """For every example, random device placements (three devices) with every skip-flag
    setting give a graph whose output equals eager PyTorch, and in which no op reads a
    tensor that lives on another device."""
    model, inputs, prog = captured(name, decompose)
    placed = wb.place(prog, _random_rule(seed))
    expected = model(*inputs)
    for skip_h2d in (False, True):
        for skip_d2h in (False, True):
            dg = wb.propagate(placed, skip_h2d, skip_d2h)
            _assert_same(dg.module()(*inputs), expected)
            assert_no_cross_device_reads(dg)


def test_copy_nodes_really_copy():
    """A copy node returns new memory, so a later in-place write cannot alias its source."""
    x = torch.randn(4)
    y = torch.ops.workbench.h2d_copy(x, "cpu", "cuda:0")
    assert torch.equal(x, y) and y.data_ptr() != x.data_ptr()
