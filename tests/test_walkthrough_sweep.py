"""The walkthrough's capacity sweep: it reuses the full-size capture in this process, and
the command prints its answer table without progress bars when stderr is not a terminal."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench.sweeps.source
from workbench.app import walkthrough as wt
from workbench.models import MoEConfig
from workbench.sweeps import ConfigSource, default_grid, expand, quick_grid

ROOT = Path(__file__).resolve().parents[1]


def test_capacity_sweep_reuses_the_full_size_capture(monkeypatch):
    """full_size_results captures through the sweep's per-process cache, so a capacity
    sweep after it (in this process, the default) captures nothing again; it sweeps the
    quick grid, or every setting with full_grid=True."""
    config = MoEConfig.tiny()
    full = wt.full_size_results(config, prefetch_hit_rate=0.5)
    assert {r.plan.device_graph.program for r in full if r.strategy.prefetch} == {ConfigSource(config).program(True)}
    assert {r.plan.device_graph.program for r in full if not r.strategy.prefetch} == {ConfigSource(config).program(False)}

    def no_capture(*args, **kwargs):
        raise AssertionError("captured again")

    monkeypatch.setattr(workbench.sweeps.source, "capture", no_capture)
    result = wt.capacity_sweep(config, budgets=[1.0], prefetch_hit_rate=0.5)
    assert list(dict.fromkeys(result.points["label"])) == [s.label for s in quick_grid(config)]
    assert len(result.workers) == 1 and result.workers["pid"].iloc[0] == os.getpid()
    whole = wt.capacity_sweep(config, budgets=[1.0], prefetch_hit_rate=0.5, full_grid=True)
    assert whole.points["label"].nunique() == len(expand(default_grid(config)))


@pytest.mark.slow
def test_walkthrough_command_prints_the_answer_without_progress_bars(tmp_path):
    """``python -m workbench walkthrough`` on the tiny model (tiny as the "full size" too)
    exits 0, prints the answer table and the tie rule, and with stderr not a terminal
    draws no progress bar (no tqdm rate such as "strategy/s" or "figure/s")."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), WORKBENCH_DISABLE_CUDA="1")
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "walkthrough", "--full-config", "tiny", "--out", str(tmp_path / "out")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "best strategy per budget and link" in done.stdout and "goes to the simpler strategy" in done.stdout
    assert "sweeps.quick_grid" in done.stdout
    assert "/s]" not in done.stderr and "%|" not in done.stderr, done.stderr[-2000:]
    assert (tmp_path / "out" / "sweep_best.csv").exists()
