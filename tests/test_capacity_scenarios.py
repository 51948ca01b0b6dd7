"""The capacity answer under other routing: the scenarios mean what they say, and the points
notebook 06 reads from ``notebooks/data/capacity_scenarios.csv`` are what the code computes."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.app.capacity_scenarios import RoutingScenario, default_scenarios, held_out, scenario_points, scored_grid
from workbench.errors import ArgumentValueError
from workbench.models import MoEConfig
from workbench.moe.cache_policies import replay_all, slab_bytes
from workbench.moe.routing import synthetic_trace_for
from workbench.sweeps import StrategySpec, expand

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data"
SHIPPED = DATA / "capacity_scenarios.csv"
REGENERATE = "stale: regenerate it with `python notebooks/data/capacity_scenarios.py`"
COMPARED = ["device_bytes", "ms/token", "tok/s", "link_MiB/token", "overlap", "expected_hit_rate", "hit_rate_source"]


def _static_rate(scored, pinned_on, slots):
    counts = None if pinned_on is None else pinned_on.counts()
    (r,) = replay_all(scored, ["static_hot"], slots, 1, popularity=counts)
    return r.hit_rate()


def test_held_out_tokens_keep_the_ranking_and_another_seed_does_not():
    """A static cache pinned on held-out tokens of the same generator hits almost as often as
    one pinned in hindsight on the scored tokens; pinned on another seed's trace (another
    ranking of the experts) it hits about as often as chance, slots / experts."""
    config = MoEConfig.full()
    scored = synthetic_trace_for(config, 1024, zipf=1.0, reuse=0.3, seed=0)
    other_tokens = held_out(config, 1024, zipf=1.0, reuse=0.3, seed=0)
    assert other_tokens.num_tokens == 1024 and not np.array_equal(other_tokens.experts, scored.experts)
    other_seed = synthetic_trace_for(config, 1024, zipf=1.0, reuse=0.3, seed=1)
    hindsight, held, shifted = (_static_rate(scored, p, 64) for p in (None, other_tokens, other_seed))
    assert held <= hindsight and hindsight - held < 0.03
    assert abs(shifted - 64 / config.num_experts) < 0.03


def test_default_scenarios_start_with_the_sweeps_own_assumption():
    config = MoEConfig.tiny()
    scenarios = default_scenarios(config, tokens=64)
    first = scenarios[0]
    assert first.pinned_on is None and first.scored.label == "synthetic (zipf 1, reuse 0.3, seed 0)"
    assert np.array_equal(first.scored.experts, synthetic_trace_for(config, 64, zipf=1.0, reuse=0.3, seed=0).experts)
    assert all(s.pinned_on is not None for s in scenarios[1:]) and len({s.name for s in scenarios}) == len(scenarios)
    assert "static_hot pinned on" in scenarios[1].source


def test_scenario_points_refuse_what_a_trace_cannot_score():
    config = MoEConfig.tiny()
    scenario = RoutingScenario("x", synthetic_trace_for(config, 8, zipf=1.0, seed=0))
    with pytest.raises(ArgumentValueError, match="prefetch hit rate"):
        scenario_points(config, [scenario], [StrategySpec.of("expert_streaming", prefetch=True)])
    pinned = StrategySpec.of("expert_cache", slots_per_layer=2, policy="static_hot", popularity=((1,) * 8,) * 4)
    with pytest.raises(ArgumentValueError, match="pin it themselves"):
        scenario_points(config, [scenario], [pinned])
    with pytest.raises(ArgumentValueError, match="distinct names"):
        scenario_points(config, [scenario, scenario], [StrategySpec.of("all_on_device")])


@pytest.mark.slow
def test_shipped_points_are_todays():
    """The file holds one row per (default scenario, quick-grid setting, link); a fresh
    evaluation of a sample gives exactly its figures; and its first scenario, the sweep's own
    assumption, gives the hit rates, device bytes and tokens/s of the shipped capacity sweep
    (the same machine times both)."""
    shipped = pd.read_csv(SHIPPED)
    config = MoEConfig.full()
    scenarios = default_scenarios(config)
    labels = [s.label for s in scored_grid(config)]
    assert list(dict.fromkeys(shipped["scenario"])) == [s.name for s in scenarios], REGENERATE
    for name, rows in shipped.groupby("scenario"):
        assert sorted(set(rows["label"])) == sorted(labels) and len(rows) == 3 * len(labels), REGENERATE
    sample = [
        StrategySpec.of("expert_cache", slots_per_layer=64, policy="static_hot", on_miss="host_compute"),
        StrategySpec.of("expert_cache", slots_per_layer=64, policy="lfu", on_miss="copy"),
    ]
    chosen = [scenarios[2], scenarios[3]]
    fresh = scenario_points(config, chosen, sample)
    key = ["scenario", "label", "link"]
    got = shipped.merge(fresh[key], on=key).set_index(key).sort_index()[COMPARED]
    want = fresh.set_index(key).sort_index()[COMPARED]
    assert len(got) == len(want) == 12
    pd.testing.assert_frame_equal(got, want, check_dtype=False, obj=f"the shipped scenario points ({REGENERATE})")
    sweep = pd.read_csv(DATA / "capacity_sweep.csv")
    own = shipped[shipped["scenario"] == scenarios[0].name].merge(sweep, on=["label", "link"], suffixes=("", " sweep"))
    assert len(own) == 3 * len(labels)
    for column in ("expected_hit_rate", "device_bytes", "tok/s", "link_MiB/token"):
        assert np.allclose(own[column].fillna(-1), own[f"{column} sweep"].fillna(-1)), column
