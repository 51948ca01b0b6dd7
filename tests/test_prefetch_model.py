"""Expert prefetch in the model: the routing hint, the select_rows op and the reuse copy op.

The prefetch option must change the captured graph (it carries the hint) and nothing
else: same parameters, same outputs bit for bit; the hint is layer i+1's router applied
to layer i's post-attention hidden state.
"""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.copy_ops import GATHER_REUSE, SELECT_ROWS, reuse_sources
from workbench.models import MoEConfig, QwenMoEDecoder

from conftest import reference_routing, run_with_layer_hooks


@functools.lru_cache(maxsize=None)
def _models(seed=0):
    """The tiny model without and with prefetch, same weights; the norms (initialised to
    ones) get distinct random weights, so using the wrong layer's norm shows."""
    cfg = MoEConfig.tiny()
    pair = QwenMoEDecoder(cfg, seed=seed).eval(), QwenMoEDecoder(cfg, seed=seed, expert_prefetch=True).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for i in range(cfg.num_hidden_layers):
            w = 0.5 + torch.rand(cfg.hidden_size, generator=gen)
            for model in pair:
                model.layers[i].post_attention_layernorm.weight.copy_(w)
    return pair


def _hints_seen(model, inputs):
    """(expert_idx, hint) that each layer's Experts received, in layer order."""
    seen = []
    run_with_layer_hooks(
        model,
        inputs,
        lambda layer: layer.mlp.experts.register_forward_hook(lambda mod, args, out: seen.append((args[1], args[2]))),
    )
    return seen


@pytest.mark.parametrize("batch,position", [(1, 0), (3, 5)])
def test_prefetch_model_equals_plain_model_bit_for_bit(batch, position):
    """The option changes no parameter and no output bit: same state dict, and logits and
    every cache equal exactly, for several batches and positions."""
    plain, hinted = _models()
    assert plain.state_dict().keys() == hinted.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), hinted.state_dict().values()))
    inputs = plain.example_inputs(batch=batch, position=position)
    with torch.no_grad():
        want, got = plain(*inputs), hinted(*inputs)
    assert len(want) == len(got)
    assert all(torch.equal(w, g) for w, g in zip(want, got))


def test_hint_is_next_layers_router_on_this_layers_hidden_state():
    """Layer i+1's experts receive as hint exactly layer i+1's post-attention norm, router
    and top-k applied to layer i's post-attention hidden state; layer 0 gets none; the
    index they select by is still the layer's own router choice."""
    plain, hinted = _models()
    inputs = plain.example_inputs(batch=4, position=2)
    chosen, predicted = reference_routing(plain, inputs)
    seen = _hints_seen(hinted, inputs)
    assert len(seen) == len(chosen)
    for layer, ((idx, hint), want_idx, want_hint) in enumerate(zip(seen, chosen, predicted)):
        assert torch.equal(idx, want_idx.reshape(-1)), layer
        if want_hint is None:
            assert hint is None
        else:
            assert torch.equal(hint, want_hint), layer


def test_only_the_prefetch_model_carries_select_rows():
    """Default off: the plain capture selects expert rows with index_select only; with the
    option, every layer but the first selects both weights with select_rows."""
    plain, hinted = _models()
    inputs = plain.example_inputs()
    L = plain.config.num_hidden_layers

    def count(model, target):
        prog = wb.capture(model, inputs)
        return sum(1 for n in prog.graph.nodes if n.op == "call_function" and n.target is target)

    assert count(plain, SELECT_ROWS) == 0
    assert count(hinted, SELECT_ROWS) == 2 * (L - 1)
    assert count(hinted, torch.ops.aten.index_select.default) == 2  # layer 0: no hint


def test_expert_prefetch_must_be_a_bool():
    """A non-bool option is a clear error naming the valid values."""
    with pytest.raises(TypeError, match="True or False"):
        QwenMoEDecoder(MoEConfig.tiny(), expert_prefetch="yes")


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 12),
    picks=st.lists(st.integers(0, 11), min_size=1, max_size=6),
    hints=st.lists(st.integers(0, 11), min_size=1, max_size=6),
    as_int32=st.booleans(),
)
def test_select_rows_is_index_select_whatever_the_hint(rows, picks, hints, as_int32):
    """select_rows(x, index, hint) equals index_select(x, 0, index) for any hint (right,
    wrong or partly right), in int64 and int32."""
    picks = [p % rows for p in picks]
    hints = [h % rows for h in hints]
    x = torch.randn(rows, 3, 2, generator=torch.Generator().manual_seed(rows))
    dtype = torch.int32 if as_int32 else torch.int64
    index, hint = torch.tensor(picks, dtype=dtype), torch.tensor(hints, dtype=dtype)
    got = torch.ops.workbench.select_rows(x, index, hint)
    assert torch.equal(got, torch.index_select(x, 0, index.long()))


def test_select_rows_keeps_the_index_shape():
    """A (B, k) index gives (B, k, *row), as gather_h2d_copy does."""
    x = torch.randn(8, 5)
    index = torch.tensor([[1, 2], [7, 0]])
    got = torch.ops.workbench.select_rows(x, index, torch.tensor([[1, 2]]))
    assert got.shape == (2, 2, 5) and torch.equal(got, x[index])


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(
    "hint,error,message",
    [
        (torch.tensor([1.0, 2.0]), TypeError, r"hint must hold integer row ids \(torch.int64 or torch.int32\), got torch.float32"),
        (torch.tensor(3), ValueError, r"hint must have 1 or 2 dimensions .* got shape \(\)"),
        (torch.zeros(1, 2, 2, dtype=torch.long), ValueError, r"hint must have 1 or 2 dimensions"),
        (torch.zeros(0, dtype=torch.long), ValueError, r"hint must hold at least one row id"),
    ],
)
def test_select_rows_rejects_bad_hints(device, hint, error, message):
    """A hint of the wrong dtype or shape is rejected with what was wrong and what is
    valid, in eager mode and under shape propagation (meta tensors) alike."""
    x = torch.randn(8, 4, device=device)
    index = torch.tensor([1, 2], device=device)
    with pytest.raises(error, match=message):
        torch.ops.workbench.select_rows(x, index, hint.to(device))


def test_select_rows_rejects_a_float_index():
    """The index, too, must be integer row ids."""
    with pytest.raises(TypeError, match="index must hold integer row ids"):
        torch.ops.workbench.select_rows(torch.randn(4, 2), torch.tensor([1.0]), torch.tensor([1]))


def test_reuse_copy_takes_hits_from_cached_and_misses_from_x():
    """gather_h2d_reuse_copy reads a row whose id is in cached_index from cached (proved
    by a cached buffer that differs from x) and every other row from x."""
    x = torch.arange(10 * 3, dtype=torch.float32).reshape(10, 3)
    cached_index = torch.tensor([[4, 7]])
    cached = x[cached_index] + 1000.0  # (1, 2, 3): marked, so a row read from it shows
    index = torch.tensor([7, 1, 4, 4, 9])
    got = torch.ops.workbench.gather_h2d_reuse_copy(x, index, cached, cached_index, "cpu", "cuda:0")
    want = x[index].clone()
    hit = torch.tensor([True, False, True, True, False])
    want[hit] += 1000.0
    assert torch.equal(got, want)
    # and with an honest prefetch the value is exactly x[index]
    honest = torch.ops.workbench.gather_h2d_reuse_copy(x, index, x[cached_index], cached_index, "cpu", "cuda:0")
    assert torch.equal(honest, x[index])


def test_reuse_sources_finds_first_slot():
    """reuse_sources marks the ids present in the pool and points at their first slot."""
    hit, position = reuse_sources(torch.tensor([5, 2, 9, 2]), torch.tensor([[2, 5], [2, 8]]))
    assert hit.tolist() == [True, True, False, True]
    assert position[hit].tolist() == [1, 0, 0]


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_reuse_copy_rejects_a_cached_buffer_that_does_not_match(device):
    """cached must be the rows x[cached_index]: shape cached_index.shape + a row of x and
    x's dtype; anything else is an error giving both shapes."""
    x = torch.randn(8, 4, device=device)
    index, cached_index = torch.tensor([1, 2], device=device), torch.tensor([3, 1], device=device)
    op = torch.ops.workbench.gather_h2d_reuse_copy
    with pytest.raises(ValueError, match=r"cached must hold the rows x\[cached_index\], shape \(2, 4\)"):
        op(x, index, torch.zeros(3, 4, device=device), cached_index, "cpu", "cuda:0")
    with pytest.raises(ValueError, match="dtype torch.float32"):
        op(x, index, torch.zeros(2, 4, dtype=torch.float64, device=device), cached_index, "cpu", "cuda:0")
    with pytest.raises(TypeError, match="cached_index must hold integer row ids"):
        op(x, index, torch.zeros(2, 4, device=device), cached_index.float(), "cpu", "cuda:0")


def test_reuse_copy_is_a_copy_op():
    """The reuse copy is an h2d copy node (views, schedule and executor treat it as one);
    select_rows is compute."""
    from workbench.copy_ops import KIND_FOR_OP

    assert KIND_FOR_OP[GATHER_REUSE] == "h2d" and SELECT_ROWS not in KIND_FOR_OP
