"""DeepSeek-V4's compressed-attention cache (tiny seeded configuration, no network): every
tensor it holds — the sliding keys, each compressor's buffered tokens and gates, its
compressed entries and the sparse layers' window overlap — is a state of the decode step,
the planned step equals transformers' own model on that cache, and the caller's cache is
never written."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from hf_cases import run_on_sim

import workbench as wb
from workbench import hf
from workbench.hf.cache import read_states
from workbench.runtime import stage_inputs, to_host
from workbench.moe.strategies import all_on_device


@functools.lru_cache(maxsize=None)
def v4_model():
    return hf.tiny_family_model("deepseek_v4")


def _snapshot(cache):
    """Every attribute of every layer: dicts by identity and content, tensors cloned."""
    def value(v):
        if isinstance(v, torch.Tensor):
            return v.clone()
        if isinstance(v, dict):
            return (id(v), {k: value(x) for k, x in v.items()})
        return v
    return [(id(layer), {k: value(v) for k, v in vars(layer).items()}) for layer in cache.layers]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and type(b) is torch.Tensor and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _transformers_step(model, cache, token, position, slots):
    """transformers' own decode step on a copy of ``cache``: (logits, *states in slot order)."""
    own = copy.deepcopy(cache)
    with torch.no_grad():
        logits = model(input_ids=token, cache=own, use_cache=True, cache_position=position).logits
    return (logits, *read_states(own, slots))


def _assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = to_host(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("past", [5, 7])
def test_compressed_attention_states_are_carried(past):
    """Every compressed-attention tensor is a state input and output of the dynamic decode
    step; the planned step (on ``sim``) equals transformers' own decode on the caller's cache
    — with the sparse layer's window closing inside the step (past=7) or not (past=5) —
    and equals it again when the states fed in are changed (they are inputs, not constants
    baked in). The caller's cache (its layers, dicts, tensors and counters) is unchanged
    after capture, eager and planned runs, and its next eager call works."""
    model = v4_model()
    cache = hf.prefill_cache(model, "dynamic", past=past)
    before = _snapshot(cache)
    step = hf.capture_decode(model, cache)
    names = set(step.state_names)
    for layer, kind in ((0, "compressor"), (2, "compressor"), (2, "indexer")):
        assert {f"layers.{layer}.buffer_kv.{kind}", f"layers.{layer}.buffer_gate.{kind}", f"layers.{layer}.compressed_kv.{kind}"} <= names
    assert {"layers.2.overlap_kv.compressor", "layers.2.overlap_gate.indexer"} <= names
    assert len(step.program.user_inputs) == 2 + len(step.state_names)

    dg, _result, outputs = run_on_sim(step, all_on_device())
    token, position = step.inputs[:2]
    want = _transformers_step(model, cache, token, position, step.module.slots)
    _assert_close(outputs, want)
    _assert_close(step.eager(), want)

    changed = {"layers.2.buffer_kv.compressor", "layers.2.overlap_kv.compressor", "layers.0.buffer_gate.compressor",
               "layers.2.compressed_kv.compressor"}
    gen = torch.Generator().manual_seed(1)
    inputs = [token, position] + [t + torch.randn(t.shape, generator=gen) if name in changed else t
                                  for name, t in zip(step.state_names, step.inputs[2:])]
    other = copy.deepcopy(cache)
    for slot, tensor in zip(step.module.slots, inputs[2:]):
        slot.set(other, tensor)
    memory = wb.plan(dg, "greedy")
    result = wb.run(memory, *stage_inputs(dg, tuple(inputs), "sim"), backend="sim")
    want_other = _transformers_step(model, other, token, position, step.module.slots)
    _assert_close(result.outputs, want_other)
    assert not torch.allclose(want_other[0], want[0], atol=1e-3)  # the compressed entries are attended
    moved = dict(zip(step.state_names, want_other[1:]))["layers.2.buffer_kv.compressor"]
    assert not torch.allclose(moved, dict(zip(step.state_names, want[1:]))["layers.2.buffer_kv.compressor"]) or moved.shape[1] == 0

    assert _same(_snapshot(cache), before)
    with torch.no_grad():
        logits = model(input_ids=token, cache=cache, use_cache=True, cache_position=position).logits
    assert type(logits) is torch.Tensor and torch.allclose(logits, want[0], atol=1e-5)


def test_state_the_step_would_create_is_refused():
    """A sparse layer's window overlap exists only once a window has closed: a cache of 3
    tokens (compress rate 4) holds none, the step closes the first window and would set
    it, and no input could carry it — an HFError naming those states and a larger past,
    not torch's text; the caller's cache is unchanged."""
    model = v4_model()
    cache = hf.prefill_cache(model, "dynamic", past=3)
    before = _snapshot(cache)
    with pytest.raises(hf.HFError, match=r"layers\.2\.overlap_kv\.compressor.*larger past") as info:
        hf.capture_decode(model, cache)
    assert not isinstance(info.value, wb.CaptureError)
    assert _same(_snapshot(cache), before)


def _transformers_decode(model, tokens):
    """transformers' own logits for ``tokens`` fed one at a time into its dynamic cache."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    out = []
    with torch.no_grad():
        for token in tokens:
            out.append(model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True).logits)
    return out


def test_static_form_decodes_like_transformers_token_by_token():
    """transformers keeps compressed attention dynamic only; the workbench's static form
    makes one captured step serve every position: an 8-token ``wb.decode`` from zero states
    (the sparse layer's 4-token windows closing twice, its overlap carried from the first
    to the second) equals the step run eagerly at every step, and every step's logits equal
    transformers' own dynamic-cache decode of the same tokens. The caller's static cache is
    unchanged by capture."""
    model = v4_model()
    cache = hf.prefill_cache(model, "static", past=4, max_cache_len=8)
    before = _snapshot(cache)
    step = hf.capture_decode(model, cache)
    assert _same(_snapshot(cache), before)
    shapes = dict(zip(step.state_names, (tuple(t.shape) for t in step.inputs[2:])))
    assert shapes["layers.2.compressed_kv.compressor"] == (1, 2, 8) and shapes["layers.2.buffer_kv.indexer"] == (1, 4, 32)
    out = dict(zip(step.state_names, step.eager()[1:]))
    assert all(out[name].shape == shape for name, shape in shapes.items())  # fixed shapes: outputs feed the next step
    memory = wb.plan(all_on_device().apply(step.program), "greedy")
    result = wb.decode(memory, 8, first_token=5, reference=step.module)
    assert result.matches_eager == (True,) * 8
    want = _transformers_decode(model, result.tokens)
    for i, (run, logits) in enumerate(zip(result.steps, want)):
        got = to_host(run.outputs[0])
        assert torch.allclose(got.reshape(logits.shape), logits, atol=1e-5), (i, float((got.reshape(logits.shape) - logits).abs().max()))


def test_static_form_refuses_what_it_cannot_hold():
    """Static compressed caches are refused, saying what is valid: over the sliding
    window; a heavily-compressed layer (no indexer to mask unwritten entries) that could
    close a window within max_cache_len; more than one token per step."""
    model = v4_model()
    window = model.config.sliding_window
    with pytest.raises(hf.HFError, match=rf"max_cache_len={window + 1} is over .* sliding window \({window}\)"):
        hf.prefill_cache(model, "static", past=2, max_cache_len=window + 1)
    config = hf.tiny_family_config("deepseek_v4")
    config.compress_rates = {**config.compress_rates, "heavily_compressed_attention": 8}
    with pytest.raises(hf.HFError, match=r"compresses every 8 tokens without an indexer.*fewer than 8 positions"):
        hf.prefill_cache(hf.load_model(config), "static", past=2, max_cache_len=8)
    cache = hf.prefill_cache(model, "static", past=2, max_cache_len=8)
    with pytest.raises(hf.HFError, match="one token per step, got 2"), torch.no_grad():
        model(input_ids=torch.tensor([[1, 2]]), cache=cache, use_cache=True)
