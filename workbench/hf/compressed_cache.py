"""A static cache for compressed-attention layers (DeepSeek-V4), which transformers keeps
in dynamic form only: fixed-shape states, so one captured decode step serves every
position, as a static cache's does.

A compressed-attention layer keeps a sliding window of keys (= values) and, per compressor
(``compressor``; sparse layers also ``indexer``), the tokens of the window not yet closed
(``buffer_kv``/``buffer_gate``), one compressed entry per closed window of ``compress_rate``
tokens (``compressed_kv``) and, sparse layers, the last closed window's first half
(``overlap_kv``/``overlap_gate``). transformers grows them by concatenation, so their
shapes change with the position.

Rules:
1. ``static_compressed_cache(dynamic, max_cache_len)`` turns a filled dynamic cache of such
   layers into ``StaticCompressedLayer``s (``layer_class()``): the sliding window as a static sliding layer of
   ``max_cache_len`` positions; each buffer ``compress_rate`` slots (the token at position
   ``p`` in slot ``p % compress_rate``); ``max_cache_len // compress_rate`` compressed
   entries; the overlap as is (zeros before the first window closes). The dynamic cache is
   not modified.
2. One token per step: the layer hands the compressor every step the whole buffer as one
   window, starting at position ``(p // rate) * rate`` (a tensor: no Python counter), and
   keeps the entry the compressor makes only when the step closes the window
   (``(p + 1) % rate == 0``), in entry ``p // rate``; the overlap likewise. Before the
   first window closes the overlap it hands back has gate ``-inf`` (softmax weight 0),
   as transformers' empty overlap does. So a step from all-zero states at position 0 is
   the model's first step. Unwritten entries stay attended by nothing: the sparse layers'
   indexer masks entries past the query's closed windows.
3. Refused (``HFError``, saying what is valid): more than one token at a time, a
   ``max_cache_len`` over the sliding window (the window would roll, which transformers'
   static sliding layer counts in Python), and a heavily-compressed (non-sparse) layer
   that could close a window within ``max_cache_len``: its compressor gives one token no
   mask over the entries, so an entry not yet written would be attended.
4. Every method is functional (new tensors, never written in place) except the sliding
   window's, which transformers writes in place (``cache`` rule 3 clones it).

The layer class (``layer_class()``) subclasses transformers' static sliding layer; it is
defined on first use, so importing this module does not import transformers.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .configs import HFError

__all__ = ["is_compressed_kind", "layer_class", "static_compressed_cache"]

#: The per-compressor state dicts of a compressed-attention layer (rule 1).
BUFFERS = ("buffer_kv", "buffer_gate")
OVERLAPS = ("overlap_kv", "overlap_gate")


def is_compressed_kind(layer_class: Any) -> bool:
    """Whether transformers' dynamic layer class for a layer kind is a compressed-attention one."""
    return callable(getattr(layer_class, "store_compression_weights", None)) and callable(
        getattr(layer_class, "update_compressor_states", None)
    )


@functools.cache
def layer_class() -> type:
    """``StaticCompressedLayer``, defined on first use: it subclasses transformers' static
    sliding layer, and this module imports without transformers."""
    from transformers.cache_utils import StaticSlidingWindowLayer

    class StaticCompressedLayer(StaticSlidingWindowLayer):
        """A compressed-attention layer of fixed shapes (module rules)."""

        def __init__(self, dynamic: Any, max_cache_len: int) -> None:
            super().__init__(max_cache_len=max_cache_len, sliding_window=dynamic.sliding_window)
            self.compress_rate = int(dynamic.compress_rate)
            self.entries = max_cache_len // self.compress_rate
            self.buffer_kv: dict[str, torch.Tensor] = {}
            self.buffer_gate: dict[str, torch.Tensor] = {}
            self.compressed_kv: dict[str, torch.Tensor] = {}
            self.sparse = hasattr(dynamic, "overlap_kv")
            if self.sparse:
                self.overlap_kv: dict[str, torch.Tensor] = {}
                self.overlap_gate: dict[str, torch.Tensor] = {}

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            _one_token(key_states)
            return super().update(key_states, value_states, *args, **kwargs)

        def get_seq_length(self) -> Any:
            """The position counter as a tensor (transformers' static sliding layer gives its
            Python count, which the model would bake in as the new token's position)."""
            return self.cumulative_length

        def _position(self) -> torch.Tensor:
            """The new token's position: the sliding window has counted it already (it is
            updated before the compressors run)."""
            return self.cumulative_length - 1

        def _closes(self) -> torch.Tensor:
            return (self._position() + 1) % self.compress_rate == 0

        def store_compression_weights(self, name: str, kv: torch.Tensor, gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Rule 2: the buffer with the new token in its slot, as one window, and the window's first position."""
            _one_token(kv)
            position = self._position()
            slot = (torch.arange(self.compress_rate, device=kv.device) == position % self.compress_rate).view(1, -1, 1)
            self.buffer_kv[name] = torch.where(slot, kv, self.buffer_kv[name])
            self.buffer_gate[name] = torch.where(slot, gate, self.buffer_gate[name])
            first = torch.div(position, self.compress_rate, rounding_mode="floor") * self.compress_rate
            return self.buffer_kv[name], self.buffer_gate[name], first

        def update_compressor_states(self, name: str, compressed: torch.Tensor) -> torch.Tensor:
            """Rule 2: the entry is kept, in its place, only when this step closes its window."""
            entry = torch.div(self._position(), self.compress_rate, rounding_mode="floor")
            at = (torch.arange(self.entries, device=compressed.device) == entry) & self._closes()
            self.compressed_kv[name] = torch.where(at.view(1, -1, 1), compressed, self.compressed_kv[name])
            return self.compressed_kv[name]

        def update_overlap_state(self, name: str, chunk_kv: torch.Tensor, chunk_gate: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
            """Rule 2: the last closed window's first half (gate ``-inf`` before any closed),
            replaced by this window's when this step closes it."""
            closes = self._closes()
            seen = self._position() >= self.compress_rate
            prior_kv = torch.where(seen, self.overlap_kv[name], torch.zeros_like(self.overlap_kv[name]))
            prior_gate = torch.where(seen, self.overlap_gate[name], torch.full_like(self.overlap_gate[name], float("-inf")))
            self.overlap_kv[name] = torch.where(closes, chunk_kv[:, -1, :, :head_dim], self.overlap_kv[name])
            self.overlap_gate[name] = torch.where(closes, chunk_gate[:, -1, :, :head_dim], self.overlap_gate[name])
            return prior_kv, prior_gate

    return StaticCompressedLayer


def _one_token(states: torch.Tensor) -> None:
    tokens = states.shape[-2] if states.dim() == 4 else states.shape[1]
    if tokens != 1:
        raise HFError(
            f"a static compressed-attention cache takes one token per step, got {tokens}; fill it from a dynamic "
            "cache (static_compressed_cache) and decode one token at a time"
        )


def static_compressed_cache(dynamic: Any, max_cache_len: int) -> Any:
    """Rule 1: a static cache holding what the filled dynamic cache ``dynamic`` holds."""
    from transformers.cache_utils import Cache

    layers: list[Any] = []
    for i, layer in enumerate(dynamic.layers):
        if not is_compressed_kind(type(layer)):
            raise HFError(f"cache layer {i} ({type(layer).__name__}) is not a compressed-attention layer")
        layers.append(_static_layer(i, layer, max_cache_len))
    return Cache(layers=layers)


def _static_layer(i: int, dynamic: Any, max_cache_len: int) -> Any:
    """Rules 1 and 3 for one layer."""
    past = int(dynamic.get_seq_length())
    if max_cache_len > dynamic.sliding_window:
        raise HFError(
            f"max_cache_len={max_cache_len} is over the compressed-attention layers' sliding window "
            f"({dynamic.sliding_window}); a static cache of these layers holds at most the window"
        )
    layer = layer_class()(dynamic, max_cache_len)
    if not layer.sparse and layer.entries:
        raise HFError(
            f"cache layer {i} ({type(dynamic).__name__}) compresses every {layer.compress_rate} tokens without an "
            f"indexer, and its compressor gives a single token no mask over the compressed entries, so with "
            f"max_cache_len={max_cache_len} a step would attend to entries not yet written; a static cache of it "
            f"holds fewer than {layer.compress_rate} positions (or decode with cache='dynamic')"
        )
    keys = dynamic.keys  # K = V: the last min(past, window - 1) tokens, all of them here (rule 3)
    layer.lazy_initialization(keys, keys)
    layer.keys = layer.keys.clone()
    layer.values = layer.values.clone()
    layer.keys[:, :, :past] = keys[:, :, keys.shape[2] - past :]
    layer.values[:, :, :past] = layer.keys[:, :, :past]
    layer.cumulative_length = torch.tensor(past, dtype=torch.long, device=keys.device)
    layer.cumulative_length_int = past
    rate = layer.compress_rate
    for name, held in dynamic.buffer_kv.items():
        if held is None:
            raise HFError(f"cache layer {i} has no buffer for {name!r}: fill the dynamic cache with a prefill first")
        batch, width = held.shape[0], held.shape[-1]
        for attribute in BUFFERS:
            source = getattr(dynamic, attribute)[name]
            static = source.new_zeros((batch, rate, width))
            static[:, : source.shape[1]] = source
            getattr(layer, attribute)[name] = static
        entries = dynamic.compressed_kv[name]
        width = entries.shape[-1]
        static = entries.new_zeros((batch, layer.entries, width))
        static[:, : entries.shape[1]] = entries
        layer.compressed_kv[name] = static
        if layer.sparse:
            half = held.shape[-1] // 2
            for attribute in OVERLAPS:
                source = getattr(dynamic, attribute)[name]
                getattr(layer, attribute)[name] = source.clone() if source is not None else held.new_zeros((batch, rate, half))
    return layer
