"""Cross-check of the workbench's copy insertion against ExecuTorch's PropagateDevicePass.

Optional: skipped when ``executorch`` is not installed (``pip install executorch==1.5.1``).
Every case of ``workbench.compare.COPY_CASES`` is compared under all four settings of
the skip flags once per session (ExecuTorch's lowering is the slow step); the tests read
those results.
"""

from __future__ import annotations

import sys

import pytest
import torch

pytest.importorskip("executorch")

from workbench.compare import (  # noqa: E402 - after the skip, on purpose
    COPY_CASES,
    FLAG_SETTINGS,
    ExecuTorchNotInstalled,
    case,
    compare_case,
    compare_copies,
    compare_settings,
    comparison_table,
    executorch_available,
    executorch_copies,
)
from workbench.compare import lowering  # noqa: E402
from workbench.executorch import executorch_api  # noqa: E402
from workbench.place import PlacementError, pattern_matches  # noqa: E402

slow_et = [pytest.mark.executorch, pytest.mark.slow]


@pytest.fixture(scope="module")
def results():
    """{(case name, skip_h2d, skip_d2h): CopyComparison} for every case and setting."""
    out = {}
    for c in COPY_CASES:
        for r in compare_case(c, FLAG_SETTINGS):
            out[(c.name, r.skip_h2d, r.skip_d2h)] = r
    return out


@pytest.mark.parametrize("name", [c.name for c in COPY_CASES])
class TestEveryCase:
    pytestmark = slow_et

    def test_same_delegates_on_both_sides(self, results, name):
        """Both systems formed the same delegates (device and ops), so the copy counts
        compare one placement; a partitioner that matched different ops would fail here."""
        for flags in FLAG_SETTINGS:
            r = results[(name, *flags)]
            assert r.wb_delegates, "the rules must place something on a device"
            assert r.same_delegates, (r.wb_delegates, r.et.delegates)

    def test_workbench_never_copies_more(self, results, name):
        """Where ExecuTorch produced a program, the workbench inserts no more copies and
        moves no more bytes per call than it, under every flag setting."""
        for flags in FLAG_SETTINGS:
            r = results[(name, *flags)]
            if r.et.ok:
                assert r.wb_total <= r.et_total, r.row()
                assert r.wb_total_bytes <= r.et_total_bytes, r.row()

    def test_workbench_output_equals_eager(self, results, name):
        """The workbench's propagated graph, copies included, returns the eager output
        under every flag setting (including those ExecuTorch refuses)."""
        for flags in FLAG_SETTINGS:
            assert results[(name, *flags)].wb_equals_eager


@pytest.mark.executorch
@pytest.mark.slow
class TestDifferences:
    @pytest.mark.parametrize("name", ["shared_value", "shared_input"])
    def test_value_feeding_two_delegates_is_copied_once(self, results, name):
        """A value read by two delegates on one device: ExecuTorch copies it once per
        delegate (the same value appears in two of its h2d copies), the workbench once,
        so the workbench has strictly fewer copies."""
        r = results[(name, False, False)]
        et_values = [c.value for c in r.et.copies if c.kind == "h2d"]
        assert len(et_values) > len(set(et_values)), r.et.copies
        assert r.wb_total < r.et_total, r.row()
        assert r.wb_counts["h2d"] == r.et.copy_counts()["h2d"] - 1

    def test_cross_device_value_is_one_direct_copy(self, results):
        """cuda:0 → cuda:1: the workbench copies directly (one d2d); ExecuTorch has no
        d2d and bounces through the host, so it needs strictly more copies."""
        r = results[("two_devices", False, False)]
        assert r.wb_counts["d2d"] == 1
        assert r.wb_total < r.et_total, r.row()

    @pytest.mark.parametrize("name", ["shared_input", "residual_stack"])
    def test_skip_h2d_refused_by_executorch_works_in_workbench(self, results, name):
        """skip-h2d on an input with two users: ExecuTorch refuses in to_executorch; the
        workbench supplies the input on the device (one h2d fewer than without the
        flag) and its graph still returns the eager output."""
        r = results[(name, True, False)]
        assert not r.et.ok
        assert r.et.stage == "to_executorch"
        assert "skip_h2d_for_method_inputs" in r.et.error
        assert "exactly one user" in r.et.error
        plain = results[(name, False, False)]
        assert r.wb_counts["h2d"] == plain.wb_counts["h2d"] - 1
        assert r.wb_equals_eager

    def test_parameter_feeding_a_delegate_crashes_executorch(self, results):
        """A parameter as a device delegate's argument crashes ExecuTorch 1.5.1's memory
        planning (skip flags off); the workbench keeps the weights resident on the device
        (no copy of any parameter) and returns the eager output."""
        r = results[("param_on_device", False, False)]
        assert not r.et.ok, "ExecuTorch 1.5.1 crashed here; a newer one may not (update the case)"
        assert r.et.stage == "to_executorch"
        weights = sum(p.numel() * p.element_size() for p in case("param_on_device").model().parameters())
        assert r.wb_resident_bytes["cuda:0"] == weights
        copied = {c.value for c in _wb_copies("param_on_device")}
        assert not any(v.startswith("p_") for v in copied), copied
        assert r.wb_equals_eager

    def test_parameter_with_skip_h2d_copies_weights_per_call(self, results):
        """With skip-h2d, ExecuTorch lowers the same model but copies the host-computed
        weight transposes to the device on every call: each of the two weights' bytes
        appears among its h2d copies, none among the workbench's."""
        r = results[("param_on_device", True, False)]
        assert r.et.ok, r.et.error
        m = case("param_on_device").model()
        weight_bytes = m.fc1.weight.numel() * m.fc1.weight.element_size()
        big = [c for c in r.et.copies if c.kind == "h2d" and c.nbytes == weight_bytes]
        assert len(big) == 2, r.et.copies
        assert r.wb_total_bytes < r.et_total_bytes


def _wb_copies(name: str):
    import workbench as wb

    c = case(name)
    placed = wb.place(wb.capture(c.model(), c.example_inputs(), decompose=True), c.rules)
    return wb.propagate(placed).copies


@pytest.mark.executorch
@pytest.mark.slow
def test_executorch_counts_read_from_its_graph(results):
    """The ExecuTorch counts are read correctly: for two delegates separated by a host op
    every delegate input and output crosses once, so ExecuTorch has exactly one h2d and
    one d2h per delegate (one d2h fewer when the last output may stay on the device), each
    moving one (batch × width) float32 activation."""
    c = case("two_delegates")
    (x,) = c.example_inputs()
    activation = x.numel() * x.element_size()
    r = results[("two_delegates", False, False)]
    assert r.et.copy_counts() == {"h2d": 2, "d2h": 2}
    assert r.et.copy_bytes() == {"h2d": 2 * activation, "d2h": 2 * activation}
    assert results[("two_delegates", False, True)].et.copy_counts() == {"h2d": 2, "d2h": 1}


@pytest.mark.executorch
@pytest.mark.slow
def test_comparison_table_has_a_row_per_result(results):
    """The table has one row per comparison, and its counts are the results' counts."""
    rows = list(results.values())
    table = comparison_table(rows)
    assert len(table) == len(rows)
    assert list(table["wb_copies"]) == [r.wb_total for r in rows]
    failed = table[table["et_error"].notna()]
    assert len(failed) == sum(not r.et.ok for r in rows)
    assert failed["et_copies"].isna().all()


# --- bad input: fast, ExecuTorch is never run -------------------------------------------


def _tiny():
    return case("two_delegates").model(), case("two_delegates").example_inputs()


def test_node_patterns_are_refused():
    """'node:' patterns name nodes, which differ between the two graphs: a clear error
    that says so and what to use instead."""
    model, inputs = _tiny()
    with pytest.raises(PlacementError, match="node:.*op patterns"):
        compare_copies(model, inputs, {"cuda:0": ["node:relu"]})


def test_unknown_device_is_refused():
    """An unknown device type in the rules is an error that lists the valid types."""
    model, inputs = _tiny()
    with pytest.raises(PlacementError, match="valid types are cpu, cuda"):
        executorch_copies(model, inputs, {"tpu:0": ["aten.relu"]})


def test_callable_rules_are_refused():
    """The cross-check needs a rule mapping (the partitioner must rebuild it on the edge
    graph); a callable is refused with a message showing the expected form."""
    model, inputs = _tiny()
    with pytest.raises(PlacementError, match="mapping"):
        compare_copies(model, inputs, lambda node: None)


def test_bad_flag_settings_are_refused():
    """A flag setting that is not a pair of bools is an error naming what was given."""
    model, inputs = _tiny()
    with pytest.raises(ValueError, match="pair of bools"):
        compare_settings(model, inputs, {"cuda:0": ["aten.relu"]}, [(1, 0)])


def test_comparison_table_refuses_other_rows():
    """comparison_table takes comparison results only, and says where they come from."""
    with pytest.raises(TypeError, match="compare_copies"):
        comparison_table([{"case": "x"}])


def test_missing_executorch_says_how_to_install(monkeypatch):
    """Without executorch the functions raise an ImportError that gives the pip command,
    and executorch_available() is False."""
    monkeypatch.setitem(sys.modules, "executorch", None)
    executorch_api.cache_clear()
    try:
        assert not executorch_available()
        model, inputs = _tiny()
        with pytest.raises(ExecuTorchNotInstalled, match=r"pip install executorch==1\.5\.1") as info:
            executorch_copies(model, inputs, {"cuda:0": ["aten.relu"]})
        assert isinstance(info.value, ImportError)
    finally:
        monkeypatch.undo()
        executorch_api.cache_clear()


@pytest.mark.executorch
@pytest.mark.slow  # the first import of ExecuTorch's compiler takes several seconds
def test_edge_ops_match_by_their_aten_name():
    """The workbench's matcher (the partitioner runs ``place``) claims an edge op by the
    aten name the workbench uses: 'aten.add' (no overload) and 'aten.add.Tensor' both
    match edge aten.add.Tensor, and 'aten.addmm' does not match it."""
    from executorch.exir.dialects._ops import ops as exir_ops

    graph = torch.fx.Graph()
    a = graph.placeholder("a")
    node = graph.call_function(exir_ops.edge.aten.add.Tensor, (a, a))
    assert pattern_matches(node, "op", "aten.add")
    assert pattern_matches(node, "op", "aten.add.Tensor")
    assert pattern_matches(node, "op", "aten.*")
    assert not pattern_matches(node, "op", "aten.addmm")


@pytest.mark.executorch
@pytest.mark.slow
def test_workbench_failure_in_partitioner_is_raised_not_blamed_on_executorch(monkeypatch):
    """A failure of the workbench's own placement inside the partitioner propagates as an
    exception; it is never recorded as an ExecuTorch refusal."""

    def broken_place(*args, **kwargs):
        raise RuntimeError("placement bug")

    monkeypatch.setattr(lowering, "place", broken_place)
    model, inputs = _tiny()
    with pytest.raises(RuntimeError, match="placement bug"):
        executorch_copies(model, inputs, {"cuda:0": ["aten.relu"]})
