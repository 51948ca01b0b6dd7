"""Plans and layouts made once per process: equal strategies share one plan, a reused plan
gives the same rows as a fresh one, and the cache stays bounded."""

import pytest

from workbench.models import MoEConfig
from workbench.moe.strategies import expert_streaming, partial_offload, strategy_variants
from workbench.planning.memory_plan import plan
from workbench.machine import CostModel
from workbench.speed.graph_layout import layout_of
from workbench.speed.timer import time_decode
from workbench.strategy import all_on_device
from workbench.sweeps import InlineExecutor, ConfigSource, StrategySpec, sweep
from workbench.sweeps import reuse

TINY = MoEConfig.tiny()


@pytest.fixture(autouse=True)
def _fresh():
    reuse.forget()
    yield
    reuse.forget()


def test_strategies_built_alike_are_equal():
    """A grid spec and the same strategy built by hand compare equal (and hash alike): the
    placement rule is a value, not a closure, so a sweep point can find a plan made for it."""
    by_label = {s.label: s for s in strategy_variants(prefetch=True)}
    assert StrategySpec.of("all_on_device").build() == by_label["all_on_device+skip"] == all_on_device()
    assert StrategySpec.of("expert_streaming", prefetch=False).build() == by_label["expert_streaming+skip"]
    assert hash(all_on_device()) == hash(StrategySpec.of("all_on_device").build())
    assert all_on_device() != all_on_device(skip_copies=False)
    assert all_on_device("cuda:0") != all_on_device("cuda:1")
    assert partial_offload(1) != partial_offload(2)


def test_equal_requests_share_one_plan_and_layout():
    """The same (program, strategy, algorithm) gives the very same plan; another strategy or
    algorithm gives its own; a layout is made once per (plan, prefetch hit rate)."""
    program = ConfigSource(TINY).program(False)
    first = reuse.planned(program, all_on_device(), "greedy")
    assert reuse.planned(program, all_on_device(), "greedy") is first
    assert reuse.planned(program, all_on_device(), "naive") is not first
    other = reuse.planned(program, expert_streaming(), "greedy")
    assert other is not first and other.device_graph.copies
    layout = reuse.laid_out(other, 0.0)
    assert reuse.laid_out(other, 0.0) is layout
    assert reuse.laid_out(other, 0.5) is not layout


def test_a_reused_plan_times_like_a_fresh_one():
    """What the cache hands back is what planning and laying out afresh give."""
    program = ConfigSource(TINY).program(False)
    strategy = expert_streaming()
    model = CostModel.preset("h200", link="pcie_gen5")
    reused = time_decode(reuse.laid_out(reuse.planned(program, strategy, "greedy")), model)
    fresh_plan = plan(strategy.apply(program), "greedy")
    fresh = time_decode(layout_of(fresh_plan), model)
    assert reused == fresh
    assert dict(reuse.planned(program, strategy, "greedy").arena_bytes) == dict(fresh_plan.arena_bytes)


def test_the_cache_is_bounded():
    """At most KEEP plans are remembered: the least recently asked for is made again."""
    program = ConfigSource(TINY).program(False)
    others = [partial_offload(n, skip_copies=skip) for n in range(4) for skip in (True, False)]
    assert len(others) >= reuse.KEEP
    first = reuse.planned(program, all_on_device(skip_copies=False), "greedy")
    for strategy in others[: reuse.KEEP - 1]:
        reuse.planned(program, strategy, "greedy")
    assert reuse.planned(program, all_on_device(skip_copies=False), "greedy") is first  # now the newest
    for strategy in others[: reuse.KEEP]:
        reuse.planned(program, strategy, "naive")
    assert reuse.planned(program, all_on_device(skip_copies=False), "greedy") is not first


def test_a_sweep_after_planning_the_same_strategies_gives_the_same_rows():
    """A sweep whose points were planned before (as the walkthrough's full-size table does)
    returns exactly the rows of a sweep that planned everything itself."""
    grid = {"all_on_device": {}, "expert_streaming": {"prefetch": [False]}, "partial_offload": {"n_host_layers": [1]}}
    args = (TINY, [0.001, 1.0], ["pcie_gen4", "nvlink_c2c"], grid, InlineExecutor())
    cold = sweep(*args, prefetch_hit_rate=0.5).points.drop(columns=["seconds", "pid", "peak_rss_MiB"], errors="ignore")
    reuse.forget()
    program = ConfigSource(TINY).program(False)
    for strategy in (all_on_device(), expert_streaming()):
        reuse.planned(program, strategy, "greedy")
    warm = sweep(*args, prefetch_hit_rate=0.5).points.drop(columns=["seconds", "pid", "peak_rss_MiB"], errors="ignore")
    assert warm.equals(cold)
