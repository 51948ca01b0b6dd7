"""Cross-check of the workbench's memory plans against ExecuTorch's MemoryPlanningPass.

Optional: skipped when ``executorch`` is not installed (``pip install executorch==1.5.1``).
Each (case, flags) is lowered by ExecuTorch once per session, on first use (lowering is
the slow step); the tests read those results.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import pytest

pytest.importorskip("executorch")

from workbench.compare import (  # noqa: E402 - after the skip, on purpose
    ARENA_CASES,
    ARENA_REASONS,
    ExecuTorchNotInstalled,
    arena_table,
    case,
    compare_arena_case,
    compare_arenas,
    executorch_arena_bytes,
)
from workbench.executorch import executorch_api  # noqa: E402
from workbench.place import PlacementError  # noqa: E402
from workbench.planning import PlanVerificationError  # noqa: E402

slow_et = [pytest.mark.executorch, pytest.mark.slow]

CPU_ONLY = [c.name for c in ARENA_CASES if not c.rules]
# placed cases whose device delegates are one op each, so device arenas compare
ONE_OP_PLACED = ["mlp", "residual", "fanout", "attention", "shared_value", "two_devices"]
FLAGS = [(False, False), (False, True)]


@functools.cache
def result(name: str, skip_h2d: bool = False, skip_d2h: bool = False):
    """The ArenaComparison of one case and flag setting, computed once per session."""
    return compare_arena_case(case(name), [(skip_h2d, skip_d2h)])[0]


@pytest.mark.parametrize("name", CPU_ONLY)
class TestCpuOnly:
    pytestmark = slow_et

    def test_best_no_larger_than_executorch(self, name):
        """CPU only: the workbench's ``best`` host arena is no larger than ExecuTorch's
        (greedy at the same alignment, inputs and outputs planned on both sides)."""
        r = result(name)
        assert r.et.ok, r.et.error
        assert set(r.et.arena_bytes) == {"cpu"}
        assert r.wb_best["cpu"] <= r.et.arena_bytes["cpu"], r.rows()

    def test_best_reaches_its_lower_bound_and_never_exceeds_greedy(self, name):
        """On these small graphs the workbench's ``best`` is at its lower bound and never
        above its ``greedy`` (a regression in ``best`` or the lower bound fails here)."""
        r = result(name)
        assert r.wb_lower_bound["cpu"] <= r.wb_best["cpu"] <= r.wb_greedy["cpu"]
        assert r.wb_best["cpu"] == r.wb_lower_bound["cpu"], r.rows()


@pytest.mark.parametrize("flags", FLAGS, ids=["plain", "skip_d2h"])
@pytest.mark.parametrize("name", ONE_OP_PLACED)
class TestPlaced:
    pytestmark = slow_et

    def test_every_arena_no_larger_than_executorch(self, name, flags):
        """Placed with one-op device delegates: on the host and on every device the
        workbench's ``best`` arena is no larger than ExecuTorch's, under the same skip
        flags (graph inputs/outputs planned or owned by the caller alike)."""
        r = result(name, *flags)
        assert r.et.ok, r.et.error
        assert r.one_op_delegates, r.wb_delegates
        assert any(d != "cpu" for d in r.et.arena_bytes), "the rules must place something on a device"
        for device in r.devices:
            assert r.comparable(device)
            assert r.wb_best.get(device, 0) <= r.et.arena_bytes.get(device, 0), r.rows()

    def test_same_delegates_on_both_sides(self, name, flags):
        """Both systems delegated the same ops to the same devices, so the device arenas
        hold the same computation (a partitioner mismatch would fail here)."""
        r = result(name, *flags)
        assert [d.signature() for d in r.wb_delegates] == [d.signature() for d in r.et.delegates]


def _all_results():
    out = [result(name) for name in CPU_ONLY]
    out += [result(name, *flags) for name in ONE_OP_PLACED for flags in FLAGS]
    return out


@pytest.mark.executorch
@pytest.mark.slow
def test_every_difference_is_explained():
    """Every tensor only one side plans has a known reason (a view ExecuTorch materializes,
    an unread output, a per-argument or through-host copy …): none is unexplained, so
    no arena difference is left unaccounted."""
    for r in _all_results():
        assert not r.unexplained, (r.model, r.rules_text, r.unexplained)
        assert all(t.reason in ARENA_REASONS for t in r.one_sided)


@pytest.mark.executorch
@pytest.mark.slow
def test_reading_of_executorch_plan_is_consistent():
    """The tensors read off ExecuTorch's graph are its whole plan: the workbench's verifier
    finds no overlap in ExecuTorch's own offsets, each buffer's size is exactly the top
    of its highest tensor, and no buffer is below the lower bound of its tensors."""
    for r in _all_results():
        r.et.verify()
        tops: dict[int, int] = {}
        for t in r.et.tensors:
            tops[t.mem_id] = max(tops.get(t.mem_id, 0), t.offset + t.size)
        for mem_id, size in enumerate(r.et.buffer_sizes[1:], start=1):
            assert tops.get(mem_id, 0) == size, (r.model, mem_id, tops, r.et.buffer_sizes)
        for device, lb in r.et_tensors_lower_bound.items():
            assert lb <= r.et.arena_bytes[device]


@pytest.mark.executorch
@pytest.mark.slow
def test_verifier_catches_a_misread_offset():
    """The consistency check above can fail: moving one ExecuTorch tensor onto another
    live one in the same buffer makes ``verify`` raise."""
    et = result("mlp_cpu").et
    tensors = list(et.tensors)
    a = max(tensors, key=lambda t: t.size)
    b = next(t for t in tensors if t is not a and t.mem_id == a.mem_id and t.start <= a.end and a.start <= t.end)
    tensors[tensors.index(b)] = dataclasses.replace(b, offset=a.offset)
    with pytest.raises(PlanVerificationError):
        dataclasses.replace(et, tensors=tuple(tensors)).verify()


@pytest.mark.executorch
@pytest.mark.slow
def test_workbench_algorithms_no_worse_on_executorch_tensors():
    """Same tensors, same lifetimes: the workbench's ``best`` on ExecuTorch's own tensors
    needs no more than ExecuTorch's greedy, and no less than their lower bound."""
    for r in _all_results():
        for device, best in r.et_tensors_best.items():
            assert r.et_tensors_lower_bound[device] <= best <= r.et.arena_bytes[device], r.rows()


@pytest.mark.executorch
@pytest.mark.slow
class TestAccounting:
    def test_weight_transposes_are_what_executorch_adds_on_the_host(self):
        """mlp on the host: the only tensors ExecuTorch plans and the workbench does not
        are the three transposed weights (permute_copy of a parameter), 32×32 float32 each."""
        r = result("mlp_cpu")
        extra = [t for t in r.one_sided if t.side == "executorch"]
        assert [(t.op, t.reason, t.nbytes) for t in extra] == [("permute_copy", "view_copy", 32 * 32 * 4)] * 3
        assert not [t for t in r.one_sided if t.side == "workbench"]

    def test_layer_norm_statistics_are_unread_outputs(self):
        """residual: native_layer_norm's mean and rstd (4×1 float32, 16 bytes aligned) are
        planned by ExecuTorch though nothing reads them: two per norm, two norms."""
        r = result("residual_cpu")
        unread = [t for t in r.one_sided if t.reason == "unread_output"]
        assert len(unread) == 4 and all(t.op == "native_layer_norm" and t.nbytes == 16 for t in unread)

    def test_value_read_by_two_delegates_is_copied_twice_by_executorch(self):
        """shared_value: the host value read by two device delegates is one extra h2d copy
        in ExecuTorch's device arena (one per delegate argument)."""
        r = result("shared_value")
        extra = [t for t in r.one_sided if t.reason == "per_argument_copy"]
        assert len(extra) == 1 and extra[0].device == "cuda:0" and extra[0].side == "executorch"

    def test_cross_device_value_goes_through_the_host_in_executorch(self):
        """two_devices: ExecuTorch's d2h + h2d pair against the workbench's one d2d."""
        r = result("two_devices")
        sides = sorted((t.side, t.op) for t in r.one_sided if t.reason == "through_host")
        assert sides == [("executorch", "d2h_copy"), ("executorch", "h2d_copy"), ("workbench", "d2d_copy")]

    def test_weights_copied_per_call_are_resident_in_the_workbench(self):
        """param_on_device with skip-h2d (the only setting ExecuTorch lowers): its device
        arena holds per-call copies of both weight transposes; the workbench keeps the
        weights resident, so its device arena is smaller."""
        c = case("param_on_device")
        r = compare_arenas(c.model(), c.example_inputs(), c.rules, True, False, name=c.name)
        assert r.et.ok, r.et.error
        copied = [t for t in r.one_sided if t.reason == "resident_weight"]
        weights = sum(p.numel() * p.element_size() for n, p in c.model().named_parameters() if "weight" in n)
        assert sum(t.nbytes for t in copied) == weights
        assert r.wb_best["cuda:0"] < r.et.arena_bytes["cuda:0"]


@pytest.mark.executorch
@pytest.mark.slow
def test_executorch_crash_is_a_result():
    """A parameter as a device delegate's argument crashes ExecuTorch 1.5.1's memory
    planning: the crash is returned (stage and message), not raised."""
    c = case("param_on_device")
    r = executorch_arena_bytes(c.model(), c.example_inputs(), c.rules)
    assert not r.ok, "ExecuTorch 1.5.1 crashed here; a newer one may not (update the case)"
    assert r.stage == "to_executorch" and r.arena_bytes == {}


@pytest.mark.executorch
@pytest.mark.slow
def test_table_has_a_row_per_device():
    """arena_table: one row per (comparison, device), with both sides' bytes."""
    rows = [result("two_devices"), result("mlp_cpu")]
    table = arena_table(rows)
    assert list(table["device"]) == ["cpu", "cuda:0", "cuda:1", "cpu"]
    assert list(table["wb_best"]) == [rows[0].wb_best[d] for d in ("cpu", "cuda:0", "cuda:1")] + [rows[1].wb_best["cpu"]]
    assert list(table["et_bytes"]) == [rows[0].et.arena_bytes[d] for d in ("cpu", "cuda:0", "cuda:1")] + [
        rows[1].et.arena_bytes["cpu"]
    ]


# --- bad input: fast, ExecuTorch never lowers anything -----------------------------------


def _tiny():
    return case("two_delegates").model(), case("two_delegates").example_inputs()


def test_node_patterns_are_refused():
    """'node:' patterns cannot be matched on ExecuTorch's graph: a clear error."""
    model, inputs = _tiny()
    with pytest.raises(PlacementError, match="node:.*op patterns"):
        executorch_arena_bytes(model, inputs, {"cuda:0": ["node:relu"]})


def test_bad_flags_are_refused():
    """Skip flags must be bools; the error names what was given."""
    model, inputs = _tiny()
    with pytest.raises(ValueError, match="pair of bools"):
        executorch_arena_bytes(model, inputs, None, 1, 0)


def test_unknown_case_lists_the_valid_ones():
    """case() with an unknown name says which cases exist."""
    with pytest.raises(KeyError, match="valid names are mlp"):
        case("nope")


def test_table_and_case_runner_refuse_other_types():
    """arena_table takes ArenaComparison results; compare_arena_case takes a Case."""
    with pytest.raises(TypeError, match="compare_arenas"):
        arena_table([{"case": "x"}])
    with pytest.raises(TypeError, match="Case"):
        compare_arena_case("mlp")


def test_missing_executorch_says_how_to_install(monkeypatch):
    """Without executorch, executorch_arena_bytes raises an ImportError with the pip command."""
    monkeypatch.setitem(sys.modules, "executorch", None)
    executorch_api.cache_clear()
    try:
        model, inputs = _tiny()
        with pytest.raises(ExecuTorchNotInstalled, match=r"pip install executorch==1\.5\.1"):
            executorch_arena_bytes(model, inputs, {"cuda:0": ["aten.relu"]})
    finally:
        monkeypatch.undo()
        executorch_api.cache_clear()
