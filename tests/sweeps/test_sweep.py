"""Budget sweeps: best-per-budget fits its budget, every executor gives the same tables,
bad arguments are clear errors."""

import functools
import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.models import MoEConfig
from workbench.sweeps import (
    InlineExecutor,
    ConfigSource,
    SpecError,
    StrategySpec,
    SweepError,
    SweepResult,
    SweepTask,
    TIE_RTOL,
    best_per_budget,
    evaluate,
    expand,
    process_pool,
    sweep,
)
from workbench.machine import CostModel

from conftest import moe_tiny

TINY = MoEConfig.tiny()
# a small grid over every kind of strategy (the prefetching one needs the hinted program)
GRID = {
    "all_on_device": {},
    "experts_on_host": {},
    "expert_streaming": {"prefetch": [False, True]},
    "partial_offload": {"n_host_layers": [1, 3]},
}
LINKS = ("pcie_gen4", "nvlink_c2c")
# KiB-scale budgets for the tiny model: none fits, some fit, all fit
BUDGETS = (0.0004, 0.00065, 0.0014, 1.0)


@functools.lru_cache(maxsize=None)
def inline_sweep():
    return sweep(TINY, BUDGETS, LINKS, GRID, InlineExecutor(), prefetch_hit_rate=0.5)


def _comparable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.reset_index(drop=True)


def test_points_cover_every_spec_and_link():
    """One row per (spec, link), in the order given, with the device figures filled in."""
    result = inline_sweep()
    specs = expand(GRID)
    assert list(result.points["label"]) == [s.label for s in specs for _ in LINKS]
    assert list(result.points["link"]) == list(LINKS) * len(specs)
    assert (result.points["device_bytes"] > 0).all() and (result.points["tok/s"] > 0).all()
    prefetch = result.points["label"] == "expert_streaming(prefetch=True)"
    assert (result.points.loc[prefetch, "expected_hit_rate"] == 0.5).all()
    assert result.points.loc[~prefetch, "expected_hit_rate"].isna().all()


def test_best_per_budget_fits_and_is_best():
    """Each best row uses at most its budget of device memory, and no point of its link
    that fits is faster; a budget nothing fits says so."""
    result = inline_sweep()
    points = result.points
    assert len(result.best) == len(BUDGETS) * len(LINKS)
    assert result.best["fits"].tolist().count(False) >= 1  # the smallest budget fits nothing
    for _, row in result.best.iterrows():
        feasible = points[(points["link"] == row["link"]) & (points["device_bytes"] <= row["budget_GiB"] * 2**30)]
        assert row["fits"] == (not feasible.empty)
        if row["fits"]:
            assert row["device_bytes"] <= row["budget_GiB"] * 2**30
            # the fastest, or a simpler strategy that ties with it (TIE_RTOL)
            assert feasible["tok/s"].max() * (1 - TIE_RTOL) <= row["tok/s"] <= feasible["tok/s"].max()


@st.composite
def point_tables(draw):
    n = draw(st.integers(1, 12))
    links = ["a", "b"]
    return pd.DataFrame(
        {
            "label": [f"s{i}" for i in range(n)],
            "strategy": "s",
            "line": "s",
            "link": [draw(st.sampled_from(links)) for _ in range(n)],
            "device_bytes": [draw(st.integers(1, 10 * 2**30)) for _ in range(n)],
            "tok/s": [draw(st.floats(0.1, 1000)) for _ in range(n)],
            **{c: 0.0 for c in ("device_GiB", "resident_GiB", "arena_MiB", "host_GiB", "ms/token", "link_MiB/token",
                                "overlap", "expected_hit_rate")},
            "hit_rate_source": "",
        }
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(point_tables(), st.lists(st.floats(0.01, 12), min_size=1, max_size=4))
def test_best_per_budget_property(points, budgets):
    """For any table of points: the best row of a (budget, link) fits the budget, is the
    fastest point that fits, and exists exactly when some point fits."""
    best = best_per_budget(points, budgets, ["a", "b"])
    for _, row in best.iterrows():
        fit = points[(points["link"] == row["link"]) & (points["device_bytes"] <= row["budget_GiB"] * 2**30)]
        assert row["fits"] == (not fit.empty)
        if row["fits"]:
            assert row["device_bytes"] <= row["budget_GiB"] * 2**30
            assert row["tok/s"] == fit["tok/s"].max()


@pytest.mark.slow
def test_process_pool_gives_the_same_tables():
    """Two spawned worker processes give exactly the in-process points and best table,
    and each worker reports its peak memory."""
    with process_pool(2) as pool:
        result = sweep(TINY, BUDGETS, LINKS, GRID, pool, prefetch_hit_rate=0.5)
    reference = inline_sweep()
    pd.testing.assert_frame_equal(_comparable(result.points), _comparable(reference.points))
    pd.testing.assert_frame_equal(_comparable(result.best), _comparable(reference.best))
    assert result.workers["tasks"].sum() == len(expand(GRID))
    assert (result.workers["peak_rss_MiB"] > 0).all()


@pytest.mark.slow
def test_dask_executor_gives_the_same_tables():
    """A Dask LocalCluster's client.get_executor() runs the same sweep unchanged and gives
    the same tables, with the workers' statistical profiler on (Dask's default): it holds
    the frames of the task threads it samples, which made torch.export in a task thread
    lift a traced torch.arange as a fake constant (``sweeps.source``, rule 3)."""
    distributed = pytest.importorskip("distributed")
    import dask

    with dask.config.set({"distributed.worker.profile.enabled": True}), distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        result = sweep(TINY, BUDGETS, LINKS, GRID, client.get_executor(), prefetch_hit_rate=0.5)
    reference = inline_sweep()
    pd.testing.assert_frame_equal(_comparable(result.points), _comparable(reference.points))
    pd.testing.assert_frame_equal(_comparable(result.best), _comparable(reference.best))
    assert result.workers["tasks"].sum() == len(expand(GRID))


def test_tasks_are_small_and_picklable():
    """What a worker receives is a config and a spec: it pickles to a few hundred bytes."""
    task = SweepTask(0, ConfigSource(MoEConfig.full()), StrategySpec.of("partial_offload", n_host_layers=8),
                     LINKS, CostModel.preset("h200"), "greedy", None, "")  # fmt: skip
    assert len(pickle.dumps(task)) < 4096
    assert pickle.loads(pickle.dumps(task)) == task


def test_partial_offload_memory_falls_with_host_layers():
    """More host layers: fewer device bytes, more host bytes, and the ends equal
    all_on_device and experts_on_host."""
    result = inline_sweep()
    one = result.points[result.points["link"] == LINKS[0]].set_index("label")
    po1, po3 = one.loc["partial_offload(n_host_layers=1)"], one.loc["partial_offload(n_host_layers=3)"]
    assert po3["device_bytes"] < po1["device_bytes"] < one.loc["all_on_device", "device_bytes"]
    assert po3["host_GiB"] >= po1["host_GiB"]
    ends = sweep(TINY, BUDGETS, LINKS[:1], {"partial_offload": {"n_host_layers": [0, 4]}}, InlineExecutor())
    got = ends.points.set_index("label")["device_bytes"]
    assert got["partial_offload(n_host_layers=0)"] == one.loc["all_on_device", "device_bytes"]
    assert got["partial_offload(n_host_layers=4)"] == one.loc["experts_on_host", "device_bytes"]


def test_program_sweeps_in_process():
    """A captured Program sweeps in this process; shipping it to a pool is refused."""
    *_, program = moe_tiny()
    grid = {"all_on_device": {}, "partial_offload": {"n_host_layers": [2]}}
    result = sweep(program, BUDGETS, LINKS[:1], grid)
    assert len(result.points) == 2
    with process_pool(1) as pool, pytest.raises(SweepError, match="stays in this process"):
        sweep(program, BUDGETS, LINKS[:1], grid, pool)
    with pytest.raises(SweepError, match="give strategies="):
        sweep(program, BUDGETS, LINKS[:1])


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"budgets": []}, SweepError, "budgets must be positive"),
        ({"budgets": [8, -1]}, SweepError, "budgets must be positive"),
        ({"links": ["pcie_gen9"]}, SweepError, "unknown link preset"),
        ({"strategies": {"warp_drive": {}}}, SpecError, "unknown strategy 'warp_drive'"),
        ({"strategies": {"partial_offload": {"n_host_layers": [-1]}}}, wb.WorkbenchError, "n_host_layers must be"),
        ({"strategies": {"partial_offload": {"layers": [1]}}}, SpecError, "unexpected keyword"),
        ({"strategies": {}}, SpecError, "grid is empty"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, error, message):
    """Bad budgets, links, strategy names or parameters fail before any work, saying what is valid."""
    args = {"budgets": BUDGETS, "links": LINKS, "strategies": GRID, "executor": InlineExecutor(), **kwargs}
    with pytest.raises(error, match=message):
        sweep(TINY, **args)
    with pytest.raises(SweepError, match="takes a MoEConfig"):
        sweep("qwen", BUDGETS)


def test_too_many_host_layers_names_the_range():
    """partial_offload past the model's layers is an error naming the valid range."""
    task = SweepTask(0, ConfigSource(TINY), StrategySpec.of("partial_offload", n_host_layers=5), LINKS,
                     CostModel.preset("h200"), "greedy", None, "")  # fmt: skip
    with pytest.raises(wb.WorkbenchError, match=r"in \[0, 4\]"):
        evaluate(task)


def test_expand_grid():
    """A grid expands to the cartesian product of its values, in order, without repeats."""
    specs = expand({"expert_streaming": {"prefetch": [False, True], "skip_copies": True}, "all_on_device": {}})
    assert [s.label for s in specs] == [
        "expert_streaming(prefetch=False, skip_copies=True)",
        "expert_streaming(prefetch=True, skip_copies=True)",
        "all_on_device",
    ]
    assert specs[0].line == specs[0].label  # no axis parameter
    po = StrategySpec.of("partial_offload", n_host_layers=3)
    assert po.line == "partial_offload" and po.axis_value == 3


def test_pareto_figure_has_a_panel_per_link():
    """The Pareto figure draws one panel per link, a line per strategy setting and the frontier."""
    result = inline_sweep()
    fig = result.pareto_figure()
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == list(LINKS)
    labels = {line.get_label() for line in axes[0].get_lines()}
    assert {"partial_offload", "all_on_device", "Pareto frontier"} <= labels
    frontier = next(line for line in axes[0].get_lines() if line.get_label() == "Pareto frontier")
    assert np.all(np.diff(frontier.get_ydata()) > 0)  # a frontier only rises


def test_pareto_figure_has_one_legend_naming_each_line_once():
    """One legend for the whole figure (none per panel, so none drawn over another), and in
    it every strategy line and the frontier, each once."""
    fig = inline_sweep().pareto_figure()
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.get_axes())
    shown = [text.get_text() for text in fig.legends[0].get_texts()]
    drawn = {line.get_label() for ax in fig.get_axes() for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert len(shown) == len(set(shown)) and set(shown) == drawn


def test_answer_table_reads_the_best_rows():
    """The walkthrough's answer table has one row per (budget, link), names the best
    strategy and its parameters, and says '(nothing fits)' where no point fits."""
    from workbench.app.walkthrough import answer_table

    result = inline_sweep()
    table = answer_table(result)
    assert len(table) == len(result.best)
    assert (table.loc[~result.best["fits"], "best"] == "(nothing fits)").all()
    fits = result.best["fits"]
    assert (table.loc[fits, "best"] == result.best.loc[fits, "strategy"]).all()
    offload = table["best"] == "partial_offload"
    assert table.loc[offload, "parameters"].str.fullmatch(r"n_host_layers=\d+").all()


def test_from_points_rebuilds_the_result(tmp_path):
    """A result rebuilt from its points — also after a CSV round trip, as the CLI writes
    them — picks the same best rows; points without the columns or links are refused."""
    result = inline_sweep()
    again = SweepResult.from_points(result.points, BUDGETS, LINKS, "saved")
    pd.testing.assert_frame_equal(again.best, result.best)
    result.points.to_csv(tmp_path / "sweep.csv", index=False)
    read = SweepResult.from_points(pd.read_csv(tmp_path / "sweep.csv"), BUDGETS, LINKS, "saved")
    columns = ["budget_GiB", "link", "fits", "label", "device_bytes", "tok/s"]
    pd.testing.assert_frame_equal(read.best[columns], result.best[columns], check_dtype=False)
    assert read.workers.empty and read.seconds == 0.0
    with pytest.raises(SweepError, match=r"points lack the columns \['tok/s'\]"):
        SweepResult.from_points(result.points.drop(columns=["tok/s"]), BUDGETS, LINKS, "saved")
    with pytest.raises(SweepError, match=r"no point was estimated under the link\(s\) \['pcie_gen5'\]"):
        SweepResult.from_points(result.points, BUDGETS, ["pcie_gen5"], "saved")
    with pytest.raises(SweepError, match="budgets must be positive"):
        SweepResult.from_points(result.points, [0], LINKS, "saved")


def _tie_points(rates: dict[str, float]) -> pd.DataFrame:
    """One point per strategy name on link "a", each with the tok/s given, the simpler
    strategies using more device memory (so fewer bytes alone would not pick them)."""
    names = list(rates)
    return pd.DataFrame(
        {
            "label": names,
            "strategy": names,
            "line": names,
            "link": "a",
            "device_bytes": [2**30 * (10 - i) for i in range(len(names))],
            "tok/s": list(rates.values()),
            **{c: 0.0 for c in ("device_GiB", "resident_GiB", "arena_MiB", "host_GiB", "ms/token", "link_MiB/token",
                                "overlap", "expected_hit_rate")},
            "hit_rate_source": "",
        }
    )  # fmt: skip


def test_a_tie_goes_to_the_simpler_strategy_and_is_named():
    """tok/s within TIE_RTOL of the fastest is a tie: the simplest strategy of the tie is
    chosen (SIMPLICITY) even when it is a hair slower or uses more memory, and tied_with
    names the others; outside the tolerance the fastest wins and nothing is tied."""
    from workbench.sweeps import SIMPLICITY, TIE_RTOL

    assert SIMPLICITY.index("all_on_device") < SIMPLICITY.index("expert_cache")
    near = 83.152 * (1 - TIE_RTOL / 2)
    best = best_per_budget(_tie_points({"all_on_device": near, "expert_streaming": 70.0, "expert_cache": 83.152}), [80], ["a"])
    row = best.iloc[0]
    assert row["strategy"] == "all_on_device" and row["tied_with"] == "expert_cache"
    far = 83.152 * (1 - 3 * TIE_RTOL)
    row = best_per_budget(_tie_points({"all_on_device": far, "expert_cache": 83.152}), [80], ["a"]).iloc[0]
    assert row["strategy"] == "expert_cache" and row["tied_with"] == ""
    row = best_per_budget(_tie_points({"all_on_device": 83.152, "expert_cache": 83.152}), [9.5], ["a"]).iloc[0]
    assert row["strategy"] == "expert_cache" and row["tied_with"] == ""  # the simpler one does not fit
