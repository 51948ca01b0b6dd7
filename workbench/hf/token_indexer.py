"""A static, exportable form of Qwen4-Exp's token indexer, used while a step is captured,
and the static cache layer that keeps its positions at a fixed shape.

transformers' ``Qwen4ExpTextQSAIndexer`` picks, per batch row and query, which keys the
attention may read: it loops in Python over rows and queries, takes ``torch.nonzero`` of
the visible mask, groups the visible tokens into blocks of ``compress_ratio``, scores each
complete block (mean-pooled keys, ``k_layernorm``, rotary at the block's first token,
summed ReLU of the heads' dot products) and keeps the top ``min(block_topk, blocks)``
blocks plus the incomplete block's tokens. torch.export cannot capture the loop (its
sizes depend on the mask's values). ``static_indexers(model)`` gives the indexer
instances, for as long as it is entered, ``static_indexer_forward``: the same selection
vectorised over rows and queries with shapes fixed by the key length ``K``.

Rules:
1. A visible token's rank among the visible ones is a cumulative sum; its block is
   ``rank // ratio``; a query's complete blocks are ``visible // ratio``, at most
   ``M = K // ratio``. Block ``j``'s tokens are the visible tokens of ranks
   ``j * ratio ...``: their keys are gathered as ``(M, ratio)`` and pooled, normed and
   rotated by the same ops as transformers' (so the same values); blocks past a query's
   complete ones are computed on placeholder tokens and never selected.
2. The top blocks equal ``torch.topk``'s exactly, ties included: ``topk`` breaks ties by
   an order that depends on the row's length, so for each possible count ``n`` of
   complete blocks over ``block_topk`` the top ``block_topk`` of the first ``n`` scores
   are taken (the row transformers ranks) and kept where the query has ``n`` blocks;
   with ``n <= block_topk`` every complete block is kept, as ``topk(n)`` keeps all. That
   is ``M - block_topk`` ``topk``s; over ``EXACT_TOPKS`` of them one ``topk`` of a fixed
   ``min(block_topk, M)`` over scores with ``-inf`` past the complete blocks is taken
   instead (its ``-inf`` picks dropped), equal but for which of equal scores at the
   boundary is kept.
3. The output is transformers' ``(B, 1, T, K)`` boolean mask: the visible tokens of the
   kept blocks and of the incomplete block.
4. The model is left as it was: only the instances' ``forward`` is set, and deleted on
   exit (also when the capture fails).
5. transformers keeps the indexer's positions (``indexer_position_ids``, ``(3, B, seen)``)
   on the first indexed cache layer and grows them by concatenation, also in a static
   cache. ``fixed_positions(cache)`` gives a static cache whose such layer is a
   ``StaticIndexedPositionsLayer`` (``positions_layer_class()``): the positions live in
   ``indexer_positions``, ``(3, B, max_cache_len)``, slot ``p`` holding position ``p``'s;
   the model reads the whole buffer (so the rotary of every key slot is there and the
   query's is last, as the indexer reads them) and what it stores back is written, new
   tensor, at the layer's position. The positions of the token being decoded are in the
   buffer only after the step, so the indexer must not read its slot: it reads only the
   first token of a complete block, never the newest token when ``ratio >= 2``; a
   ratio of 1 is refused. The given cache is not modified.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import sys
import types
from typing import Any, Callable, Iterator, Optional

import torch

from .configs import HFError

__all__ = [
    "EXACT_TOPKS", "INDEXER_CLASSES", "fixed_positions", "positions_layer_class", "selection_mask", "static_indexer_forward",
    "static_indexers",
]

#: Rule 2: the most ``topk``s one exact selection takes.
EXACT_TOPKS = 256
#: Classes (module, qualified name) whose instances get ``static_indexer_forward``.
INDEXER_CLASSES = frozenset({("transformers.models.qwen4_exp.modeling_qwen4_exp", "Qwen4ExpTextQSAIndexer")})


def selection_mask(
    q: torch.Tensor,
    keys: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    visible: torch.Tensor,
    *,
    ratio: int,
    block_topk: int,
    norm: Callable[[torch.Tensor], torch.Tensor],
    rotary: Callable[..., torch.Tensor],
) -> torch.Tensor:
    """Rules 1-3: ``(B, 1, T, K)`` keys selected for queries ``q`` ``(B, T, H, D)`` (normed
    and rotated) among ``keys`` ``(B, K, D)``, ``visible`` ``(B, 1, T, K)`` bool; ``cos``
    and ``sin`` ``(B, P, rotary dims)`` of every key slot; ``norm`` and ``rotary`` are the
    indexer's ``k_layernorm`` and its module's ``apply_rotary_pos_emb``."""
    batch, length, _, width = q.shape
    slots = visible.shape[-1]
    seen = visible[:, 0].expand(batch, length, slots)
    rank = seen.long().cumsum(-1) - 1
    complete = seen.sum(-1) // ratio  # (B, T)
    most = slots // ratio
    if most == 0:  # no query can complete a block: every visible token is the incomplete block's
        return seen.unsqueeze(1)
    where = torch.where(seen, rank, torch.full_like(rank, slots))  # invisible tokens go to a dropped slot
    order = torch.arange(slots, device=q.device).expand(batch, length, slots)
    token_of_rank = torch.zeros(batch, length, slots + 1, dtype=torch.long, device=q.device).scatter(-1, where, order)
    members = token_of_rank[..., : most * ratio].reshape(batch, length, most, ratio)
    rows = torch.arange(batch, device=q.device)
    pooled = keys[rows.view(batch, 1, 1, 1), members].float().mean(dim=-2).to(keys.dtype)
    pooled = norm(pooled)
    starts = members[..., 0]
    block_keys = rotary(
        pooled.unsqueeze(-2), cos=cos[rows.view(batch, 1, 1), starts], sin=sin[rows.view(batch, 1, 1), starts], unsqueeze_dim=-2
    ).squeeze(-2)
    scores = torch.matmul(q.float(), block_keys.float().transpose(-1, -2)).transpose(-1, -2)  # (B, T, M, H)
    scores = torch.relu(scores).sum(dim=-1) / math.sqrt(width)
    valid = torch.arange(most, device=q.device) < complete.unsqueeze(-1)
    kept = _top_blocks(scores, valid, complete, block_topk)
    block = torch.div(rank, ratio, rounding_mode="floor").clamp(0, most - 1)
    tail = rank >= (complete * ratio).unsqueeze(-1)
    return (seen & (tail | kept.gather(-1, block))).unsqueeze(1)


def _top_blocks(scores: torch.Tensor, valid: torch.Tensor, complete: torch.Tensor, block_topk: int) -> torch.Tensor:
    """Rule 2: ``(B, T, M)`` whether each block is kept."""
    most = scores.shape[-1]
    if most - block_topk > EXACT_TOPKS:
        picks = scores.masked_fill(~valid, float("-inf")).topk(min(block_topk, most), dim=-1)
        at = torch.where(picks.values > float("-inf"), picks.indices, torch.full_like(picks.indices, most))
        return valid.new_zeros((*valid.shape[:-1], most + 1)).scatter(-1, at, True)[..., :most]
    kept = valid
    for count in range(block_topk + 1, most + 1):
        top = scores[..., :count].topk(block_topk, dim=-1).indices
        picked = torch.zeros_like(valid).scatter(-1, top, True)
        kept = torch.where((complete == count).unsqueeze(-1), picked, kept)
    return kept


def static_indexer_forward(
    self: Any,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor,
    cache: Optional[Any] = None,
) -> torch.Tensor:
    """``Qwen4ExpTextQSAIndexer.forward`` with the selection of ``selection_mask``: the
    projections, norms, rotary and cache update are transformers' own, in its order."""
    rotary = sys.modules[type(self).__module__].apply_rotary_pos_emb
    batch, length, _ = hidden_states.shape
    shape = (batch, length, -1, self.index_head_dim)
    full_cos, full_sin = position_embeddings
    q, token_k = torch.split(
        self.index_qk_proj(hidden_states),
        [self.index_n_heads * self.index_head_dim, self.index_kv_heads * self.index_head_dim],
        dim=-1,
    )
    q, keys = q.reshape(*shape), token_k.reshape(*shape).squeeze(2)
    q = rotary(self.q_layernorm(q), cos=full_cos[:, -length:, :], sin=full_sin[:, -length:, :], unsqueeze_dim=2)
    if cache is not None:
        keys = cache.update_indexer(keys, self.layer_idx)
    visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    return selection_mask(
        q, keys, full_cos, full_sin, visible, ratio=self.compress_ratio, block_topk=self.block_topk,
        norm=self.k_layernorm, rotary=rotary,
    )


@contextlib.contextmanager
def static_indexers(model: torch.nn.Module) -> Iterator[tuple[str, ...]]:
    """Rule 4: within the block, every indexer of ``model`` of a class in
    ``INDEXER_CLASSES`` runs ``static_indexer_forward``; yields their paths."""
    patched: list[torch.nn.Module] = []
    paths = []
    try:
        for path, module in model.named_modules():
            if (type(module).__module__, type(module).__qualname__) in INDEXER_CLASSES:
                object.__setattr__(module, "forward", types.MethodType(static_indexer_forward, module))
                patched.append(module)
                paths.append(path)
        yield tuple(paths)
    finally:
        for module in patched:
            object.__delattr__(module, "forward")


@functools.cache
def positions_layer_class() -> type:
    """``StaticIndexedPositionsLayer`` (rule 5), defined on first use: it subclasses
    transformers' static indexed layer, and this module imports without transformers."""
    from transformers.cache_utils import StaticIndexedLayer

    class StaticIndexedPositionsLayer(StaticIndexedLayer):
        """A static indexed layer whose indexer positions have a fixed shape (rule 5)."""

        indexer_positions: Optional[torch.Tensor] = None  # (3, B, max_cache_len)

        @property
        def indexer_position_ids(self) -> Optional[torch.Tensor]:
            """The whole buffer: every key slot's positions (the newest token's slot not yet)."""
            return self.indexer_positions

        @indexer_position_ids.setter
        def indexer_position_ids(self, value: Optional[torch.Tensor]) -> None:
            """The model stores the buffer followed by the new tokens' positions: those are
            written at the layer's position (a reset stores None, which empties it)."""
            if value is None:
                self.indexer_positions = None
                return
            held = self.indexer_positions
            new = value if held is None else value[..., held.shape[-1] :]
            if held is None:
                held = value.new_zeros((*value.shape[:-1], self.max_cache_len))
            at = torch.arange(new.shape[-1], device=new.device) + self.cumulative_length.to(new.device)
            self.indexer_positions = held.index_copy(-1, at, new)

    return StaticIndexedPositionsLayer


def fixed_positions(cache: Any, model: torch.nn.Module) -> Any:
    """Rule 5: ``cache``, or a copy whose static indexed layers holding positions are
    ``StaticIndexedPositionsLayer``s (the cache and its layers are not modified); an
    ``HFError`` when ``model``'s indexer has a ratio of 1."""
    from transformers.cache_utils import StaticIndexedLayer

    layers = getattr(cache, "layers", None)
    if not layers or not any(_grows_positions(layer, StaticIndexedLayer) for layer in layers):
        return cache
    _check_ratio(model)
    fixed = copy.copy(cache)
    fixed.layers = [_positions_layer(i, layer) if _grows_positions(layer, StaticIndexedLayer) else layer for i, layer in enumerate(layers)]
    return fixed


def _grows_positions(layer: Any, static_indexed: type) -> bool:
    return isinstance(layer, static_indexed) and not isinstance(layer, positions_layer_class()) and isinstance(
        vars(layer).get("indexer_position_ids"), torch.Tensor
    )


def _positions_layer(i: int, layer: Any) -> Any:
    """Rule 5 for one layer: its state, the positions moved to a fixed buffer."""
    held = vars(layer)
    positions = held["indexer_position_ids"]
    seen = positions.shape[-1]
    if seen > layer.max_cache_len:
        raise HFError(f"cache layer {i} holds the positions of {seen} tokens, over its max_cache_len={layer.max_cache_len}")
    fixed: Any = object.__new__(positions_layer_class())
    fixed.__dict__.update({key: value for key, value in held.items() if key != "indexer_position_ids"})
    buffer = positions.new_zeros((*positions.shape[:-1], layer.max_cache_len))
    buffer[..., :seen] = positions
    fixed.indexer_positions = buffer
    return fixed


def _check_ratio(model: torch.nn.Module) -> None:
    """Rule 5: a ratio of 1 makes the newest token a block's first, whose positions a
    static cache holds only after the step."""
    for path, module in model.named_modules():
        if (type(module).__module__, type(module).__qualname__) in INDEXER_CLASSES and module.compress_ratio < 2:
            raise HFError(
                f"{path} groups keys into blocks of {module.compress_ratio} token: each step's own token starts a block, "
                "whose positions a static cache of fixed shape holds only after the step; decode with cache='dynamic'"
            )
