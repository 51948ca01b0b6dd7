"""MoE placement strategies beyond ``workbench.strategies``: partial offload, expert caches.

- ``partial_offload(n_host_layers)`` — llama.cpp's ``--n-cpu-moe N``: the routed experts
  of the first ``n_host_layers`` MoE layers run on the host, where their weights stay;
  everything else (attention, routers, shared experts, the later layers' experts) runs
  on the device with its weights resident there. ``partial_offload(0)`` is
  ``all_on_device``; ``partial_offload(L)`` is ``experts_on_host``.
- ``expert_cache(slots_per_layer, policy)`` — every op on the device; the routed experts'
  weights stay on the host and each MoE layer keeps a device cache of
  ``slots_per_layer`` expert slabs (``lru``, ``lfu`` or ``static_hot``, the policies of
  ``cache_policies``). A routed expert found in the cache is read there; a missed one
  crosses the link and (``lru``/``lfu``) takes an evicted slot. See ``cache_graph``.
  Not built yet: ``on_miss="host_compute"`` and the combination with next-layer
  prefetch (both refused with a ``StrategyError``; ``cache_policies.replay`` models
  host-compute hit rates and bytes).

Rules:
  1. Strategies here are ``workbench.strategies.Strategy`` objects: ``apply(program)``
     places, propagates and schedules like every other strategy.
  2. ``MOE_STRATEGIES`` maps each name to its factory; ``all_strategies()`` is that plus
     ``workbench.strategies.STRATEGIES`` — what sweeps and tables look names up in.
  3. A parameter that does not fit the program (more host layers than MoE layers) is a
     ``StrategyError`` at ``apply``, naming the valid range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch.fx

from ..capture import Program
from ..copy_ops import SELECT_ROWS
from ..devices import Device
from ..place import module_paths, place
from ..propagate import DeviceGraph, propagate
from ..schedule import schedule
from ..strategies import EXPERT_WEIGHTS, STRATEGIES, Strategy, StrategyError
from .cache_graph import CacheSpec, cached_program, rewrite_reads
from .cache_policies import ON_MISS, POLICIES
from .experts import expert_layer_of, expert_layers

__all__ = ["MOE_STRATEGIES", "ExpertCache", "PartialOffload", "all_strategies", "expert_cache", "partial_offload"]


@dataclass(frozen=True)
class PartialOffload(Strategy):
    """``partial_offload``: the first ``n_host_layers`` layers' routed experts on the host."""

    n_host_layers: int = 0  # MoE layers, counted from the first, whose experts run on the host

    def apply(self, program: Program, *, strict: bool = False) -> DeviceGraph:
        layers = len(expert_layers(program.constants))
        if self.n_host_layers > layers:
            raise StrategyError(
                f"partial_offload({self.n_host_layers}): the program has {layers} MoE layers; "
                f"n_host_layers must be in [0, {layers}]"
            )
        return super().apply(program, strict=strict)


def partial_offload(n_host_layers: int, device: str = "cuda:0", skip_copies: bool = True) -> PartialOffload:
    """Routed experts of layers ``< n_host_layers`` on the host, everything else on ``device``."""
    if isinstance(n_host_layers, bool) or not isinstance(n_host_layers, int) or n_host_layers < 0:
        raise StrategyError(f"n_host_layers must be an integer >= 0, got {n_host_layers!r}")
    dev = str(Device.parse(device))
    n = n_host_layers

    def rule(node: torch.fx.Node) -> str | None:
        for path in module_paths(node):
            layer = expert_layer_of(path)
            if layer is not None and layer < n:
                return None
        return dev

    return PartialOffload(
        "partial_offload",
        f"routed experts of the first {n} layers run on the host; everything else on {dev}",
        rule,
        skip_copies,
        device=dev,
        n_host_layers=n,
    )


@dataclass(frozen=True)
class ExpertCache(Strategy):
    """``expert_cache``: a device cache of expert slabs per MoE layer (``cache_graph``)."""

    cache: Optional[CacheSpec] = None  # slots, policy, pinned popularity
    on_miss: str = "copy"  # what a miss does (only "copy" is built as a graph)

    def apply(self, program: Program, *, strict: bool = False) -> DeviceGraph:
        spec = self.cache
        assert spec is not None  # the factory always sets it
        layers = expert_layers(program.constants)
        name = layers[0].weights[0]
        experts, = (program.constant_tensor(n).shape[0] for n, f in program.constants.items() if f == name)
        top_k = _top_k(program)
        low = top_k if spec.admits else 0
        if not low <= spec.slots_per_layer <= experts:
            raise StrategyError(
                f"{self.label}: slots_per_layer={spec.slots_per_layer} must be in [{low}, {experts}] for "
                f"{spec.policy!r} ({'a token' + chr(39) + 's k experts are resident together; ' if spec.admits else ''}"
                f"the layers have {experts} experts)"
            )
        if spec.popularity is not None and np.asarray(spec.popularity).shape != (len(layers), experts):
            raise StrategyError(f"{self.label}: popularity must be (layers, experts) = {(len(layers), experts)}")
        hinted = any(n.op == "call_function" and n.target is SELECT_ROWS for n in program.graph.nodes)
        if hinted != self.prefetch:
            raise StrategyError(
                f"{self.label}: {'needs' if self.prefetch else 'must not have'} routing hints; capture "
                f"QwenMoEDecoder(config, expert_prefetch={self.prefetch})"
            )
        cached, states = cached_program(program, spec)
        placed = place(cached, self.rules, strict=strict)
        dg = propagate(
            placed,
            skip_h2d_for_method_inputs=self.skip_copies,
            skip_d2h_for_method_outputs=self.skip_copies,
            stream_constants=self.stream_constants,
        )
        return schedule(rewrite_reads(dg, states, spec, Device.parse(self.device)), self.schedule)


def _top_k(program: Program) -> int:
    """k: the routed rows a layer selects per token (the size of its index)."""
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target is SELECT_ROWS:
            return int(node.meta["val"].shape[0])
    for node in program.graph.nodes:
        if node.op == "call_function" and "index_select" in str(node.target):
            source = node.args[0]
            if getattr(source, "name", None) in program.constants and ".mlp.experts." in program.constants[source.name]:
                return int(node.meta["val"].shape[0])
    raise StrategyError("no routed-expert row selection found in the program")


def expert_cache(
    slots_per_layer: int,
    policy: str = "lru",
    on_miss: str = "copy",
    *,
    prefetch: bool = False,
    popularity: Optional[Any] = None,
    device: str = "cuda:0",
    skip_copies: bool = True,
) -> ExpertCache:
    """A device cache of ``slots_per_layer`` expert slabs per MoE layer (module docstring).

    ``popularity`` ``(layers, experts)`` request counts choose ``static_hot``'s pinned
    experts (e.g. ``RoutingTrace.counts()``); without it experts ``0..S-1`` are pinned.
    """
    if isinstance(slots_per_layer, bool) or not isinstance(slots_per_layer, int) or slots_per_layer < 0:
        raise StrategyError(f"slots_per_layer must be an integer >= 0, got {slots_per_layer!r}")
    if policy not in POLICIES:
        raise StrategyError(f"unknown cache policy {policy!r}; valid: {', '.join(POLICIES)}")
    if on_miss not in ON_MISS:
        raise StrategyError(f"unknown on_miss {on_miss!r}; valid: {', '.join(ON_MISS)}")
    if on_miss != "copy":
        raise StrategyError(
            "expert_cache(on_miss='host_compute') is not built yet as a graph; cache_policies.replay models "
            "its hit rates and link bytes"
        )
    if not isinstance(prefetch, bool):
        raise TypeError(f"prefetch must be True or False, got {prefetch!r}")
    if prefetch:
        raise StrategyError(
            "expert_cache(prefetch=True) is not built yet: a prefetch into the cache must be admitted "
            "before the layer's read, which the graph cannot order without a runtime dependency"
        )
    dev = str(Device.parse(device))
    pop = None if popularity is None else tuple(tuple(int(c) for c in row) for row in np.asarray(popularity))
    return ExpertCache(
        "expert_cache",
        f"every op on {dev}; each layer caches {slots_per_layer} expert slabs ({policy}), misses cross the link",
        lambda node: dev,
        skip_copies,
        stream_constants=(EXPERT_WEIGHTS,),
        device=dev,
        prefetch=prefetch,
        cache=CacheSpec(slots_per_layer, policy, pop),
        on_miss=on_miss,
    )


MOE_STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "partial_offload": partial_offload,
    "expert_cache": expert_cache,
}


def all_strategies() -> dict[str, Callable[..., Strategy]]:
    """Rule 2: every strategy factory by name."""
    return {**STRATEGIES, **MOE_STRATEGIES}
