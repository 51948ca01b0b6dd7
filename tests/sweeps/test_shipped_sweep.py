"""The sweep points notebook 06 reads from a file are the walkthrough's capacity sweep as
the code computes it today."""

from pathlib import Path

import pandas as pd

from workbench.models import MoEConfig
from workbench.sweeps import InlineExecutor, SweepResult, default_grid, expand, sweep
from workbench.app.walkthrough import deployment_cost_model

SHIPPED = Path(__file__).resolve().parents[2] / "notebooks" / "data" / "capacity_sweep.csv"
REGENERATE = "stale: regenerate it with `python notebooks/data/capacity_sweep.py`"
# a few settings of every kind whose figures do not depend on the measured prefetch hit rate
SAMPLE = {
    "all_on_device": {},
    "partial_offload": {"n_host_layers": [20]},
    "expert_cache": {"slots_per_layer": [64], "policy": ["lfu", "static_hot"], "on_miss": ["copy", "host_compute"]},
}
COMPARED = ["device_bytes", "ms/token", "tok/s", "link_MiB/token", "overlap", "expected_hit_rate", "hit_rate_source"]


def test_shipped_points_are_the_default_sweep_of_today():
    """The file holds one row per (default-grid setting, link) of the full-size model, and
    a fresh sweep of a sample of its settings gives exactly its figures."""
    shipped = pd.read_csv(SHIPPED)
    config = MoEConfig.full()
    labels = [spec.label for spec in expand(default_grid(config))]
    assert sorted(set(shipped["label"])) == sorted(labels), REGENERATE
    assert len(shipped) == len(labels) * 3
    fresh = sweep(config, budgets=[80], strategies=SAMPLE, executor=InlineExecutor(), cost_model=deployment_cost_model()).points
    key = ["label", "link"]
    got = shipped.merge(fresh[key], on=key).set_index(key).sort_index()[COMPARED]
    want = fresh.set_index(key).sort_index()[COMPARED]
    got, want = (f.fillna({"hit_rate_source": ""}) for f in (got, want))  # a CSV reads "" back as missing
    assert len(got) == len(want)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, obj=f"the shipped points ({REGENERATE})")
    best = SweepResult.from_points(shipped, [8, 80], ["pcie_gen4"], "shipped").best
    assert best["fits"].all() and (best["device_bytes"] <= best["budget_GiB"] * 2**30).all()


def test_quick_grid_gives_the_whole_grids_answers():
    """The walkthrough's quick grid is a subset of the default grid, and on the shipped
    points of the whole grid it picks, at every default budget and link, the same best
    setting with the same tokens/s as the whole grid does."""
    from workbench.sweeps import DEFAULT_BUDGETS_GIB, quick_grid

    shipped = pd.read_csv(SHIPPED)
    config = MoEConfig.full()
    quick = [spec.label for spec in quick_grid(config)]
    assert set(quick) <= {spec.label for spec in expand(default_grid(config))}
    assert len(quick) * 2 < len(expand(default_grid(config)))
    links = ["pcie_gen4", "pcie_gen5", "nvlink_c2c"]
    whole = SweepResult.from_points(shipped, DEFAULT_BUDGETS_GIB, links, "whole").best
    trimmed = SweepResult.from_points(shipped[shipped["label"].isin(quick)], DEFAULT_BUDGETS_GIB, links, "quick").best
    columns = ["budget_GiB", "link", "fits", "label", "tok/s", "device_bytes"]
    pd.testing.assert_frame_equal(trimmed[columns], whole[columns])
