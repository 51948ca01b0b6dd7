"""Write ``capacity_scenarios.csv`` beside this file: the strategy settings of the quick grid
(``sweeps.quick_grid``, which gives the whole grid's answers at the notebook's budgets) that a
routing trace can score (``capacity_scenarios.scored_grid``: all but prefetching ones) of the
published Qwen3.5-35B-A3B (bf16, shape-only), evaluated under every routing scenario of
``workbench.app.capacity_scenarios.default_scenarios``: the sweep's own assumption, a static
cache pinned on other tokens or another seed, flatter and uniform routing.

Notebook 06 reads these points instead of evaluating them (a few minutes); the test
``tests/test_capacity_scenarios.py`` checks that a fresh evaluation of some of them still
gives the same rows. Run it again, from the repository root, whenever the cost model, a
strategy or the capacity sweep changes (with ``capacity_sweep.py``):

    python notebooks/data/capacity_scenarios.py
"""

from __future__ import annotations

from pathlib import Path

from workbench.app.capacity_scenarios import default_scenarios, scenario_points
from workbench.atomic_files import atomic_path
from workbench.models import MoEConfig

if __name__ == "__main__":
    config = MoEConfig.full()
    points = scenario_points(config, default_scenarios(config))
    with atomic_path(Path(__file__).with_name("capacity_scenarios.csv"), "a table") as tmp:  # all points or the old file
        points.to_csv(tmp, index=False)
    print(f"{len(points)} points: {points['scenario'].nunique()} scenarios × {points['label'].nunique()} settings × "
          f"{points['link'].nunique()} links")
