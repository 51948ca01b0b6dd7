"""Importing ExecuTorch programs: the imported data equals what ExecuTorch reports itself.

Optional: skipped when ``executorch`` is not installed. Each (case, flags) is lowered by
ExecuTorch once per session (lowering is the slow step); the tests read those programs,
in memory and as ``.pte`` bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections import Counter

import pytest
import torch

pytest.importorskip("executorch")

import workbench as wb  # noqa: E402
from workbench.compare import COPY_CASES, case, executorch_arena_bytes  # noqa: E402
from workbench.compare.lowering import lower, rule_partitioner, short_op_name  # noqa: E402
from workbench.planning import PlanVerificationError  # noqa: E402
from workbench.executorch import (  # noqa: E402
    ExecuTorchImportTypeError,
    ExecuTorchNotInstalled,
    ExecuTorchWithoutDeviceSupport,
    MissingDeviceMetadata,
    NotAnExecuTorchProgram,
    UnsupportedProgram,
    executorch_api,
    find_patterns,
    from_executorch,
)

slow_et = [pytest.mark.executorch, pytest.mark.slow]

# (case, flags): the held-in examples placed on a device, the copy cases, and flag settings
# ExecuTorch accepts for them; param_on_device lowers only with skip-h2d.
PROGRAMS = [
    ("mlp", (False, False)),
    ("mlp", (False, True)),
    ("residual", (False, False)),
    ("fanout", (False, False)),
    ("fanout", (True, True)),
    ("attention", (False, False)),
    ("two_delegates", (True, False)),
    ("shared_value", (False, False)),
    ("shared_input", (False, True)),
    ("residual_stack", (False, False)),
    ("two_devices", (False, False)),
    ("two_devices", (True, True)),
    ("param_on_device", (True, False)),
]


@functools.cache
def lowered(name: str, flags: tuple[bool, bool] = (False, False)):
    """ExecuTorch's ExecutorchProgramManager for one case and flag setting."""
    c = case(name)
    model, inputs = c.build()
    partitioner = rule_partitioner(c.rules) if c.rules else None

    def failed(exc, stage, config):
        raise AssertionError(f"ExecuTorch failed on {name} {flags} in {stage}: {exc}")

    return lower(model, inputs, partitioner, [flags], lambda program, config: program, failed)[0]


def _et_copies(program) -> Counter:
    """Copies read off ExecuTorch's own final graph: (kind, bytes) → count."""
    out: Counter = Counter()
    for node in program.exported_program().graph_module.graph.nodes:
        if node.op == "call_function" and short_op_name(node) in (
            "h2d_copy",
            "d2h_copy",
        ):
            out[(short_op_name(node)[:3], int(node.meta["spec"].nbytes()))] += 1
    return out


@pytest.mark.parametrize("name, flags", PROGRAMS)
class TestAgainstExecuTorch:
    pytestmark = slow_et

    def test_copies_equal_executorch_graph(self, name, flags):
        """Every et_copy of the final graph (ExecuTorch's own API) is imported as a copy of
        the same kind moving the same bytes, and nothing else is."""
        program = lowered(name, flags)
        imported = from_executorch(program).program
        got = Counter((c.copy_kind, imported.copy_nbytes(c)) for c in imported.copies)
        assert got == _et_copies(program)

    def test_buffer_sizes_equal_executorch(self, name, flags):
        """Buffer sizes and their devices are ExecuTorch's non_const_buffer_sizes /
        non_const_buffer_device, and the per-device sums match its own memory reading."""
        program = lowered(name, flags)
        plan = program.executorch_program.execution_plan[0]
        imported = from_executorch(program).program
        assert list(imported.buffer_sizes) == list(plan.non_const_buffer_sizes)
        listed = {e.buffer_idx: f"cuda:{e.device_index}" for e in plan.non_const_buffer_device or ()}
        assert {i: str(d) for i, d in enumerate(imported.buffer_devices) if not d.is_host} == listed

    def test_planned_tensors_equal_executorch_specs(self, name, flags):
        """The planned storages read from the program (device, bytes, buffer, offset) are
        exactly the TensorSpecs ExecuTorch's memory planner placed in its graph."""
        c = case(name)
        model, inputs = c.build()
        specs = executorch_arena_bytes(model, inputs, c.rules, *flags)
        imported = from_executorch(lowered(name, flags)).program
        owners = {imported.storage(t.index) for t in imported.tensors.values() if t.memory_id is not None}
        got = Counter(
            (str(t.device), t.nbytes, t.memory_id, t.offset) for i, t in imported.tensors.items() if i in owners
        )
        want = Counter((t.device, t.nbytes, t.mem_id, t.offset) for t in specs.tensors)
        assert got == want

    def test_pte_bytes_give_the_same_data(self, name, flags):
        """The .pte path (ExecuTorch's deserializer) and the in-memory path give equal data."""
        program = lowered(name, flags)
        assert from_executorch(program.buffer).program == from_executorch(program).program

    def test_lower_bound_never_above_executorch(self, name, flags):
        """ExecuTorch's buffers of a device are never below the lower bound of the tensors
        the import reads into them (a misread lifetime or size would break this)."""
        imported = from_executorch(lowered(name, flags)).program
        bound = imported.lower_bound(16)
        for device, nbytes in imported.arena_bytes.items():
            assert bound.get(device, 0) <= nbytes


@pytest.mark.executorch
@pytest.mark.slow
def test_pte_file_and_edge_manager(tmp_path):
    """A .pte written to disk and the EdgeProgramManager it came from (finished by the
    import with non-CPU memory planning) give the same data as the lowering itself."""
    c = case("shared_value")
    model, inputs = c.build()
    et = executorch_api()
    edge = et.to_edge(
        torch.export.export(model, inputs),
        compile_config=et.EdgeCompileConfig(_check_ir_validity=False),
    )
    edge = edge.to_backend(rule_partitioner(c.rules))
    program = lowered("shared_value")
    path = tmp_path / "shared_value.pte"
    with open(path, "wb") as f:
        program.write_to_file(f)
    assert from_executorch(path).program == from_executorch(program).program
    assert from_executorch(str(path)).source == str(path)
    assert from_executorch(edge).program == from_executorch(program).program


@pytest.mark.executorch
@pytest.mark.slow
class TestPatterns:
    def _keys(self, name, flags=(False, False)):
        return Counter(p.key for p in find_patterns(from_executorch(lowered(name, flags)).program))

    def test_value_read_by_two_delegates_is_a_per_edge_copy(self):
        """shared_value: ExecuTorch's second h2d of the same host value is a per-edge copy."""
        patterns = find_patterns(from_executorch(lowered("shared_value")).program)
        edge = [p for p in patterns if p.key == "per_edge_copy"]
        assert len(edge) == 1 and edge[0].copies == {"h2d": 1} and str(edge[0].device) == "cuda:0"

    def test_cross_device_value_goes_through_the_host(self):
        """two_devices: one d2h + h2d pair from cuda:0 to cuda:1."""
        (through,) = [
            p for p in find_patterns(from_executorch(lowered("two_devices")).program) if p.key == "through_host"
        ]
        assert through.copies == {"d2h": 1, "h2d": 1} and str(through.device) == "cuda:1"

    def test_weights_copied_per_call(self):
        """param_on_device with skip-h2d: both weight transposes are copied every call."""
        assert self._keys("param_on_device", (True, False))["weight_copy"] == 2

    def test_materialised_views_and_unread_outputs(self):
        """residual: four weight transposes materialised, four layer-norm statistics unread."""
        keys = self._keys("residual")
        assert keys["materialised_view"] == 4 and keys["unread_output"] == 4

    def test_every_extra_copy_is_one_pattern(self):
        """For every copy case ExecuTorch lowers, its copies minus the workbench's equal
        the copies its patterns add (per kind), so no extra copy is left unexplained."""
        for c in COPY_CASES:
            for flags in ((False, False), (True, False)):
                try:
                    program = lowered(c.name, flags)
                except AssertionError:
                    continue  # ExecuTorch refused this setting
                imported = from_executorch(program).program
                model, inputs = c.build()
                dg = wb.propagate(
                    wb.place(wb.capture(model, inputs, decompose=True), c.rules),
                    skip_h2d_for_method_inputs=flags[0],
                    skip_d2h_for_method_outputs=flags[1],
                )
                added: Counter = Counter()
                for p in find_patterns(imported):
                    added.update(p.copies)
                for kind in ("h2d", "d2h"):
                    assert imported.copy_counts()[kind] - added[kind] == dg.copy_counts()[kind], (c.name, flags, kind)


# --- bad input ------------------------------------------------------------------------


def test_a_file_that_is_not_a_pte_is_refused(tmp_path):
    """A text file is refused with an error naming the file and what it lacks."""
    path = tmp_path / "notes.pte"
    path.write_text("not a program")
    with pytest.raises(
        NotAnExecuTorchProgram,
        match="notes.pte is not an ExecuTorch program.*identifier",
    ):
        from_executorch(path)


def test_missing_file_and_wrong_type_are_refused(tmp_path):
    """A missing path and an object that is no program get errors saying what is accepted."""
    with pytest.raises(NotAnExecuTorchProgram, match="no such file"):
        from_executorch(tmp_path / "missing.pte")
    with pytest.raises(ExecuTorchImportTypeError, match="ExecutorchProgramManager.*got dict"):
        from_executorch({"forward": None})


@pytest.mark.executorch
@pytest.mark.slow
def test_truncated_pte_is_refused():
    """A .pte cut short keeps its identifier but ExecuTorch's deserializer cannot read it:
    refused as not a program, with ExecuTorch's reason."""
    data = lowered("two_delegates", (True, False)).buffer
    with pytest.raises(NotAnExecuTorchProgram, match="deserializer cannot read it"):
        from_executorch(data[: len(data) // 3])


@pytest.mark.executorch
@pytest.mark.slow
def test_program_without_device_metadata_is_refused():
    """A program lowered for the host only carries no device metadata: refused, naming
    the missing fields and how to lower with devices; host_only=True imports it."""
    program = lowered("mlp_cpu")
    with pytest.raises(MissingDeviceMetadata, match="non_const_buffer_device is empty.*target_device"):
        from_executorch(program)
    imported = from_executorch(program, host_only=True).program
    assert not imported.copies and set(imported.arena_bytes) == {"cpu"}


@pytest.mark.executorch
@pytest.mark.slow
def test_control_flow_and_unknown_devices_are_refused():
    """A jump instruction (control flow) and a delegate whose target_device is no device
    the workbench knows are refused, each naming what it found."""
    et = executorch_api()
    schema = lowered("two_delegates", (True, False)).executorch_program
    plan = schema.execution_plan[0]
    chain = plan.chains[0]
    jump = et.schema.Instruction(et.schema.JumpFalseCall(cond_value_index=0, destination_instruction=0))
    jumping = dataclasses.replace(chain, instructions=[jump, *chain.instructions])
    with pytest.raises(UnsupportedProgram, match="JumpFalseCall: programs with control flow"):
        from_executorch(dataclasses.replace(schema, execution_plan=[dataclasses.replace(plan, chains=[jumping])]))
    npu = [et.CompileSpec("target_device", b"npu:0")]
    delegates = [dataclasses.replace(d, compile_specs=npu) for d in plan.delegates]
    with pytest.raises(UnsupportedProgram, match="target_device='npu:0'.*valid types are cpu, cuda"):
        from_executorch(dataclasses.replace(schema, execution_plan=[dataclasses.replace(plan, delegates=delegates)]))
    with pytest.raises(Exception, match="no method 'decode'; its methods are forward"):
        from_executorch(schema, method="decode")


def test_executorch_without_device_support_is_refused(monkeypatch):
    """An ExecuTorch whose compiler has no device propagation config is refused with an
    error naming what is missing and the supported version."""
    monkeypatch.setitem(sys.modules, "executorch.exir.passes.propagate_device_config", None)
    executorch_api.cache_clear()
    try:
        with pytest.raises(
            ExecuTorchWithoutDeviceSupport,
            match="no device support.*PropagateDeviceConfig.*1.5.1",
        ):
            from_executorch(b"ET12")
    finally:
        monkeypatch.undo()
        executorch_api.cache_clear()


def test_missing_executorch_says_how_to_install(monkeypatch):
    """Without executorch the import raises an ImportError with the pip command."""
    monkeypatch.setitem(sys.modules, "executorch", None)
    executorch_api.cache_clear()
    try:
        with pytest.raises(ExecuTorchNotInstalled, match=r"pip install executorch==1\.5\.1") as info:
            from_executorch(b"")
        assert isinstance(info.value, ImportError)
    finally:
        monkeypatch.undo()
        executorch_api.cache_clear()


# --- the workbench's own types: graph, plan, views, estimate ------------------------------


@pytest.mark.parametrize("name, flags", PROGRAMS)
@pytest.mark.executorch
@pytest.mark.slow
def test_graph_and_plan_hold_executorch_facts(name, flags):
    """The imported DeviceGraph has one copy record per et_copy (same kind, bytes and
    devices) and one delegate per delegate call on its device; the MemoryPlan keeps
    ExecuTorch's buffer bytes per device, passes the workbench's verifier at ExecuTorch's
    offsets, and its lower bound equals the program's."""
    imported = from_executorch(lowered(name, flags))
    p, dg, plan = imported.program, imported.device_graph, imported.memory_plan
    want = Counter((c.copy_kind, str(p.copy_source(c)), str(c.device), p.copy_nbytes(c)) for c in p.copies)
    assert Counter((str(r.kind), str(r.src), str(r.dst), r.nbytes) for r in dg.copies) == want
    assert [(d.name, d.device) for d in dg.placement.delegates] == [(c.name, c.device) for c in p.delegate_calls]
    assert dict(plan.arena_bytes) == p.arena_bytes
    plan.verify()
    assert dict(plan.lower_bound) == p.lower_bound(plan.alignment)
    assert all(plan.lower_bound[d] <= plan.arena_bytes[d] for d in plan.arena_bytes)


@pytest.mark.executorch
@pytest.mark.slow
def test_verifier_catches_a_misread_offset():
    """The plan check above can fail: moving one tensor onto another live one in the same
    buffer makes the verifier raise."""
    plan = from_executorch(lowered("residual")).memory_plan
    allocations = dict(plan.allocations)
    a = max(allocations.values(), key=lambda x: x.size)
    b = next(
        x for x in allocations.values() if x is not a and x.device == a.device and x.start <= a.end and a.start <= x.end
    )
    allocations[b.name] = dataclasses.replace(b, offset=a.offset)
    with pytest.raises(PlanVerificationError):
        dataclasses.replace(plan, allocations=allocations).verify()


@pytest.mark.parametrize("source", ["memory", "pte"])
@pytest.mark.executorch
@pytest.mark.slow
def test_views_build_from_both_paths(source):
    """GraphView, TimelineView (of the labelled estimate), the DOT export and the copies
    DataFrame build from an import of the lowering and of its .pte bytes, and show the
    same copies and delegates."""
    from workbench.views import GraphView, TimelineView, to_dot

    program = lowered("two_devices")
    imported = from_executorch(program if source == "memory" else program.buffer)
    assert GraphView(imported.memory_plan).png().startswith(b"\x89PNG")
    modeled = imported.estimate()
    assert "model" in modeled.label and "not a measurement" in modeled.note
    assert TimelineView(modeled, label=modeled.label).png().startswith(b"\x89PNG")
    dot = to_dot(imported.memory_plan)
    assert "delegate_0" in dot and "h2d_copy_1" in dot
    table = imported.copies_dataframe()
    assert list(table["kind"]) == ["h2d", "d2h", "h2d", "d2h"]
    assert list(table["dst"]) == ["cuda:0", "cpu", "cuda:1", "cpu"]


@pytest.mark.executorch
@pytest.mark.slow
def test_views_take_the_import_itself():
    """What ``from_executorch`` returns goes straight into every view and ``show``: the
    graph and buffer views read its memory plan (ExecuTorch's offsets), the timeline its
    modeled call."""
    from workbench.views import BufferView, GraphView, TimelineView, show

    imported = from_executorch(lowered("two_devices"))
    graph = GraphView(imported)
    assert graph.graph is imported.device_graph and graph.plan is imported.memory_plan
    assert BufferView(imported).plan is imported.memory_plan
    timeline = TimelineView(imported)
    assert len(timeline.data.bars) == len(imported.estimate().timeline)
    show(imported)  # the three views, linked
    with pytest.raises(wb.views.ViewInputError, match="from_executorch"):
        GraphView(imported.program)


@pytest.mark.executorch
@pytest.mark.slow
def test_buffer_view_builds_from_an_import():
    """BufferView draws ExecuTorch's own offsets (the plan's algorithm is "executorch"), and
    its dropdown re-plans the same tensors with the workbench's algorithms for comparison."""
    from workbench.views import BufferView

    plan = from_executorch(lowered("two_devices")).memory_plan
    view = BufferView(plan)
    assert view.algorithm_dropdown.value == "executorch" and "best" in view.algorithm_dropdown.options
    view.set_algorithm("best")
    replanned = view.planned["best"]
    assert all(replanned.arena_bytes[d] <= plan.arena_bytes[d] for d in plan.arena_bytes)


@pytest.mark.executorch
@pytest.mark.slow
def test_estimate_models_executorch_copies_and_delegates():
    """The modeled timeline has one event per et_copy (same kinds and bytes) on the
    destination's copy stream, one compute event per delegate on its device, the host
    kernels' FLOPs of the functional ops (addmm counted, not zero), and no copy of any
    result into its slot — not even of a multi-result kernel (residual's layer norms):
    ExecuTorch writes every result in place."""
    imported = from_executorch(lowered("two_devices"))
    events = imported.estimate().timeline.to_dataframe()
    for other in (events, from_executorch(lowered("residual")).estimate().timeline.to_dataframe()):
        assert (other["activity"] == "op").all(), other[other["activity"] != "op"]
    copies = events[events["kind"].isin(["h2d", "d2h"])]
    assert sorted(zip(copies["kind"], copies["nbytes"])) == sorted(
        (c.copy_kind, imported.program.copy_nbytes(c)) for c in imported.program.copies
    )
    delegates = events[events["node"].str.startswith("delegate_")]
    assert list(delegates["device"]) == ["cuda:0", "cuda:1"] and (delegates["flops"] == 0).all()
    assert events.loc[events["node"] == "addmm", "flops"].item() == 2 * 4 * 16 * 16


@pytest.mark.executorch
@pytest.mark.slow
def test_imported_calls_do_not_run():
    """An imported delegate cannot run in the workbench: running the graph says why."""
    from workbench.executorch.opaque_calls import ImportedCallNotRunnable

    dg = from_executorch(lowered("two_devices")).device_graph
    node = next(n for n in dg.graph.nodes if n.name == "delegate_0")
    with pytest.raises(ImportedCallNotRunnable, match="cannot run in the workbench"):
        node.target([torch.zeros(4, 16)], *node.args[1:])


@pytest.mark.executorch
@pytest.mark.slow
def test_elided_views_share_their_base():
    """A reshape ExecuTorch elides (no instruction, the base's memory) is imported as a
    view of its base: it shares the base's storage in the plan, and the plan verifies."""

    class Reshapes(torch.nn.Module):
        def forward(self, x):
            y = torch.relu(x).reshape(8, 8)
            return (y @ y).view(4, 16) + 1

    model, inputs = Reshapes(), (torch.randn(4, 16),)
    keep = lambda program, config: program  # noqa: E731

    def failed(exc, stage, config):
        raise exc

    program = lower(model, inputs, rule_partitioner({"cuda:0": ["aten.mm"]}), [(False, False)], keep, failed)[0]
    imported = from_executorch(program)
    views = [t for t in imported.program.tensors.values() if t.role == "view"]
    assert len(views) == 2
    plan = imported.memory_plan
    for t in views:
        base = imported.program.tensors[t.view_of]
        assert plan.storage_of[t.name] == plan.storage_of[base.name]
        assert t.name in plan.allocations[plan.storage_of[t.name]].aliases
    plan.verify()
    assert from_executorch(program.buffer).program == imported.program
