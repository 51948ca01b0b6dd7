"""The capacity answer under other routing assumptions.

The capacity sweep scores every expert cache on one synthetic trace (Zipf 1.0, reuse 0.3,
seed 0) and pins a ``static_hot`` cache's experts by that same trace's counts: the best
static choice in hindsight, a cache that has seen the answers. This module re-scores the
same strategy settings under other routing: a static cache chosen on other tokens of the
same routing, on another trace whose popular experts differ, and flatter routing.

Rules:
  1. A ``RoutingScenario`` is the trace the caches are scored on (``scored``) and the trace
     a ``static_hot`` cache counts its pinned experts on (``pinned_on``; None: the scored
     trace itself, as the sweep does).
  2. ``default_scenarios(config, tokens)``: the sweep's own assumption (Zipf 1, pinned on the
     scored trace); the same scored routing with the static cache pinned on the next
     ``tokens`` tokens of the same generator (held-out tokens: same popularity law, same
     ranking of the experts); pinned on a trace of another seed (another ranking: the popular
     experts of another workload); Zipf 0.5 and uniform routing (Zipf 0), each pinned on
     held-out tokens. Each scenario's trace has the sweep's reuse (0.3).
  3. ``scenario_points`` evaluates each strategy setting once per scenario with
     ``sweeps.evaluate`` — the very rows a sweep makes — each expert cache with the hit rate
     of its policy and slot count replayed over the scenario's scored trace (``static_hot``
     pinned as rule 1 says); a strategy without a cache has no hit rate and gives the same
     rows in every scenario. A ``scenario`` column names the scenario.
  4. It runs in this process, setting by setting, all scenarios of one setting in a row, so
     each setting is planned once (``sweeps.reuse``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ..errors import ArgumentValueError
from ..models import MoEConfig
from ..moe.cache_graph import ExpertCacheSpec
from ..moe.cache_policies import replay_all, slab_bytes
from ..moe.routing import RoutingTrace, synthetic_trace_for
from ..moe.strategies import ExpertCache
from ..machine import CostModel
from ..sweeps import DEFAULT_LINKS, StrategySpec, SweepTask, evaluate, expand, quick_grid
from ..sweeps.source import ConfigSource
from .walkthrough import deployment_cost_model

__all__ = ["RoutingScenario", "default_scenarios", "held_out", "scenario_points", "scored_grid"]

#: The sweep's synthetic routing (``sweeps`` rule 3): tokens, temporal reuse.
SWEEP_TOKENS = 2048
SWEEP_REUSE = 0.3


@dataclass(frozen=True)
class RoutingScenario:
    """Rule 1."""

    name: str  # one line for tables
    scored: RoutingTrace  # the routing every cache is scored on
    pinned_on: Optional[RoutingTrace] = None  # where static_hot counts its experts; None: ``scored``

    @property
    def source(self) -> str:
        """Where a cache's hit rate comes from, as a point's ``hit_rate_source`` says it."""
        pinned = "the scored trace itself" if self.pinned_on is None else self.pinned_on.label
        return f"{self.scored.label}; static_hot pinned on {pinned}"


def held_out(config: MoEConfig, tokens: int, *, zipf: float, reuse: float, seed: int) -> RoutingTrace:
    """Tokens ``tokens .. 2 tokens - 1`` of the synthetic generator: the same popularity law
    and ranking of the experts as its first ``tokens`` tokens (one seed), other draws."""
    longer = synthetic_trace_for(config, 2 * tokens, zipf=zipf, reuse=reuse, seed=seed)
    label = f"{longer.label}, tokens {tokens}-{2 * tokens - 1}"
    return RoutingTrace(longer.experts[tokens:], longer.num_experts, True, label)


def default_scenarios(config: MoEConfig, tokens: int = SWEEP_TOKENS) -> list[RoutingScenario]:
    """Rule 2."""
    scored = {z: synthetic_trace_for(config, tokens, zipf=z, reuse=SWEEP_REUSE, seed=0) for z in (1.0, 0.5, 0.0)}
    other = {z: held_out(config, tokens, zipf=z, reuse=SWEEP_REUSE, seed=0) for z in (1.0, 0.5, 0.0)}
    return [
        RoutingScenario("zipf 1, static pinned on the scored tokens", scored[1.0]),
        RoutingScenario("zipf 1, static pinned on other tokens", scored[1.0], other[1.0]),
        RoutingScenario(
            "zipf 1, static pinned on another seed", scored[1.0],
            synthetic_trace_for(config, tokens, zipf=1.0, reuse=SWEEP_REUSE, seed=1),
        ),
        RoutingScenario("zipf 0.5, static pinned on other tokens", scored[0.5], other[0.5]),
        RoutingScenario("uniform, static pinned on other tokens", scored[0.0], other[0.0]),
    ]


def _cache(spec: StrategySpec) -> Optional[ExpertCacheSpec]:
    """The expert-cache settings ``spec`` builds, or None for a strategy without a cache."""
    built = spec.build()
    return built.cache if isinstance(built, ExpertCache) else None


def _hit_rate(config: MoEConfig, cache: ExpertCacheSpec, scenario: RoutingScenario) -> float:
    pinned = None if scenario.pinned_on is None else np.asarray(scenario.pinned_on.counts())
    (replayed,) = replay_all(scenario.scored, [cache.policy], cache.slots_per_layer, slab_bytes(config), popularity=pinned)
    return round(replayed.hit_rate(), 6)


def scored_grid(config: MoEConfig) -> list[StrategySpec]:
    """The settings of ``sweeps.quick_grid`` a routing trace can score: all but the
    prefetching ones (a trace holds routed experts, not the previous layer's predictions)."""
    return [spec for spec in quick_grid(config) if not spec.build().prefetch]


def scenario_points(
    config: MoEConfig,
    scenarios: Sequence[RoutingScenario],
    strategies: Optional[Sequence[StrategySpec]] = None,
    links: Sequence[str] = DEFAULT_LINKS,
    cost_model: Optional[CostModel] = None,
    algorithm: str = "greedy",
) -> pd.DataFrame:
    """Rules 3-4: one row per (scenario, strategy setting, link); by default the settings
    of ``scored_grid`` on the machine the capacity sweep times (``walkthrough.deployment_cost_model``)."""
    specs = expand(strategies if strategies is not None else scored_grid(config))
    prefetching = [s.label for s in specs if s.build().prefetch]
    if prefetching:
        raise ArgumentValueError(
            f"prefetching strategies need a prefetch hit rate, which a routing trace does not hold: {', '.join(prefetching)}"
        )
    pinned = [s.label for s in specs if (c := _cache(s)) is not None and c.popularity is not None]
    if pinned:
        raise ArgumentValueError(f"a scenario says where static_hot is pinned; these settings pin it themselves: {', '.join(pinned)}")
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names) or not names:
        raise ArgumentValueError(f"scenarios need distinct names, one at least; got {names}")
    source, model = ConfigSource(config), cost_model if cost_model is not None else deployment_cost_model()
    rows = []
    for index, spec in enumerate(specs):
        cache = _cache(spec)
        for scenario in scenarios:
            rate = _hit_rate(config, cache, scenario) if cache is not None else None
            where = scenario.source if cache is not None else ""
            task = SweepTask(index, source, spec, tuple(links), model, algorithm, rate, where)
            rows += [{"scenario": scenario.name, **row} for row in evaluate(task).rows]
    order = {name: i for i, name in enumerate(names)}
    return pd.DataFrame(rows).sort_values("scenario", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
