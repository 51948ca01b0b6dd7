"""Bad inputs at every public boundary: each case is refused with a ``WorkbenchError`` of the
expected class whose one message names the offending parameter (or value) — never a raw
``TypeError``/``KeyError``/``AttributeError`` from inside, never a dumped ``TreeSpec``.

Every case is a (call, expected error class, text the message must contain). The cases
share a few small programs, captured once per session, so the suite runs in seconds.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.capture import InputSignatureError
from workbench.devices import Device, DeviceError
from workbench.errors import ArgumentTypeError, ArgumentValueError, WorkbenchError
from workbench.models.examples import UnknownExampleError, example, synthetic_program
from workbench.kernels.copies import GatherIndexError, KernelArgumentError, gather_launch_config, gather_row_offsets, staging_schedule
from workbench.models import ConfigError, MoEConfig, QwenMoEDecoder, cache_specs
from workbench.planning import Buffer, PlanningInputError, assign_offsets, lower_bound
from workbench.runtime import AllocatorArgumentError, CudaUnavailableError, DeviceBuffer, ExecutorError, HostAllocator, InputError, SimDeviceAllocator, UnknownBackendError, estimate, load, registry_for_backend, to_device, to_host
from workbench.machine import CostModel
from workbench.schedule import ScheduleError, schedule

from conftest import captured

# -- shared subjects, made once ------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def mlp():
    """(model, x, program, device graph, plan) of the MLP example on cuda:0."""
    model, (x,), program = captured("mlp")
    dg = wb.propagate(wb.place(program, {"cuda:0": ["aten.linear"]}))
    return model, x, program, dg, wb.plan(dg)


@functools.lru_cache(maxsize=None)
def shape_only_plan():
    return wb.plan(wb.propagate(wb.place(captured("mlp", shape_only=True)[2], {})))


class _Scalars(nn.Module):
    """A model with non-tensor inputs: an int, a string, a float and a None."""

    def forward(self, x, n, s, f, none):
        return x * n + f + len(s)


@functools.lru_cache(maxsize=None)
def scalars_plan():
    x = torch.ones(3)
    return wb.plan(wb.propagate(wb.place(wb.capture(_Scalars(), (x, 3, "ab", 0.5, None)), {}))), x


@functools.lru_cache(maxsize=None)
def dynamic_int_plan():
    x = torch.ones(3)
    dims = ({0: torch.export.Dim.STATIC}, torch.export.Dim.DYNAMIC, None, None, None)
    program = wb.capture(_Scalars(), (x, 3, "ab", 0.5, None), dynamic_shapes=dims)
    return wb.plan(wb.propagate(wb.place(program, {}))), x


def _meta_model() -> nn.Module:
    with torch.device("meta"):
        return nn.Linear(4, 4)


def _run_node_returning(value: Callable[[torch.fx.Node, Any], Any]):
    def run_node(node, args, kwargs):
        out = node.target(*args, **kwargs)
        return value(node, out) if "linear" in node.name else out

    return run_node


def _session():
    _, _, _, _, plan = mlp()
    return load(plan, "sim")


def _tmp() -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix="wb_bad_inputs_"))


def _file(name: str, data: bytes) -> Path:
    path = _tmp() / name
    path.write_bytes(data)
    return path


# -- the cases ----------------------------------------------------------------------------

Case = tuple[str, Callable[[], Any], type, str]

CAPTURE: list[Case] = [
    ("model not a module", lambda: wb.capture("model", (torch.ones(1),)), wb.CaptureError, "model must be a torch.nn.Module"),
    ("model is None", lambda: wb.capture(None, (torch.ones(1),)), wb.CaptureError, "model must be"),
    ("inputs a string", lambda: wb.capture(nn.ReLU(), "x"), wb.CaptureError, "example_inputs"),
    ("inputs a dict", lambda: wb.capture(nn.ReLU(), {"x": torch.ones(1)}), wb.CaptureError, "example_inputs"),
    ("shape_only a string", lambda: wb.capture(nn.ReLU(), (torch.ones(1),), shape_only="yes"), ArgumentTypeError, "shape_only"),
    ("shape_only an int", lambda: wb.capture(nn.ReLU(), (torch.ones(1),), shape_only=1), ArgumentTypeError, "shape_only"),
    ("stack_traces a string", lambda: wb.capture(nn.ReLU(), (torch.ones(1),), stack_traces="no"), ArgumentTypeError, "stack_traces must be True, False or None"),
    ("decompose a string", lambda: wb.capture(nn.ReLU(), (torch.ones(1),), decompose="False"), ArgumentTypeError, "decompose"),
    ("strict None", lambda: wb.capture(nn.ReLU(), (torch.ones(1),), strict=None), ArgumentTypeError, "strict"),
    ("meta weights without shape_only", lambda: wb.capture(_meta_model(), (torch.ones(2, 4),)), wb.CaptureError, "shape_only=True"),
    ("from_exported not a program", lambda: wb.Program.from_exported("ep"), wb.CaptureError, "exported must be"),
    ("from_exported shape_only string", lambda: wb.Program.from_exported(mlp()[2].exported, "no"), ArgumentTypeError, "shape_only"),
    ("from_exported meta as real", lambda: wb.Program.from_exported(captured("mlp", shape_only=True)[2].exported, False), wb.CaptureError, "shape_only=True"),
]

INPUTS: list[Case] = [
    ("a list for a tensor", lambda: wb.run(mlp()[4], [mlp()[1]], backend="sim"), InputError, "input 0 (x) must be a tensor"),
    ("a tuple for a tensor", lambda: wb.run(mlp()[4], (mlp()[1],), backend="sim"), InputError, "input 0 (x)"),
    ("a dict for a tensor", lambda: wb.run(mlp()[4], {"x": mlp()[1]}, backend="sim"), InputError, "input 0 (x)"),
    ("no input", lambda: wb.run(mlp()[4], backend="sim"), InputError, "expected 1 inputs (x)"),
    ("two inputs", lambda: wb.run(mlp()[4], mlp()[1], mlp()[1], backend="sim"), InputError, "expected 1 inputs (x)"),
    ("a string for a tensor", lambda: wb.run(mlp()[4], "x", backend="sim"), InputError, "input 'x' must be a tensor"),
    ("an int for a tensor", lambda: wb.run(mlp()[4], 3, backend="sim"), InputError, "input 'x' must be a tensor"),
    ("wrong dtype", lambda: wb.run(mlp()[4], mlp()[1].double(), backend="sim"), InputError, "input 'x' must have dtype"),
    ("wrong shape", lambda: wb.run(mlp()[4], mlp()[1][:, :8], backend="sim"), InputError, "input 'x' must have shape"),
    ("wrong rank", lambda: wb.run(mlp()[4], mlp()[1][0], backend="sim"), InputError, "input 'x' must have shape"),
    ("device tensor for a host input", lambda: wb.run(mlp()[4], to_device(mlp()[1], "cuda:0", "sim"), backend="sim"), InputError, "input 'x' must be a host"),
    ("session: a list", lambda: _session().run([mlp()[1]]), InputError, "input 0 (x)"),
    ("module: a list", lambda: mlp()[3].module()([mlp()[1]]), InputSignatureError, "input 0 (x)"),
    ("int captured 3 given 5", lambda: wb.run(scalars_plan()[0], scalars_plan()[1], 5, "ab", 0.5, None, backend="sim"), InputError, "input 'n'"),
    ("int given as a string", lambda: wb.run(scalars_plan()[0], scalars_plan()[1], "3", "ab", 0.5, None, backend="sim"), InputError, "input 'n'"),
    ("int given as a float", lambda: wb.run(scalars_plan()[0], scalars_plan()[1], 3.0, "ab", 0.5, None, backend="sim"), InputError, "input 'n'"),
    ("int given as a bool", lambda: wb.run(scalars_plan()[0], scalars_plan()[1], True, "ab", 0.5, None, backend="sim"), InputError, "input 'n'"),
    ("string changed", lambda: wb.run(scalars_plan()[0], scalars_plan()[1], 3, "cd", 0.5, None, backend="sim"), InputError, "input 's'"),
    ("float changed", lambda: wb.run(scalars_plan()[0], scalars_plan()[1], 3, "ab", 0.25, None, backend="sim"), InputError, "input 'f'"),
    ("None given 0", lambda: wb.run(scalars_plan()[0], scalars_plan()[1], 3, "ab", 0.5, 0, backend="sim"), InputError, "input 'none'"),
    ("dynamic int given a string", lambda: wb.run(dynamic_int_plan()[0], dynamic_int_plan()[1], "7", "ab", 0.5, None, backend="sim"), InputError, "input 'n'"),
    ("dynamic int below its range", lambda: wb.run(dynamic_int_plan()[0], dynamic_int_plan()[1], -1, "ab", 0.5, None, backend="sim"), InputError, "input 'n'"),
]

PLACE: list[Case] = [
    ("program not a Program", lambda: wb.place("program", {}), wb.PlacementError, "program must be a Program"),
    ("rules an int", lambda: wb.place(mlp()[2], 5), wb.PlacementError, "rules must be a mapping"),
    ("rules a list", lambda: wb.place(mlp()[2], ["aten.linear"]), wb.PlacementError, "rules must be a mapping"),
    ("rules keyed by an int", lambda: wb.place(mlp()[2], {0: ["aten.linear"]}), wb.PlacementError, "rules is keyed by devices"),
    ("unknown device", lambda: wb.place(mlp()[2], {"tpu": ["aten.linear"]}), wb.PlacementError, "unknown device type 'tpu'"),
    ("rule device index too high", lambda: wb.place(mlp()[2], {"cuda:99": ["aten.linear"]}), wb.PlacementError, "bad index 99"),
    ("patterns an int", lambda: wb.place(mlp()[2], {"cuda:0": 5}), wb.PlacementError, "rules['cuda:0']"),
    ("a pattern not a string", lambda: wb.place(mlp()[2], {"cuda:0": [5]}), wb.PlacementError, "rules['cuda:0']"),
    ("an empty pattern", lambda: wb.place(mlp()[2], {"cuda:0": [""]}), wb.PlacementError, "rules['cuda:0']"),
    ("unknown pattern prefix", lambda: wb.place(mlp()[2], {"cuda:0": ["layer:x"]}), wb.PlacementError, "'layer:x'"),
    ("strict a string", lambda: wb.place(mlp()[2], {}, strict="yes"), ArgumentTypeError, "strict"),
    ("unknown partitioner", lambda: wb.place(mlp()[2], {}, partitioner="magic"), wb.PlacementError, "partitioner 'magic'"),
    ("partitioner a list", lambda: wb.place(mlp()[2], {}, partitioner=["fx"]), wb.PlacementError, "partitioner ['fx']"),
    ("callable returns an int", lambda: wb.place(mlp()[2], lambda n: 5), wb.PlacementError, "the placement callable returned 5"),
    ("callable returns a bad device", lambda: wb.place(mlp()[2], lambda n: "tpu"), wb.PlacementError, "the placement callable returned 'tpu'"),
    ("strict and unmatched", lambda: wb.place(mlp()[2], {"cuda:0": ["aten.nothing"]}, strict=True), wb.PlacementError, "'aten.nothing'"),
]

PROPAGATE: list[Case] = [
    ("placement not a Placement", lambda: wb.propagate(mlp()[2]), wb.PropagationError, "placement must be a Placement"),
    ("skip_h2d a string", lambda: wb.propagate(mlp()[3].placement, "False"), ArgumentTypeError, "skip_h2d_for_method_inputs"),
    ("skip_h2d an int", lambda: wb.propagate(mlp()[3].placement, 1), ArgumentTypeError, "skip_h2d_for_method_inputs"),
    ("skip_d2h a string", lambda: wb.propagate(mlp()[3].placement, skip_d2h_for_method_outputs="False"), ArgumentTypeError, "skip_d2h_for_method_outputs"),
    ("skip_d2h None", lambda: wb.propagate(mlp()[3].placement, skip_d2h_for_method_outputs=None), ArgumentTypeError, "skip_d2h_for_method_outputs"),
    ("stream_constants None", lambda: wb.propagate(mlp()[3].placement, stream_constants=None), ArgumentTypeError, "stream_constants"),
    ("stream_constants an int", lambda: wb.propagate(mlp()[3].placement, stream_constants=5), ArgumentTypeError, "stream_constants"),
    ("stream_constants a dict", lambda: wb.propagate(mlp()[3].placement, stream_constants={"a": 1}), ArgumentTypeError, "stream_constants"),
    ("stream pattern not a string", lambda: wb.propagate(mlp()[3].placement, stream_constants=[5]), wb.PropagationError, "stream_constants"),
    ("stream pattern empty", lambda: wb.propagate(mlp()[3].placement, stream_constants=[""]), wb.PropagationError, "stream_constants"),
    ("stream pattern matches nothing", lambda: wb.propagate(mlp()[3].placement, stream_constants=["nothing.*"]), wb.PropagationError, "stream_constants pattern(s) 'nothing.*'"),
]

SCHEDULE: list[Case] = [
    ("schedule of a string", lambda: schedule("dg"), ScheduleError, "dg must be a DeviceGraph"),
    ("unknown order", lambda: schedule(mlp()[3], "fast"), ScheduleError, "order 'fast'"),
    ("order a list", lambda: schedule(mlp()[3], ["overlap"]), ArgumentTypeError, "order must be"),
]

PLAN: list[Case] = [
    ("dg not a DeviceGraph", lambda: wb.plan("dg"), wb.PlanError, "dg must be a DeviceGraph"),
    ("algorithm a list", lambda: wb.plan(mlp()[3], algorithm=["greedy"]), ArgumentTypeError, "algorithm must be"),
    ("algorithm None", lambda: wb.plan(mlp()[3], algorithm=None), ArgumentTypeError, "algorithm must be"),
    ("unknown algorithm", lambda: wb.plan(mlp()[3], algorithm="magic"), wb.PlanError, "planning algorithm 'magic'"),
    ("alignment 2**40", lambda: wb.plan(mlp()[3], alignment=2**40), ArgumentValueError, "alignment must be a power of two in 1..4096"),
    ("alignment 3", lambda: wb.plan(mlp()[3], alignment=3), ArgumentValueError, "alignment"),
    ("alignment 0", lambda: wb.plan(mlp()[3], alignment=0), ArgumentValueError, "alignment"),
    ("alignment negative", lambda: wb.plan(mlp()[3], alignment=-16), ArgumentValueError, "alignment"),
    ("alignment a string", lambda: wb.plan(mlp()[3], alignment="16"), ArgumentTypeError, "alignment"),
    ("alignment a float", lambda: wb.plan(mlp()[3], alignment=16.0), ArgumentTypeError, "alignment"),
    ("alignment a bool", lambda: wb.plan(mlp()[3], alignment=True), ArgumentTypeError, "alignment"),
    ("alloc_graph_inputs a string", lambda: wb.plan(mlp()[3], alloc_graph_inputs="no"), ArgumentTypeError, "alloc_graph_inputs"),
    ("alloc_graph_outputs an int", lambda: wb.plan(mlp()[3], alloc_graph_outputs=1), ArgumentTypeError, "alloc_graph_outputs"),
    ("capacity an int", lambda: wb.plan(mlp()[3], capacity=7), wb.PlanError, "capacity must be a mapping"),
    ("capacity of an unknown device", lambda: wb.plan(mlp()[3], capacity={"tpu": 5}), wb.PlanError, "bad device in capacity"),
    ("capacity negative", lambda: wb.plan(mlp()[3], capacity={"cuda:0": -1}), wb.PlanError, "capacity['cuda:0']"),
    ("capacity a string", lambda: wb.plan(mlp()[3], capacity={"cuda:0": "1GB"}), wb.PlanError, "capacity['cuda:0']"),
    ("capacity too small", lambda: wb.plan(mlp()[3], capacity={"cuda:0": 1}), wb.CapacityError, "cuda:0 needs"),
    ("with_algorithm a list", lambda: mlp()[4].with_algorithm(["best"]), ArgumentTypeError, "algorithm must be"),
    ("with_algorithm unknown", lambda: mlp()[4].with_algorithm("magic"), wb.PlanError, "planning algorithm 'magic'"),
]

RUN: list[Case] = [
    ("plan not a MemoryPlan", lambda: wb.run("plan", mlp()[1]), ArgumentTypeError, "plan must be a MemoryPlan"),
    ("load: plan not a MemoryPlan", lambda: load(mlp()[3], "sim"), ArgumentTypeError, "plan must be a MemoryPlan"),
    ("unknown backend", lambda: wb.run(mlp()[4], mlp()[1], backend="tpu"), UnknownBackendError, "backend 'tpu'"),
    ("backend an int", lambda: wb.run(mlp()[4], mlp()[1], backend=5), UnknownBackendError, "backend 5"),
    ("cuda without a gpu", lambda: wb.run(mlp()[4], mlp()[1], backend="cuda"), CudaUnavailableError, "backend='cuda'"),
    ("registry a string", lambda: load(mlp()[4], registry="sim"), ArgumentTypeError, "registry must be an AllocatorRegistry"),
    ("cost_model a string", lambda: load(mlp()[4], "sim", "h200"), ArgumentTypeError, "cost_model must be a CostModel"),
    ("validate a string", lambda: wb.run(mlp()[4], mlp()[1], backend="sim", validate="yes"), ArgumentTypeError, "validate"),
    ("run_node not callable", lambda: wb.run(mlp()[4], mlp()[1], backend="sim", run_node="f"), ArgumentTypeError, "run_node must be a callable"),
    ("run_node returns a string", lambda: wb.run(mlp()[4], mlp()[1], backend="sim", run_node=_run_node_returning(lambda n, o: "done")), ExecutorError, "run_node returned str"),
    ("run_node returns a wrong shape", lambda: wb.run(mlp()[4], mlp()[1], backend="sim", run_node=_run_node_returning(lambda n, o: o[:1])), ExecutorError, "run_node returned Tensor"),
    ("run_node returns a wrong dtype", lambda: wb.run(mlp()[4], mlp()[1], backend="sim", run_node=_run_node_returning(lambda n, o: o.double())), ExecutorError, "run_node returned Tensor"),
    ("run_node returns None", lambda: wb.run(mlp()[4], mlp()[1], backend="sim", run_node=_run_node_returning(lambda n, o: None)), ExecutorError, "run_node returned NoneType"),
    ("max_concurrent_calls 0", lambda: load(mlp()[4], "sim", max_concurrent_calls=0), ArgumentValueError, "max_concurrent_calls"),
    ("max_concurrent_calls a string", lambda: load(mlp()[4], "sim", max_concurrent_calls="2"), ArgumentTypeError, "max_concurrent_calls"),
    ("max_concurrent_calls huge", lambda: load(mlp()[4], "sim", max_concurrent_calls=10**6), ArgumentValueError, "max_concurrent_calls"),
    ("a shape-only plan", lambda: wb.run(shape_only_plan(), mlp()[1], backend="sim"), ExecutorError, "shape_only=True"),
    ("estimate of a device graph", lambda: estimate(mlp()[3]), ArgumentTypeError, "MemoryPlan"),
    ("estimate with a string cost model", lambda: estimate(mlp()[4], "h200"), ArgumentTypeError, "cost_model"),
    ("a constant not resident there", lambda: _session().constant("p_layers_0_weight", "cpu"), KeyError, "'p_layers_0_weight' is not resident on cpu"),
    ("a constant on a bad device", lambda: _session().constant("p_layers_0_weight", "tpu"), DeviceError, "'tpu'"),
]

FILES: list[Case] = [
    ("load_plan of an int", lambda: wb.load_plan(5), wb.PlanFileError, "path must be"),
    ("load_plan of a folder", lambda: wb.load_plan(_tmp()), wb.PlanFileError, "is a directory"),
    ("load_plan of nothing", lambda: wb.load_plan(_tmp() / "absent.wbplan"), wb.PlanFileError, "no plan file at"),
    ("load_plan of a text file", lambda: wb.load_plan(_file("plan.wbplan", b"hello")), wb.PlanFileError, "not a zip archive"),
    ("save to a folder", lambda: mlp()[4].save(_tmp()), OSError, "it is a directory"),
    ("save into a missing folder", lambda: mlp()[4].save(_tmp() / "missing" / "p.wbplan"), OSError, "does not exist"),
]

EXAMPLES: list[Case] = [
    ("example of a list", lambda: example(["mlp"]), ArgumentTypeError, "name must be the name of an example"),
    ("example of None", lambda: example(None), ArgumentTypeError, "name must be"),
    ("unknown example", lambda: example("nope"), UnknownExampleError, "unknown example 'nope'; valid ones are mlp"),
    ("synthetic of no ops", lambda: synthetic_program(0), ArgumentValueError, "num_ops"),
    ("synthetic width a string", lambda: synthetic_program(8, width="64"), ArgumentTypeError, "width"),
    ("synthetic negative seed", lambda: synthetic_program(8, seed=-1), ArgumentValueError, "seed"),
]

MODELS: list[Case] = [
    ("config of a folder", lambda: MoEConfig.from_json(_tmp()), ConfigError, "is a directory"),
    ("config of a binary file", lambda: MoEConfig.from_json(_file("c.json", bytes(range(256)))), ConfigError, "is not a text file"),
    ("config of bad JSON", lambda: MoEConfig.from_json(_file("c.json", b"{nope")), ConfigError, "is not valid JSON"),
    ("config of a list", lambda: MoEConfig.from_json(_file("c.json", b"[]")), ConfigError, "a config must be a JSON object"),
    ("config path an int", lambda: MoEConfig.from_json(5), ConfigError, "path must be"),
    ("config file missing", lambda: MoEConfig.from_json(_tmp() / "absent.json"), ConfigError, "config file not found"),
    ("tiny of an unknown field", lambda: MoEConfig.tiny(hidden=3), ConfigError, "unknown config field(s) hidden"),
    ("tiny hidden_size 0", lambda: MoEConfig.tiny(hidden_size=0), ConfigError, "hidden_size=0"),
    ("tiny dtype int8", lambda: MoEConfig.tiny(dtype="int8"), ConfigError, "dtype='int8'"),
    ("tiny experts per token above experts", lambda: MoEConfig.tiny(num_experts_per_tok=9), ConfigError, "num_experts_per_tok=9"),
    ("decoder of a dict", lambda: QwenMoEDecoder({"hidden_size": 4}), ArgumentTypeError, "config must be a MoEConfig"),
    ("decoder expert_prefetch a string", lambda: QwenMoEDecoder(MoEConfig.tiny(), expert_prefetch="yes"), ArgumentTypeError, "expert_prefetch"),
    ("decoder seed negative", lambda: QwenMoEDecoder(MoEConfig.tiny(), seed=-1), ArgumentValueError, "seed"),
    ("cache batch 0", lambda: cache_specs(MoEConfig.tiny(), batch=0), ArgumentValueError, "batch"),
    ("example position out of range", lambda: QwenMoEDecoder(MoEConfig.tiny()).example_inputs(position=99), ArgumentValueError, "position"),
]

RUNTIME: list[Case] = [
    ("device of an int", lambda: Device.parse(5), DeviceError, "a device is a string"),
    ("unknown device type", lambda: Device.parse("tpu:0"), DeviceError, "'tpu'"),
    ("device index too high", lambda: Device("cuda", 99), DeviceError, "bad index 99"),
    ("to_device of a list", lambda: to_device([1.0], "cuda:0", "sim"), ArgumentTypeError, "to_device takes a host torch.Tensor"),
    ("to_device onto tpu", lambda: to_device(torch.ones(2), "tpu", "sim"), DeviceError, "'tpu'"),
    ("to_host of a string", lambda: to_host("x"), ArgumentTypeError, "expected a torch.Tensor or CuPy array"),
    ("registry of tpu", lambda: registry_for_backend("tpu"), UnknownBackendError, "backend 'tpu'"),
    ("buffer without an allocator", lambda: DeviceBuffer("allocator", 8), ArgumentTypeError, "DeviceAllocator"),
    ("pinned a string", lambda: HostAllocator(pinned="yes"), ArgumentTypeError, "pinned"),
    ("allocate negative bytes", lambda: SimDeviceAllocator().allocate(-1), AllocatorArgumentError, "nbytes must be >= 0"),
    ("allocate a string of bytes", lambda: SimDeviceAllocator().allocate("8"), ArgumentTypeError, "nbytes must be an int"),
    ("allocate on a bad index", lambda: SimDeviceAllocator().allocate(8, index=99), DeviceError, "bad index 99"),
    ("cost model of a string", lambda: load(mlp()[4], "sim", cost_model=CostModel), ArgumentTypeError, "cost_model"),
]

PLANNING_CORE: list[Case] = [
    ("assign with an unknown algorithm", lambda: assign_offsets([Buffer("a", 8, 0, 1)], "magic"), PlanningInputError, "algorithm 'magic'"),
    ("buffer of negative size", lambda: Buffer("a", -1, 0, 1), PlanningInputError, "size"),
    ("buffer ending before it starts", lambda: Buffer("a", 8, 3, 1), PlanningInputError, "lifetime [3, 1]"),
    ("buffer size a float", lambda: Buffer("a", 8.0, 0, 1), PlanningInputError, "size must be an int"),
    ("lower bound with a huge alignment", lambda: lower_bound([Buffer("a", 8, 0, 1)], 2**20), PlanningInputError, "alignment"),
    ("assign with alignment 3", lambda: assign_offsets([Buffer("a", 8, 0, 1)], "greedy", 3), PlanningInputError, "alignment"),
]

KERNELS: list[Case] = [
    ("staging of negative bytes", lambda: staging_schedule(-1), KernelArgumentError, "nbytes"),
    ("staging chunk 0", lambda: staging_schedule(8, chunk_bytes=0), KernelArgumentError, "chunk_bytes"),
    ("gather indices 2-D", lambda: gather_row_offsets([[1]], 4, 8), KernelArgumentError, "indices must be 1-D"),
    ("gather indices floats", lambda: gather_row_offsets([1.5], 4, 8), ArgumentTypeError, "indices must be integers"),
    ("gather index out of range", lambda: gather_row_offsets([5], 4, 8), GatherIndexError, "gather indices [5]"),
    ("gather variant unknown", lambda: gather_launch_config(16, 1, "v8", 1), KernelArgumentError, "variant"),
    ("gather rows 0", lambda: gather_launch_config(16, 0, "b1", 1), KernelArgumentError, "n_rows"),
    ("select_rows with float ids", lambda: torch.ops.workbench.select_rows(torch.ones(4, 2), torch.ones(2), torch.ones(1, 2, dtype=torch.long)), ArgumentTypeError, "select_rows: index must hold integer row ids"),
    ("select_rows with an empty hint", lambda: torch.ops.workbench.select_rows(torch.ones(4, 2), torch.zeros(2, dtype=torch.long), torch.zeros(1, 0, dtype=torch.long)), ArgumentValueError, "select_rows: hint must hold at least one row id"),
]

CASES: list[Case] = CAPTURE + INPUTS + PLACE + PROPAGATE + SCHEDULE + PLAN + RUN + FILES + EXAMPLES + MODELS + RUNTIME + PLANNING_CORE + KERNELS


def test_the_suite_has_at_least_100_cases():
    """The issue asks for a suite of at least 100 bad inputs."""
    assert len(CASES) >= 100 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name, call, error, text", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_a_clear_workbench_error(name, call, error, text):
    """The error is a WorkbenchError of the expected class, its message names the offending
    parameter or value (``text``) and shows no TreeSpec."""
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, WorkbenchError), type(info.value).__mro__
    message = str(info.value)
    assert text in message, message
    assert "TreeSpec" not in message
