"""A transformers cache as plain tensors: the states a decode step reads and writes.

Rules:
1. A cache's state, layer by layer, is: ``keys``, ``values`` and (static layers, whose
   position counter is a tensor) ``cumulative_length`` of an attention layer — full or
   sliding window; ``conv_states[i]`` and ``recurrent_states[i]`` of a linear-attention
   layer (Qwen3.5, Qwen3-Next); ``indexer_keys`` (and its counter) of an indexed layer
   (DeepSeek-V3.2), and the indexer's positions where the model keeps them there
   (Qwen4-Exp's ``indexer_position_ids``; ``indexer_positions`` in the workbench's static
   form of them, whose ``indexer_position_ids`` property is no state of its own); ``buffer_kv``, ``buffer_gate`` and ``compressed_kv`` (and, sparse
   layers, ``overlap_kv`` and ``overlap_gate``) of a compressed-attention layer
   (DeepSeek-V4), dicts by compressor name, whose entries are state once the model has
   set them; a hybrid layer has both; and a per-layer list the cache object of a
   model's own cache class holds (``MiniMaxCache.linear_cache``: the linear-attention
   state). Everything else a layer holds
   (Python counters, flags, the sliding window as a tensor) is configuration, copied from
   the template cache at every call: a dynamic cache's step is one position's step (its
   states' shapes are that position's), so its counters (DeepSeek-V4's ``entry_count``,
   the compressed entries emitted so far) are that position's too.
2. A layer holding other tensors (quantized caches) and an offloading cache
   are refused, naming what is supported; so is a step that sets a state the template
   held none of (an empty ``None`` entry the model fills), which no input could carry
   (``check_carried``).
3. ``rebuild`` makes a fresh cache of the template's structure that holds the given
   states and never modifies the template (its lists and dicts, and its layers', are
   copied) or the states: a state transformers updates in
   place (static layers' ``index_copy_``, linear attention's ``copy_``) is cloned first, so
   a captured graph writes the clone and returns it, and no graph input is mutated (the
   executor does not write state back).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from .configs import HFError

__all__ = ["CacheSlot", "cache_slots", "check_carried", "rebuild", "read_states"]

#: Layer attributes that hold state (rule 1), in the order they are flattened.
STATE_ATTRIBUTES = (
    "keys", "values", "cumulative_length", "conv_states", "recurrent_states", "indexer_keys", "indexer_cumulative_length",
    "indexer_position_ids", "indexer_positions",
    "buffer_kv", "buffer_gate", "compressed_kv", "overlap_kv", "overlap_gate",
)
#: Tensors a layer may hold that are configuration, not state (rule 1).
CONSTANT_ATTRIBUTES = frozenset({"_sliding_window_tensor"})


@dataclass(frozen=True)
class CacheSlot:
    """One state tensor of a cache: where it sits in the cache object."""

    layer: int  # index into cache.layers (for a state the cache object holds itself: the list index)
    attribute: str  # one of STATE_ATTRIBUTES, or the cache's own list attribute (``linear_cache``)
    index: Optional[int | str]  # key into the attribute's dict (linear-attention states, compressor names), else None
    in_place: bool  # transformers updates it in place, so rebuild clones it (rule 3)
    on_cache: bool = False  # held by the cache object itself, not by a layer (rule 1)

    @property
    def name(self) -> str:
        """``layers.3.keys``, ``layers.0.conv_states.0``, ``layers.2.compressed_kv.indexer``,
        ``linear_cache.1``: how tables and errors name it."""
        if self.on_cache:
            return f"{self.attribute}.{self.layer}"
        suffix = "" if self.index is None else f".{self.index}"
        return f"layers.{self.layer}.{self.attribute}{suffix}"

    def get(self, cache: Any) -> torch.Tensor:
        if self.on_cache:
            return getattr(cache, self.attribute)[self.layer]
        value = getattr(cache.layers[self.layer], self.attribute)
        return value if self.index is None else value[self.index]

    def set(self, cache: Any, tensor: torch.Tensor) -> None:
        if self.on_cache:
            getattr(cache, self.attribute)[self.layer] = tensor
            return
        layer = cache.layers[self.layer]
        if self.index is None:
            setattr(layer, self.attribute, tensor)
        else:
            getattr(layer, self.attribute)[self.index] = tensor


def cache_slots(cache: Any, in_place: Sequence[str] = ()) -> tuple[CacheSlot, ...]:
    """Rules 1 and 2: every state tensor of ``cache``, in order. ``in_place`` names slots
    to treat as updated in place beyond those transformers' layer types are known to."""
    from transformers.cache_utils import Cache, DynamicLayer, StaticLayer

    if not isinstance(cache, Cache):
        raise HFError(f"expected a transformers Cache (DynamicCache, StaticCache), got {type(cache).__name__}")
    if getattr(cache, "offloading", False):
        raise HFError("an offloading cache moves its tensors between devices itself; build the cache without offloading")
    slots = []
    for i, layer in enumerate(cache.layers):
        _check_layer(i, layer)
        functional_kv = isinstance(layer, DynamicLayer) and not isinstance(layer, StaticLayer)
        for attribute in STATE_ATTRIBUTES:
            if isinstance(getattr(type(layer), attribute, None), property):
                continue  # a view of another state (the fixed indexer positions), not a state of its own
            value = getattr(layer, attribute, None)
            if isinstance(value, torch.Tensor):
                in_place_kv = not (functional_kv and attribute in ("keys", "values"))
                slots.append(CacheSlot(i, attribute, None, in_place_kv))
            elif isinstance(value, dict):
                slots += [CacheSlot(i, attribute, j, True) for j, t in value.items() if isinstance(t, torch.Tensor)]
    slots += _own_states(cache)
    extra = set(in_place)
    return tuple(CacheSlot(s.layer, s.attribute, s.index, s.in_place or s.name in extra, s.on_cache) for s in slots)


def _own_states(cache: Any) -> list[CacheSlot]:
    """Rule 1's last part: per-layer state a cache class of a model's own keeps on the cache
    object (``MiniMaxCache.linear_cache``, a list by layer index); a tensor held there
    otherwise is refused (rule 2)."""
    found = []
    for key, value in vars(cache).items():
        if key == "layers":
            continue
        if isinstance(value, torch.Tensor):
            raise HFError(
                f"the {type(cache).__name__} holds a tensor {key!r} that is not per-layer state; the workbench "
                "carries the state of each layer (attention keys and values, linear-attention states)"
            )
        if isinstance(value, list) and any(isinstance(v, torch.Tensor) for v in value):
            found += [CacheSlot(i, key, None, False, True) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return found


def rebuild(template: Any, slots: Sequence[CacheSlot], states: Sequence[torch.Tensor]) -> Any:
    """Rule 3: a fresh cache shaped like ``template`` holding ``states``; every list or
    dict of the cache and its layers is the new cache's own, so what the model writes
    into them never reaches the template."""
    cache = _copy_layer(template)
    cache.layers = [_copy_layer(layer) for layer in template.layers]
    for slot, tensor in zip(slots, states, strict=True):
        slot.set(cache, tensor.clone() if slot.in_place else tensor)
    return cache


def read_states(cache: Any, slots: Sequence[CacheSlot]) -> tuple[torch.Tensor, ...]:
    """The state tensors of ``cache``, in slot order."""
    return tuple(slot.get(cache) for slot in slots)


def check_carried(cache: Any, slots: Sequence[CacheSlot]) -> None:
    """Rule 2's last part: ``cache``, after a step ran on it, holds no state beyond ``slots``."""
    carried = {slot.name for slot in slots}
    new = [slot.name for slot in cache_slots(cache) if slot.name not in carried]
    if new:
        raise HFError(
            f"the decode step sets cache states {new} that the cache it was given held none of (empty entries the "
            "model fills only from some position on, such as a compressed-attention window's first overlap), so "
            "no input carries them and they would be lost after this step; capture the step at a position where "
            "the cache holds them already (a larger past)"
        )


def _copy_layer(layer: Any) -> Any:
    """A shallow copy whose dict and list attributes (per-state tensors and flags) are its own."""
    new = copy.copy(layer)
    for key, value in vars(layer).items():
        if isinstance(value, dict):
            setattr(new, key, dict(value))
        elif isinstance(value, list):
            setattr(new, key, list(value))
    return new


def _check_layer(i: int, layer: Any) -> None:
    """Rule 2: refuse layers holding tensors that are neither state nor known constants."""
    unknown = []
    for key, value in vars(layer).items():
        if key in STATE_ATTRIBUTES or key in CONSTANT_ATTRIBUTES:
            continue
        values = value.values() if isinstance(value, dict) else (value,)
        if any(isinstance(v, torch.Tensor) for v in values):
            unknown.append(key)
    if unknown:
        raise HFError(
            f"cache layer {i} ({type(layer).__name__}) holds tensors {unknown} that are not attention or "
            "linear-attention state; the workbench turns dynamic and static caches (full attention, sliding "
            "window, linear attention) into plain tensors, indexed layers and per-layer state a model's own cache keeps, not quantized caches"
        )
