"""MoE placement strategies beyond ``workbench.strategies``: partial offload, expert caches.

- ``partial_offload(n_host_layers)`` — llama.cpp's ``--n-cpu-moe N``: the routed experts
  of the first ``n_host_layers`` MoE layers run on the host, where their weights stay;
  everything else (attention, routers, shared experts, the later layers' experts) runs
  on the device with its weights resident there. ``partial_offload(0)`` is
  ``all_on_device``; ``partial_offload(L)`` is ``experts_on_host``.
- ``expert_cache(slots_per_layer, policy, on_miss, prefetch=...)`` — every op on the
  device; the routed experts' weights stay on the host and each MoE layer keeps a device
  cache of ``slots_per_layer`` expert slabs (``lru``, ``lfu`` or ``static_hot``, the
  policies of ``cache_policies``). A routed expert found in the cache is read there. A
  missed one crosses the link and (``lru``/``lfu``) takes an evicted slot
  (``on_miss="copy"``), or its FFN runs on the host from the host-resident weights and
  only activations cross (``on_miss="host_compute"``, Fiddler/ktransformers; ``lru``/
  ``lfu`` still admit it for later tokens). ``prefetch=True`` (a program captured with
  routing hints, an admitting policy) admits each layer's predicted experts before its
  read (Mixtral offloading's speculative loading). See ``cache_graph``.

The routed experts are found by ``workbench.experts.find_experts``, so both strategies
work on the built-in decoder and on transformers MoE models (``workbench.hf``); an expert
cache reads the experts' rows where the graph selects them (transformers: ``experts_
implementation="batched_mm"``), or all E rows of experts the graph reads whole (Llama 4's
dense batched matmul; one module per expert, stacked first: ``expert_reads``).

Rules:
  1. Strategies here are ``workbench.strategies.Strategy`` objects: ``apply(program)``
     places, propagates and schedules like every other strategy.
  2. ``MOE_STRATEGIES`` maps each name to its factory; ``all_strategies()`` is that plus
     ``workbench.strategies.STRATEGIES`` — what sweeps and tables look names up in.
  3. A parameter that does not fit the program (more host layers than MoE layers, too
     few or many slots) is a ``StrategyError`` at ``apply``, naming the valid range; a
     combination that cannot exist (a prefetch into a static cache) one at the factory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import numpy as np
import torch.fx

from ..arguments import check_flag
from ..capture import Program
from ..devices import Device
from ..passes import FunctionPass, schedule_pass
from ..strategies import STRATEGIES, Recipe, Strategy, StrategyError
from .cache_graph import CacheGraphError, CacheSpec, cached_program, rewrite_reads
from .cache_policies import ON_MISS, POLICIES
from .experts import expert_map

__all__ = ["MOE_STRATEGIES", "ExpertCache", "PartialOffload", "all_strategies", "expert_cache", "partial_offload"]


@dataclass(frozen=True)
class PartialOffload(Strategy):
    """``partial_offload``: the first ``n_host_layers`` MoE layers' routed experts on the host."""

    n_host_layers: int = 0  # MoE layers, counted from the first, whose experts run on the host

    def recipe(self, program: Program) -> Recipe:
        """The first ``n_host_layers`` layers' experts on the host (found in ``program``)."""
        experts = expert_map(program)
        layers = len(experts)
        if self.n_host_layers > layers:
            raise StrategyError(
                f"partial_offload({self.n_host_layers}): the program has {layers} MoE layers; "
                f"n_host_layers must be in [0, {layers}]"
            )
        on_host = set(experts.layers[: self.n_host_layers])
        dev = self.device

        def rule(node: torch.fx.Node) -> str | None:
            return None if experts.layer_of(node) in on_host else dev

        return replace(Strategy.recipe(self, program), rules=rule)


def partial_offload(n_host_layers: int, device: str = "cuda:0", skip_copies: bool = True) -> PartialOffload:
    """Routed experts of the first ``n_host_layers`` MoE layers on the host, everything else on ``device``."""
    if isinstance(n_host_layers, bool) or not isinstance(n_host_layers, int) or n_host_layers < 0:
        raise StrategyError(f"n_host_layers must be an integer >= 0, got {n_host_layers!r}")
    check_flag(skip_copies, "skip_copies")
    dev = str(Device.parse(device))
    n = n_host_layers
    return PartialOffload(
        "partial_offload",
        f"routed experts of the first {n} MoE layers run on the host; everything else on {dev}",
        lambda node: dev,  # bound per program by apply: the layers are found there
        skip_copies,
        device=dev,
        n_host_layers=n,
    )


@dataclass(frozen=True)
class ExpertCache(Strategy):
    """``expert_cache``: a device cache of expert slabs per MoE layer (``cache_graph``)."""

    cache: Optional[CacheSpec] = None  # slots, policy, pinned popularity, on_miss, prefetch

    @property
    def on_miss(self) -> str:
        """What a miss does: ``"copy"`` or ``"host_compute"``."""
        assert self.cache is not None  # the factory always sets it
        return self.cache.on_miss

    @property
    def variant(self) -> str:
        """``expert_cache``, ``+host_compute`` and ``+prefetch`` as set: what tables list."""
        host = "+host_compute" if self.on_miss == "host_compute" else ""
        return f"{self.name}{host}{'+prefetch' if self.prefetch else ''}"

    @property
    def reads_hints(self) -> bool:
        """A cache always checks the program's hints against ``prefetch``."""
        return True

    def hint_problem(self, hinted: bool) -> str:
        how = (
            "capture the built-in QwenMoEDecoder(config, expert_prefetch=True); transformers models carry no "
            "hints, so cache them with prefetch=False"
            if self.prefetch
            else "capture the model without them (QwenMoEDecoder(config)), or pass prefetch=True"
        )
        return (
            f"{self.label}: prefetch={self.prefetch} {'needs' if self.prefetch else 'must not have'} routing "
            f"hints (select_rows ops) in the program; {how}"
        )

    def recipe(self, program: Program) -> Recipe:
        """The program with its caches (``cached_program``), the misses' ops on the host,
        and the passes: the cache reads rewrite (``rewrite_reads``), then the schedule."""
        spec = self.cache
        assert spec is not None  # the factory always sets it
        try:
            cached = cached_program(program, spec)
        except CacheGraphError as exc:
            raise StrategyError(f"{self.label}: {exc}") from None
        dev, host = self.device, cached.host_ops
        reads = FunctionPass(
            "expert_cache.rewrite_reads", lambda dg: rewrite_reads(dg, cached, spec, Device.parse(dev))
        )
        return Recipe(
            cached.program,
            lambda node: None if node.name in host else dev,
            cached.streamed,
            (reads, schedule_pass(self.schedule)),
        )


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

    ``on_miss``: ``"copy"`` (a missed expert's weights cross the link) or
    ``"host_compute"`` (its FFN runs on the host; activations cross). ``prefetch=True``
    admits each layer's predicted experts before its read (``lru``/``lfu``; the program
    must be captured with routing hints). ``popularity`` ``(layers, experts)`` request
    counts choose ``static_hot``'s pinned experts (e.g. ``RoutingTrace.counts()``);
    without it experts ``0..S-1`` are pinned.
    """
    if isinstance(slots_per_layer, bool) or not isinstance(slots_per_layer, int) or slots_per_layer < 0:
        raise StrategyError(f"slots_per_layer must be an integer >= 0, got {slots_per_layer!r}")
    if policy not in POLICIES:
        raise StrategyError(f"unknown cache policy {policy!r}; valid: {', '.join(POLICIES)}")
    if on_miss not in ON_MISS:
        raise StrategyError(f"unknown on_miss {on_miss!r}; valid: {', '.join(ON_MISS)}")
    check_flag(prefetch, "prefetch")
    check_flag(skip_copies, "skip_copies")
    if prefetch and policy == "static_hot":
        raise StrategyError(
            "expert_cache(policy='static_hot', prefetch=True): a static cache admits nothing, so a prefetch has no "
            "slot to go to; prefetch with 'lru' or 'lfu', or use expert_streaming(prefetch=True)"
        )
    dev = str(Device.parse(device))
    pop = None if popularity is None else tuple(tuple(int(c) for c in row) for row in np.asarray(popularity))
    missed = "misses cross the link" if on_miss == "copy" else "missed experts run on the host, activations cross"
    ahead = "; predicted experts are admitted a layer ahead" if prefetch else ""
    return ExpertCache(
        "expert_cache",
        f"every op on {dev}; each layer caches {slots_per_layer} expert slabs ({policy}), {missed}{ahead}",
        lambda node: dev,
        skip_copies,
        device=dev,
        prefetch=prefetch,
        cache=CacheSpec(slots_per_layer, policy, pop, on_miss, prefetch),
    )


MOE_STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "partial_offload": partial_offload,
    "expert_cache": expert_cache,
}


def all_strategies() -> dict[str, Callable[..., Strategy]]:
    """Rule 2: every strategy factory by name."""
    return {**STRATEGIES, **MOE_STRATEGIES}
