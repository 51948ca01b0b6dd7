"""Qwen4-Exp's token indexer in the workbench's static form (``workbench.hf.token_indexer``):
the mask it selects equals transformers' Python loop on random, causal and padded masks,
in prefill and decode, ties included; a static cache carries the indexer's positions at a
fixed shape, so a long captured decode equals transformers' own prefill of the tokens."""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("transformers")

from workbench import hf  # noqa: E402
from workbench.hf import token_indexer  # noqa: E402
from workbench.moe.decode import decode  # noqa: E402
from workbench.planning.memory_plan import plan as make_plan  # noqa: E402
from workbench.moe.strategies import all_on_device  # noqa: E402

#: (batch, new tokens, keys already cached): prefill, decode, a chunk, and contexts too
#: short for a complete block.
SHAPES = ((2, 12, 0), (3, 5, 0), (1, 1, 9), (2, 1, 20), (2, 3, 6), (1, 1, 0), (2, 1, 1))
MASKS = ("causal", "padded", "random", "float")


@functools.lru_cache(maxsize=None)
def qwen4_model():
    return hf.tiny_family_model("qwen4_exp_text")


def _indexer(model):
    return next(m for m in model.modules() if type(m).__name__ == "Qwen4ExpTextQSAIndexer")


class _CachedKeys:
    """The indexer's keys of earlier tokens, as a cache's ``update_indexer`` returns them."""

    def __init__(self, earlier: torch.Tensor) -> None:
        self.earlier = earlier

    def update_indexer(self, keys: torch.Tensor, layer_idx: int) -> torch.Tensor:
        return torch.cat([self.earlier, keys], dim=1)


def _case(model, seed: int, batch: int, tokens: int, past: int, mask: str):
    """Seeded indexer inputs: hidden states, every key's rotary, a visible mask, the cache."""
    gen = torch.Generator().manual_seed(seed)
    keys = past + tokens
    hidden = torch.randn(batch, tokens, model.config.hidden_size, generator=gen)
    positions = torch.arange(keys).view(1, 1, keys).expand(3, batch, keys)
    rotary = model.model.rotary_emb(hidden, positions)
    if mask == "random":
        visible = torch.rand(batch, 1, tokens, keys, generator=gen) < 0.6
    else:
        causal = torch.arange(keys).view(1, keys) <= (past + torch.arange(tokens)).view(tokens, 1)
        visible = causal.expand(batch, 1, tokens, keys).clone()
        if mask == "padded":  # left padding of a seeded length per row
            for row in range(batch):
                visible[row, ..., : int(torch.randint(keys, (1,), generator=gen))] = False
    given = torch.where(visible, 0.0, torch.finfo(torch.float32).min) if mask == "float" else visible
    cache = _CachedKeys(torch.randn(batch, past, model.config.indexer_head_dim, generator=gen)) if past else None
    return hidden, rotary, given, cache, visible


def _masks(indexer, inputs):
    hidden, rotary, given, cache, _ = inputs
    with torch.no_grad():
        return indexer(hidden, rotary, given, cache), token_indexer.static_indexer_forward(indexer, hidden, rotary, given, cache)


@pytest.mark.slow
def test_static_indexer_equals_eager_indexer(monkeypatch):
    """Over seeds, shapes (prefill, decode, a chunk, contexts with no complete block) and
    masks (causal, left-padded, random, and the float form), the static indexer's mask is
    transformers' loop's. The cases reach every part: a query keeping fewer keys than it
    sees, one that completes no block; and exact ties at the budget's boundary (ReLU
    zeros), which one ``topk`` over a fixed number of blocks breaks otherwise (rule 2's
    fallback differs from transformers on some case). Equal here on every case; as the
    two compute the block scores with matmuls of different shapes, a BLAS that rounds
    them differently may reorder two blocks whose scores tie but for rounding, so a few
    cases (at most 1%) may keep other blocks — never another number of keys."""
    model = qwen4_model()
    indexer = _indexer(model)
    unequal, dropped, blockless, fallback_unequal = [], 0, 0, 0
    cases = [(seed, *shape, mask) for seed in range(24) for shape in SHAPES for mask in MASKS]
    for case in cases:
        inputs = _case(model, *case)
        want, got = _masks(indexer, inputs)
        assert got.shape == want.shape and got.dtype == torch.bool, case
        if not torch.equal(got, want):
            unequal.append(case)
            assert torch.equal(got.sum(-1), want.sum(-1)), case  # the same number of keys per query
        visible = inputs[-1]
        dropped += int((want.sum(-1) < visible.sum(-1)).any())
        blockless += int((visible.sum(-1) < indexer.compress_ratio).any())
        with monkeypatch.context() as patch:
            patch.setattr(token_indexer, "EXACT_TOPKS", -1)
            fallback_unequal += not torch.equal(_masks(indexer, inputs)[1], want)
    assert len(unequal) <= len(cases) // 100, unequal[:5]
    assert dropped and blockless and fallback_unequal, (dropped, blockless, fallback_unequal)


def test_static_indexers_are_removed_after_capture():
    """The static form is set on the indexer instances only inside ``static_indexers``:
    on leaving it (also by an error) no instance keeps a ``forward`` of its own, and the
    model's next eager call gives the logits it gave before."""
    model = qwen4_model()
    ids = torch.tensor([[3, 7, 1, 9, 4, 4, 2, 8, 5, 6]])
    with torch.no_grad():
        before = model(ids, use_cache=False).logits
    with pytest.raises(RuntimeError, match="inside"):
        with token_indexer.static_indexers(model) as paths:
            assert paths and all("forward" in vars(model.get_submodule(p)) for p in paths)
            raise RuntimeError("inside")
    assert not [name for name, m in model.named_modules() if "forward" in vars(m)]
    with torch.no_grad():
        assert torch.equal(model(ids, use_cache=False).logits, before)


@pytest.mark.slow
def test_long_static_decode_equals_transformers_prefill():
    """A static decode step captured once and run for 12 tokens — past the point where the
    indexer keeps fewer keys than the query sees, so the blocks' rotary positions (read from
    the fixed-shape positions the step carries) decide the selection — equals at every
    step the captured step run eagerly, and transformers' own prefill of the same tokens
    (no workbench cache form involved) within float rounding."""
    model = qwen4_model()
    step = hf.capture_decode(model, "static", past=2, max_cache_len=12)
    assert any(name.endswith("indexer_positions") for name in step.state_names)
    result = decode(make_plan(all_on_device().apply(step.program), "greedy"), 12, first_token=5, reference=step.module)
    assert all(result.matches_eager)
    masks = []
    hook = _indexer(model).register_forward_hook(lambda module, args, out: masks.append(out))
    try:
        with torch.no_grad():
            want = model(torch.tensor([result.tokens]), use_cache=False).logits[0]
    finally:
        hook.remove()
    got = torch.stack([r.outputs[0].reshape(-1) for r in result.steps])
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), float((got - want).abs().max())
    kept = masks[0][0, 0].sum(-1)
    assert (kept < torch.arange(1, 13)).any(), kept  # the selection mattered


def test_static_cache_positions_are_a_fixed_state_and_ratio_one_is_refused():
    """A static cache's indexer positions become one state of ``max_cache_len`` slots, the
    prefilled positions first, on a copy (the given cache keeps its own); an indexer whose
    blocks are single tokens, where each step would read its own token's positions before
    the step stores them, is refused with an HFError."""
    model = qwen4_model()
    cache = hf.prefill_cache(model, "static", past=3, max_cache_len=6)
    layer = next(layer for layer in cache.layers if isinstance(vars(layer).get("indexer_position_ids"), torch.Tensor))
    held = layer.indexer_position_ids
    fixed = token_indexer.fixed_positions(cache, model)
    [moved] = [slot for slot in hf.cache_slots(fixed) if "indexer_position" in slot.name]
    assert moved.name.endswith("indexer_positions")
    state = moved.get(fixed)
    assert state.shape == (*held.shape[:-1], 6) and torch.equal(state[..., :3], held)
    assert layer.indexer_position_ids is held and type(layer) is not type(fixed.layers[cache.layers.index(layer)])
    single = hf.tiny_family_model("qwen4_exp_text", indexer_compress_ratio=1)
    with pytest.raises(hf.HFError, match="blocks of 1 token"):
        hf.capture_decode(single, "static", past=2, max_cache_len=4)
