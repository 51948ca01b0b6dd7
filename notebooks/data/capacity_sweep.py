"""Write ``capacity_sweep.csv`` beside this file: every point of the walkthrough's capacity
sweep of the published Qwen3.5-35B-A3B (bf16, shape-only) over the whole grid —
``walkthrough.capacity_sweep(full_grid=True)``, the sweep ``python -m workbench walkthrough
--full-grid`` writes as ``sweep.csv``.

Notebook 06 reads these points instead of sweeping (the capture of the 40-layer model
alone takes longer than the notebook should); ``tests/sweeps/test_shipped_sweep.py`` checks
that a fresh sweep of some of its settings still gives the same rows. Run it again, from
the repository root, whenever the cost model or a strategy changes:

    python notebooks/data/capacity_sweep.py
"""

from __future__ import annotations

from pathlib import Path

from workbench.app import walkthrough
from workbench.atomic_files import atomic_path

if __name__ == "__main__":
    result = walkthrough.capacity_sweep(workers=2, full_grid=True)  # the points do not depend on the workers (sweeps rule 4)
    with atomic_path(Path(__file__).with_name("capacity_sweep.csv"), "a table") as tmp:  # all points or the old file
        result.points.to_csv(tmp, index=False)
    print(result)
