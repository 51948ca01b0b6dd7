"""A transformers cache as plain tensors: the states a decode step reads and writes.

Rules:
1. A cache's state, layer by layer, is: ``keys``, ``values`` and (static layers, whose
   position counter is a tensor) ``cumulative_length`` of an attention layer — full or
   sliding window; ``conv_states[i]`` and ``recurrent_states[i]`` of a linear-attention
   layer (Qwen3.5, Qwen3-Next); a hybrid layer has both. Everything else a layer holds
   (Python counters, flags, the sliding window as a tensor) is configuration, copied from
   the template cache at every call.
2. A layer holding other tensors (quantized or indexer caches) and an offloading cache
   are refused, naming what is supported.
3. ``rebuild`` makes a fresh cache of the template's structure that holds the given
   states and never modifies the template or the states: a state transformers updates in
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

__all__ = ["CacheSlot", "cache_slots", "rebuild", "read_states"]

#: Layer attributes that hold state (rule 1), in the order they are flattened.
STATE_ATTRIBUTES = ("keys", "values", "cumulative_length", "conv_states", "recurrent_states")
#: Tensors a layer may hold that are configuration, not state (rule 1).
CONSTANT_ATTRIBUTES = frozenset({"_sliding_window_tensor"})


@dataclass(frozen=True)
class CacheSlot:
    """One state tensor of a cache: where it sits in the cache object."""

    layer: int  # index into cache.layers
    attribute: str  # one of STATE_ATTRIBUTES
    index: Optional[int]  # key into the attribute's dict (linear-attention states), else None
    in_place: bool  # transformers updates it in place, so rebuild clones it (rule 3)

    @property
    def name(self) -> str:
        """``layers.3.keys``, ``layers.0.conv_states.0``: how tables and errors name it."""
        suffix = "" if self.index is None else f".{self.index}"
        return f"layers.{self.layer}.{self.attribute}{suffix}"

    def get(self, cache: Any) -> torch.Tensor:
        value = getattr(cache.layers[self.layer], self.attribute)
        return value if self.index is None else value[self.index]

    def set(self, cache: Any, tensor: torch.Tensor) -> None:
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
            value = getattr(layer, attribute, None)
            if isinstance(value, torch.Tensor):
                in_place_kv = not (functional_kv and attribute in ("keys", "values"))
                slots.append(CacheSlot(i, attribute, None, in_place_kv))
            elif isinstance(value, dict):
                slots += [CacheSlot(i, attribute, j, True) for j, t in value.items() if isinstance(t, torch.Tensor)]
    extra = set(in_place)
    return tuple(CacheSlot(s.layer, s.attribute, s.index, s.in_place or s.name in extra) for s in slots)


def rebuild(template: Any, slots: Sequence[CacheSlot], states: Sequence[torch.Tensor]) -> Any:
    """Rule 3: a fresh cache shaped like ``template`` holding ``states``."""
    cache = copy.copy(template)
    cache.layers = [_copy_layer(layer) for layer in template.layers]
    for slot, tensor in zip(slots, states, strict=True):
        slot.set(cache, tensor.clone() if slot.in_place else tensor)
    return cache


def read_states(cache: Any, slots: Sequence[CacheSlot]) -> tuple[torch.Tensor, ...]:
    """The state tensors of ``cache``, in slot order."""
    return tuple(slot.get(cache) for slot in slots)


def _copy_layer(layer: Any) -> Any:
    """A shallow copy whose dict attributes (per-state tensors and flags) are its own."""
    new = copy.copy(layer)
    for key, value in vars(layer).items():
        if isinstance(value, dict):
            setattr(new, key, dict(value))
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
            "window, linear attention) into plain tensors, not quantized or indexer caches"
        )
