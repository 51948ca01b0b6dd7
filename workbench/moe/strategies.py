"""Mixture-of-experts placement strategies: which experts run where, streamed or cached.

Every strategy here is a ``workbench.strategy.Strategy`` (a recipe of placement rules,
flags, streamed weights and a list of passes, run by one driver); ``ExpertStrategy``
binds its rules and streamed weights to the routed experts found in each program
(``workbench.moe.discovery``). ``all_on_device`` is the core's; the rest know experts:

- ``experts_on_host``: the routed experts' FFNs run on the host, where their weights
  stay (llama.cpp's ``--cpu-moe``); attention, router and the shared expert run on the
  device. Activations cross the link, weights never do.
- ``expert_streaming``: every op runs on the device, but the routed experts' weights live
  on the host; each layer gathers just its routed experts' slabs into device memory with
  one gather copy, issued as soon as the router has chosen, so the copy overlaps the
  shared expert's compute on the copy stream.
- ``expert_streaming(prefetch=True)`` (label ``expert_streaming+prefetch``), for a model
  built with ``QwenMoEDecoder(config, expert_prefetch=True)``: layer i predicts layer
  i+1's experts (layer i+1's norm and router on layer i's hidden state); the predicted
  slabs are prefetched during layer i (``…_prefetch`` gathers), and at layer i+1 a reuse
  copy moves only the experts the prediction missed. The prefetch overlaps layer i's
  remaining compute and layer i+1's attention; mispredicted slabs cost link bytes.

The routed experts are found in the program by ``workbench.moe.discovery.find_experts`` (by
what they are: stacked per-expert weights, one module per expert, or rows of lookup
tables, scored by a router),
so the strategies work unchanged on the built-in decoder (``layers.N.mlp.experts``) and on
transformers models (``model.layers.N.mlp.experts``); a glob or an ``ExpertMap`` may be
given instead. A strategy that finds no experts to move — a dense model, or a glob that
matches nothing — warns (``PlacementWarning``; an error with ``strict=True``) instead of
reporting an all-on-device placement as if it had done its job.

Streaming works on every expert form a captured graph holds: ``index_select`` of the
built-in decoder becomes a gather of the selected slabs, and transformers' grouped
(``aten._grouped_mm``, ``transformers::grouped_mm_fallback``) and batched
(``aten.index.Tensor``) expert matmuls become routed copies of the distinct experts the
router chose (``workbench.moe.streaming``), so a step moves at most min(E, tokens × k)
slabs per weight, never the whole stack.

Each comes with the skip-copy flags on (tokens, caches and logits stay on the device:
the caller stages them, as ExecuTorch's CUDA pipeline does) or off, and is issued in the
``overlap`` order of ``workbench.schedule`` (copies as early as their inputs allow).
Beyond the three table strategies:

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

The routed experts are found by ``discovery.find_experts``, so both strategies
work on the built-in decoder and on transformers MoE models (``workbench.hf``); an expert
cache reads the experts' rows where the graph selects them (transformers: ``experts_
implementation="batched_mm"``), or all E rows of experts the graph reads whole (Llama 4's
dense batched matmul; one module per expert, stacked first: ``expert_reads``).

Rules:
  1. Strategies here are ``workbench.strategy.Strategy`` objects: ``apply(program)``
     places, propagates and runs their passes like every other strategy; no strategy
     re-wires the pipeline (an expert cache's read rewrite is one of its passes).
  2. ``STRATEGIES`` maps the table strategies' names to their factories,
     ``MOE_STRATEGIES`` the others'; ``all_strategies()`` is both — what sweeps and tables look names up in.
  3. A parameter that does not fit the program (more host layers than MoE layers, too
     few or many slots) is a ``StrategyError`` at ``apply``, naming the valid range; a
     combination that cannot exist (a prefetch into a static cache) one at the factory.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Union

import numpy as np
import torch.fx

from ..arguments import check_flag
from ..capture import Program
from ..devices import Device
from ..passes import FunctionPass, schedule_pass
from ..place import module_paths
from ..strategy import EveryOpOn, Recipe, Strategy, StrategyError, all_on_device
from .cache_graph import CacheGraphError, ExpertCacheSpec, cached_program, rewrite_reads
from .cache_policies import ON_MISS, POLICIES
from .discovery import ExpertMap, expert_map, find_experts

__all__ = [
    "EXPERT_MODULES",
    "EXPERT_WEIGHTS",
    "ExpertCache",
    "ExpertRule",
    "ExpertStrategy",
    "MOE_STRATEGIES",
    "PartialOffload",
    "ROUTED_EXPERTS",
    "Recipe",
    "STRATEGIES",
    "Strategy",
    "StrategyError",
    "all_on_device",
    "all_strategies",
    "expert_cache",
    "expert_streaming",
    "experts_on_host",
    "partial_offload",
    "strategy_variants",
]

#: Module path and parameter names of the built-in decoder's routed experts, as globs.
EXPERT_MODULES = "layers.*.mlp.experts"
EXPERT_WEIGHTS = "layers.*.mlp.experts.*"
#: In ``Strategy.stream_constants``: the routed experts' weights, as found in each program.
ROUTED_EXPERTS = "<routed experts>"

#: Where a strategy's experts are: None (found in the program), a glob, or a map.
ExpertsSpec = Union[None, str, ExpertMap]


@dataclass(frozen=True)
class ExpertRule:
    """A placement rule that sends the routed experts' ops to the host and every other op
    to ``device``. Which ops those are depends on the program, so ``Strategy.apply`` binds
    it to each one (``for_program``)."""

    device: str  # where every op outside the experts runs
    experts: ExpertsSpec = None  # None: find_experts(program); a module-path glob; an ExpertMap

    def for_program(self, program: Program) -> Callable[[torch.fx.Node], Optional[str]]:
        """The node → device callable of this rule for ``program``."""
        dev, spec = self.device, self.experts
        if isinstance(spec, str):
            return lambda node: None if any(fnmatch.fnmatchcase(p, spec) for p in module_paths(node)) else dev
        experts = spec if isinstance(spec, ExpertMap) else find_experts(program)
        return lambda node: None if experts.contains(node) else dev

    def __call__(self, node: torch.fx.Node) -> Optional[str]:
        raise StrategyError(
            "an ExpertRule finds the experts in a program: apply the strategy (strategy.apply(program)) "
            "or bind the rule first (rule.for_program(program))"
        )


@dataclass(frozen=True)
class ExpertStrategy(Strategy):
    """A ``Strategy`` about the routed experts: an ``ExpertRule`` is bound to each program,
    ``ROUTED_EXPERTS`` in ``stream_constants`` stands for the experts found there, and a
    strategy that finds none to move says so in those words."""

    def recipe(self, program: Program) -> Recipe:
        """The strategy's ``Recipe`` with its ``ExpertRule`` bound to ``program``."""
        rules = self.rules.for_program(program) if isinstance(self.rules, ExpertRule) else self.rules
        return replace(Strategy.recipe(self, program), rules=rules)

    def streamed(self, program: Program) -> tuple[str, ...]:
        """``stream_constants`` for ``program``: ROUTED_EXPERTS replaced by the experts found
        there, and only the names and globs that match a parameter of it."""
        names: list[str] = []
        for pattern in self.stream_constants:
            names += find_experts(program).weights if pattern == ROUTED_EXPERTS else [pattern]
        constants = program.constants.values()
        return tuple(n for n in names if any(fnmatch.fnmatchcase(c, n) for c in constants))

    @property
    def claims_ops(self) -> bool:
        """An ``ExpertRule`` sends the experts' ops to the host: none sent is none found."""
        return isinstance(self.rules, ExpertRule)

    def nothing_moved(self, program: Program, what: str) -> str:
        """The no-claim report: a strategy about experts that found none."""
        spec = self.rules.experts if isinstance(self.rules, ExpertRule) else None
        given = [p for p in self.stream_constants if p != ROUTED_EXPERTS] or ([spec] if isinstance(spec, str) else [])
        where = (
            f"{', '.join(map(repr, given))} {'matches' if len(given) == 1 else 'match'} no {what}"
            if given
            else "no routed experts were found (workbench.moe.discovery.find_experts looks for stacked "
            "per-expert weights or one module per expert, scored by a router)"
        )
        return f"{self.label} moved no expert in this program of {program.num_ops()} ops: {where}; every op stays on {self.device}"

    def hint_problem(self, hinted: bool) -> str:
        """Why a program with (``hinted``) or without routing hints does not fit this strategy."""
        if not hinted:
            return (
                f"{self.label} prefetches from routing hints, but this program has none (no "
                "workbench::select_rows node); capture QwenMoEDecoder(config, expert_prefetch=True)"
            )
        return (
            f"{self.label} streams without prefetch, but this program carries routing hints "
            "(captured with expert_prefetch=True), which propagation would prefetch; use "
            f"{self.name}(prefetch=True) or capture the model with expert_prefetch=False"
        )


def _check_experts(experts: ExpertsSpec, what: str) -> ExpertsSpec:
    if experts is None or isinstance(experts, ExpertMap) or (isinstance(experts, str) and experts):
        return experts
    raise StrategyError(
        f"{what} must be None (find the routed experts in the program), a non-empty glob, or an "
        f"ExpertMap from workbench.moe.discovery.find_experts; got {experts!r}"
    )


def experts_on_host(device: str = "cuda:0", skip_copies: bool = True, experts: ExpertsSpec = None) -> Strategy:
    """Routed experts' FFNs on the host (weights stay there); everything else on ``device``.

    ``experts``: None finds them in the program; a glob over module paths
    (``EXPERT_MODULES``, the built-in decoder's) or an ``ExpertMap`` names them.
    """
    check_flag(skip_copies, "skip_copies")
    dev = str(Device.parse(device))
    return ExpertStrategy(
        "experts_on_host",
        f"routed experts run on the host; attention, router, shared expert on {dev}",
        ExpertRule(dev, _check_experts(experts, "experts")),
        skip_copies,
        device=dev,
    )


def expert_streaming(
    device: str = "cuda:0", skip_copies: bool = True, weights: ExpertsSpec = None, prefetch: bool = False
) -> Strategy:
    """Everything on ``device``; routed experts' weights stream from the host per layer.

    ``weights``: None finds them in the program; a glob over parameter names
    (``EXPERT_WEIGHTS``, the built-in decoder's) or an ``ExpertMap`` names them.
    ``prefetch=True`` needs a program of ``QwenMoEDecoder(config, expert_prefetch=True)``:
    each layer's predicted experts are prefetched during the layer before, and only the
    mispredicted ones are copied once the router has chosen.
    """
    check_flag(skip_copies, "skip_copies")
    check_flag(prefetch, "prefetch")
    dev = str(Device.parse(device))
    spec = _check_experts(weights, "weights")
    streamed = (ROUTED_EXPERTS,) if spec is None else (spec,) if isinstance(spec, str) else spec.weights
    what = (
        "prefetches each layer's predicted experts during the layer before, then copies the missed ones"
        if prefetch
        else "each layer gathers its routed experts' weights from the host"
    )
    return ExpertStrategy(
        "expert_streaming",
        f"every op on {dev}; {what}",
        EveryOpOn(dev),
        skip_copies,
        stream_constants=streamed,
        device=dev,
        prefetch=prefetch,
    )


@dataclass(frozen=True)
class PartialOffload(ExpertStrategy):
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

        return replace(ExpertStrategy.recipe(self, program), rules=rule)


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
        EveryOpOn(dev),  # bound per program by apply: the layers are found there
        skip_copies,
        device=dev,
        n_host_layers=n,
    )


@dataclass(frozen=True)
class ExpertCache(ExpertStrategy):
    """``expert_cache``: a device cache of expert slabs per MoE layer (``cache_graph``)."""

    cache: Optional[ExpertCacheSpec] = None  # slots, policy, pinned popularity, on_miss, prefetch

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
        EveryOpOn(dev),
        skip_copies,
        device=dev,
        prefetch=prefetch,
        cache=ExpertCacheSpec(slots_per_layer, policy, pop, on_miss, prefetch),
    )


STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "all_on_device": all_on_device,
    "experts_on_host": experts_on_host,
    "expert_streaming": expert_streaming,
}


def strategy_variants(device: str = "cuda:0", prefetch: bool = False) -> list[Strategy]:
    """Every strategy with the skip flags off and on, in table order; with ``prefetch``,
    also ``expert_streaming+prefetch`` (whose program must carry routing hints, so it
    cannot share a program with plain ``expert_streaming``)."""
    variants = [make(device, skip_copies=skip) for make in STRATEGIES.values() for skip in (False, True)]
    if prefetch:
        variants += [expert_streaming(device, skip_copies=skip, prefetch=True) for skip in (False, True)]
    return variants


MOE_STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "partial_offload": partial_offload,
    "expert_cache": expert_cache,
}


def all_strategies() -> dict[str, Callable[..., Strategy]]:
    """Rule 2: every strategy factory by name."""
    return {**STRATEGIES, **MOE_STRATEGIES}
