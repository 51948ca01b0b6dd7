"""``compare_with_executorch``: both systems on one model, and the reason for every difference.

Optional: skipped when ``executorch`` is not installed. Each (case, flags) is compared
once per session (ExecuTorch's lowering is the slow step).
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("executorch")

import workbench as wb  # noqa: E402
from workbench.compare import (  # noqa: E402
    COPY_CASES,
    CrossCheckInputError,
    CrossCheckTypeError,
    SideBySide,
    case,
    side_by_side_view,
)
from workbench.place import PlacementError  # noqa: E402

slow_et = [pytest.mark.executorch, pytest.mark.slow]
SETTINGS = [(False, False), (True, False), (False, True)]


@functools.cache
def compared(name: str, flags: tuple[bool, bool] = (False, False)) -> SideBySide:
    c = case(name)
    model, inputs = c.build()
    return wb.compare_with_executorch(model, inputs, c.rules, flags, name=name)


@pytest.mark.parametrize("flags", SETTINGS, ids=["plain", "skip_h2d", "skip_d2h"])
@pytest.mark.parametrize("name", [c.name for c in COPY_CASES])
class TestEveryCase:
    pytestmark = slow_et

    def test_copy_counts_are_each_systems_own(self, name, flags):
        """The copy rows hold the workbench's propagated copies and ExecuTorch's imported
        et_copy calls, per kind (NA for ExecuTorch when it refused)."""
        r = compared(name, flags)
        rows = r.table().set_index(["quantity", "of"])
        dg = r.workbench_graph
        for kind, count in dg.copy_counts().items():
            assert rows.loc[("copies per call", kind), "workbench"] == count
            et = rows.loc[("copies per call", kind), "executorch"]
            if r.executorch is None:
                assert pd.isna(et)
            else:
                assert et == r.executorch.program.copy_counts().get(kind, 0)

    def test_every_difference_has_a_reason_and_none_is_unexplained(self, name, flags):
        """A row whose two sides differ (or where ExecuTorch failed) says why, and no copy
        difference is left unexplained by the patterns."""
        table = compared(name, flags).table()
        differing = table[(table["difference"].fillna(1) != 0)]
        assert (differing["reason"].str.len() > 0).all(), differing
        assert not table["reason"].str.contains("unexplained").any(), table["reason"].tolist()

    def test_lower_bounds_are_below_the_buffers(self, name, flags):
        """Buffer rows: each side's bytes are at least its tensors' lower bound."""
        table = compared(name, flags).table()
        buffers = table[table["quantity"] == "buffer bytes"]
        assert (buffers["workbench_lower_bound"] <= buffers["workbench"]).all()
        known = buffers.dropna(subset=["executorch"])
        assert (known["executorch_lower_bound"] <= known["executorch"]).all()


@pytest.mark.executorch
@pytest.mark.slow
class TestReasons:
    def test_per_edge_copy_is_named(self):
        """shared_value: the extra h2d is explained as a per-edge copy of addmm."""
        table = compared("shared_value").table().set_index(["quantity", "of"])
        assert table.loc[("copies per call", "h2d"), "difference"] == 1
        assert table.loc[("copies per call", "h2d"), "reason"].startswith("per-edge copies: 1 copy")

    def test_through_host_pairs_with_the_direct_copy(self):
        """two_devices: ExecuTorch's extra d2h and h2d are one trip through the host, and
        the workbench's d2d is what replaces it."""
        table = compared("two_devices").table().set_index(["quantity", "of"])
        for kind in ("h2d", "d2h"):
            assert table.loc[("copies per call", kind), "difference"] == 1
            assert "copies through the host" in table.loc[("copies per call", kind), "reason"]
        assert table.loc[("copies per call", "d2d"), "difference"] == -1

    def test_weights_copied_per_call_and_resident(self):
        """param_on_device with skip-h2d: the h2d bytes ExecuTorch adds are the weights it
        copies every call; the workbench's constant bytes on the device are its resident weights."""
        r = compared("param_on_device", (True, False))
        table = r.table().set_index(["quantity", "of"])
        weights = sum(
            p.numel() * p.element_size() for n, p in case("param_on_device").model().named_parameters() if "weight" in n
        )
        assert table.loc[("bytes copied per call", "h2d"), "difference"] == weights
        assert "parameters copied to a device" in table.loc[("bytes copied per call", "h2d"), "reason"]
        assert table.loc[("constant bytes", "cuda:0"), "workbench"] == r.workbench.constant_bytes["cuda:0"] > 0

    def test_materialised_views_explain_the_host_buffer(self):
        """shared_value: ExecuTorch's larger host buffer is explained by the two weight
        transposes it materialises, and the planners' own results are given."""
        reason = compared("shared_value").table().set_index(["quantity", "of"]).loc[("buffer bytes", "cpu"), "reason"]
        assert "materialised views (ExecuTorch only): 2,048 B" in reason and "planning:" in reason

    def test_executorch_failure_is_a_result(self):
        """param_on_device without flags crashes ExecuTorch 1.5.1: every row says where and
        how, the workbench side is still there."""
        r = compared("param_on_device")
        assert r.executorch is None and r.et_stage == "to_executorch"
        table = r.table()
        assert table["executorch"].isna().all()
        assert table["reason"].str.startswith("ExecuTorch failed in to_executorch").all()


@pytest.mark.executorch
@pytest.mark.slow
@pytest.mark.parametrize("name, flags", [("two_devices", (False, False)), ("param_on_device", (False, False))])
def test_two_column_view_builds(name, flags):
    """The two-column view lays out the table and one column per system (the ExecuTorch
    column says it failed when it did)."""
    box = side_by_side_view(compared(name, flags))
    table, columns = box.children
    assert "<table" in table.value
    left, right = columns.children
    assert "ExecuTorch" in left.children[0].value and "workbench" in right.children[0].value
    assert len(right.children) == 4
    assert len(left.children) == (2 if compared(name, flags).executorch is None else 4)


def test_bad_input_is_refused_before_anything_runs():
    """Bad flags, node: patterns and a wrong object for the view are clear errors."""
    c = case("two_delegates")
    model, inputs = c.build()
    with pytest.raises(CrossCheckInputError, match="pair of bools"):
        wb.compare_with_executorch(model, inputs, c.rules, (1, 0))
    with pytest.raises(PlacementError, match="node:"):
        wb.compare_with_executorch(model, inputs, {"cuda:0": ["node:relu"]})
    with pytest.raises(CrossCheckTypeError, match="SideBySide"):
        side_by_side_view(c)


def test_entry_points_load_lazily():
    """``import workbench`` loads neither the ExecuTorch import nor the comparison; the
    names resolve on first use."""
    code = (
        "import sys, workbench as wb; "
        "assert 'workbench.executorch' not in sys.modules and 'workbench.compare' not in sys.modules; "
        "assert callable(wb.from_executorch) and callable(wb.compare_with_executorch); "
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr
