"""Resuming a sweep from its ``out=`` file, and several writers of one file.

Properties:
- A re-run with the same program, weights, cost model and grid reuses every saved point
  and runs nothing; a larger grid runs only its new points, and a smaller one keeps the
  file's other points.
- A re-run whose program (twice the experts), weight formats, cost model, planning
  algorithm or expected hit rate differs from the saved points' is refused before any
  work, naming what differs and how to go on; the file is left as it was. A file
  without key columns is refused the same way.
- Conflicting ``weights=`` rules are refused before any point runs, naming both rules.
- Two processes sweeping into one file, and two processes hammering one file with
  writes, lose none of each other's points.
- A routing trace whose label is a spreadsheet formula lands in the file as text (a
  leading ``'``), and reads back as the label it was.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
from concurrent.futures import Executor
from pathlib import Path

import pandas as pd
import pytest

from workbench.models import MoEConfig
from workbench.moe import RoutingTrace, synthetic_trace_for
from workbench.machine import CostModel
from workbench.sweeps import InlineExecutor, SweepError, expand, sweep
from workbench.sweeps.result import read_points
from workbench.weight_formats import WeightFormatError

from conftest import starts_no_formula

ROOT = Path(__file__).resolve().parents[2]
TINY = MoEConfig.tiny()
GRID = {"all_on_device": {}, "experts_on_host": {}, "expert_streaming": {"prefetch": [True]}}
LINKS = ("pcie_gen4",)
BUDGETS = (1.0,)
RULES = {"q4_k": ["module:layers.*.mlp.experts"]}


class _Counting(Executor):
    """Runs tasks inline and records the label of each one submitted."""

    def __init__(self) -> None:
        self.inline, self.ran = InlineExecutor(), []

    def submit(self, fn, /, *args, **kwargs):
        self.ran.append(args[0].spec.label)
        return self.inline.submit(fn, *args, **kwargs)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A finished sweep of GRID into a file: (path, its bytes, the result)."""
    out = tmp_path_factory.mktemp("resume") / "points.csv"
    result = sweep(TINY, BUDGETS, LINKS, GRID, InlineExecutor(), out=out)
    return out, out.read_bytes(), result


def _copy(saved, tmp_path) -> Path:
    out = tmp_path / "points.csv"
    out.write_bytes(saved[1])
    return out


def test_a_rerun_with_everything_equal_reuses_every_point(saved, tmp_path):
    """Nothing runs again and the points are the first sweep's."""
    out = _copy(saved, tmp_path)
    executor = _Counting()
    again = sweep(TINY, BUDGETS, LINKS, GRID, executor, out=out)
    assert executor.ran == []
    pd.testing.assert_frame_equal(again.points, saved[2].points, check_dtype=False)


CHANGES = {
    "twice the experts": ({"model": MoEConfig.tiny(num_experts=16)}, "another program"),
    "other weight formats": ({"weights": RULES}, "other weight formats"),
    "another cost model": ({"cost_model": CostModel.preset("a100_80gb")}, "another cost model"),
    "another planning algorithm": ({"algorithm": "best"}, "another planning algorithm"),
    "another prefetch hit rate": ({"prefetch_hit_rate": 0.5}, r"expert_streaming\(prefetch=True\) .*another expected hit rate"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_rerun_of_another_sweep_is_refused_by_name(change, saved, tmp_path):
    """The differing part is named with how to go on; nothing runs; the file is untouched."""
    out = _copy(saved, tmp_path)
    kwargs, words = CHANGES[change]
    model = kwargs.pop("model", TINY)
    executor = _Counting()
    with pytest.raises(SweepError, match=rf"out={out}: .*{words}.*new out= path.*delete") as caught:
        sweep(model, BUDGETS, LINKS, GRID, executor, out=out, **kwargs)
    assert "cannot resume" in str(caught.value)
    assert executor.ran == [] and out.read_bytes() == saved[1]


def test_a_file_without_keys_is_refused(saved, tmp_path):
    """Points saved without the key columns cannot be told apart: refused, not reused."""
    out = tmp_path / "points.csv"
    saved[2].points.to_csv(out, index=False)
    with pytest.raises(SweepError, match="no key columns"):
        sweep(TINY, BUDGETS, LINKS, GRID, _Counting(), out=out)


def test_a_larger_grid_runs_only_its_new_points_and_a_smaller_one_keeps_the_rest(saved, tmp_path):
    """A superset grid runs only its new entries; a later subset sweep reuses its entries
    and leaves every other point in the file."""
    out = _copy(saved, tmp_path)
    larger = {**GRID, "partial_offload": {"n_host_layers": [1, 2]}}
    executor = _Counting()
    sweep(TINY, BUDGETS, LINKS, larger, executor, out=out)
    assert executor.ran == [s.label for s in expand({"partial_offload": {"n_host_layers": [1, 2]}})]
    smaller = _Counting()
    sweep(TINY, BUDGETS, LINKS, {"all_on_device": {}}, smaller, out=out)
    assert smaller.ran == []
    assert set(read_points(out)["label"]) == {s.label for s in expand(larger)}


def test_conflicting_weight_rules_are_refused_before_any_work():
    """Two equally specific patterns claiming the experts for q4_k and q8_0: refused with
    both patterns and formats named, before any point is submitted."""
    executor = _Counting()
    rules = {"q4_k": ["module:layers.*.mlp.experts"], "q8_0": ["module:layers.*.mlp.experts"]}
    with pytest.raises(WeightFormatError, match=r"weights= refused .*before any point ran: .*'module:layers\.\*\.mlp\.experts' "
                                                r"for q4_k and by pattern 'module:layers\.\*\.mlp\.experts' for q8_0"):
        sweep(TINY, BUDGETS, LINKS, GRID, executor, weights=rules)
    assert executor.ran == []


_SWEEPER = """
import sys
from workbench.models import MoEConfig
from workbench.sweeps import InlineExecutor, sweep
grid = {sys.argv[2]: {"n_host_layers": [0, 1, 2, 3, 4]} if sys.argv[2] == "partial_offload" else {}}
grid.update({"all_on_device": {}, "experts_on_host": {}} if sys.argv[2] != "partial_offload" else {})
sweep(MoEConfig.tiny(), (1.0,), ("pcie_gen4", "nvlink_c2c"), grid, InlineExecutor(), out=sys.argv[1])
"""


def _run_together(script: str, *argument_lists: list[str]) -> None:
    """Start one Python process per argument list at once and wait for all of them."""
    procs = [subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for args in argument_lists]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]


def test_two_processes_sweeping_into_one_file_lose_nothing(tmp_path):
    """Two processes, two grids, one ``out=``: the file holds every point of both, each
    equal to the same point swept alone."""
    out = tmp_path / "shared.csv"
    _run_together(_SWEEPER, [str(out), "partial_offload"], [str(out), "expert_streaming"])
    points = read_points(out)
    alone = pd.concat([
        sweep(TINY, BUDGETS, ("pcie_gen4", "nvlink_c2c"), {"partial_offload": {"n_host_layers": [0, 1, 2, 3, 4]}},
              InlineExecutor()).points,
        sweep(TINY, BUDGETS, ("pcie_gen4", "nvlink_c2c"), {"expert_streaming": {}, "all_on_device": {},
              "experts_on_host": {}}, InlineExecutor()).points,
    ])  # fmt: skip
    assert len(points) == len(alone) == 16
    got = points.set_index(["label", "link"])["device_bytes"].sort_index()
    assert got.to_dict() == alone.set_index(["label", "link"])["device_bytes"].sort_index().to_dict()


_HAMMER = """
import sys
from pathlib import Path
from workbench.models import MoEConfig
from workbench.machine import CostModel
from workbench.sweeps import StrategySpec
from workbench.sweeps.resume import PointWriter, sweep_key
from workbench.sweeps.source import ConfigSource
specs = [StrategySpec.of("partial_offload", n_host_layers=i) for i in range(60)]
key = sweep_key(ConfigSource(MoEConfig.tiny()), None, CostModel.preset(), specs, "greedy", {s: (None, "") for s in specs})
writer = PointWriter(Path(sys.argv[1]), key, [])
first = int(sys.argv[2])
for spec in specs[first:first + 30]:
    writer.add([{"strategy": spec.name, "line": spec.line, "label": spec.label, "link": "pcie_gen4",
                 "device_bytes": 1, "device_GiB": 0.0, "resident_GiB": 0.0, "arena_MiB": 0.0, "host_GiB": 0.0,
                 "ms/token": 1.0, "tok/s": 1000.0, "link_MiB/token": 0.0, "overlap": 0.0,
                 "expected_hit_rate": None, "hit_rate_source": ""}])
"""


def test_two_processes_writing_one_file_at_once_lose_no_point(tmp_path):
    """Two processes each merge 30 points into one file, one point a write, at the same
    time: all 60 points are there at the end (the read-merge-write is locked)."""
    out = tmp_path / "hammered.csv"
    _run_together(_HAMMER, [str(out), "0"], [str(out), "30"])
    wanted = {s.label for s in expand({"partial_offload": {"n_host_layers": list(range(60))}})}
    labels = read_points(out)["label"].tolist()
    assert len(labels) == 60 and set(labels) == wanted


def test_a_formula_trace_label_is_written_as_text_and_read_back_as_it_was(tmp_path):
    """A trace labelled ``=HYPERLINK(...)`` (the hit rate's source of every cache point):
    no cell of the file starts a formula; a resumed sweep gives the label back unchanged
    and runs nothing."""
    label = '=HYPERLINK("http://example.invalid","click")'
    synthetic = synthetic_trace_for(TINY, 64, zipf=1.0, reuse=0.3, seed=0)
    trace = RoutingTrace(synthetic.experts, synthetic.num_experts, False, label)
    grid = {"expert_cache": {"slots_per_layer": [4], "policy": ["lru"], "on_miss": ["copy"]}, "all_on_device": {}}
    out = tmp_path / "points.csv"
    first = sweep(TINY, BUDGETS, LINKS, grid, InlineExecutor(), trace=trace, out=out)
    assert label in set(first.points["hit_rate_source"])
    with open(out, newline="") as f:
        cells = [cell for row in csv.reader(f) for cell in row]
    assert "'" + label in cells
    assert starts_no_formula(cells)
    executor = _Counting()
    again = sweep(TINY, BUDGETS, LINKS, grid, executor, trace=trace, out=out)
    assert executor.ran == [] and label in set(again.points["hit_rate_source"])

