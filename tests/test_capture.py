"""Capture: torch.export wrapped, shape-only capture allocates no weights."""

import pytest
import torch

import workbench as wb
from workbench.models.examples import example
from conftest import assert_matches_eager


def test_capture_records_signature():
    """User inputs, outputs and constants are read from the export signature."""
    model, inputs = example("fanout")
    prog = wb.capture(model, inputs)
    assert prog.user_inputs == ("x", "y")
    assert len(prog.user_outputs) == 2
    assert set(prog.constants.values()) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    assert set(prog.constant_kinds.values()) == {"parameter"}
    assert not prog.shape_only


def test_capture_does_not_modify_model():
    """Capturing (also shape-only) leaves the model's weights real and unchanged."""
    model, inputs = example("mlp")
    before = model.layers[0].weight.detach().clone()
    wb.capture(model, inputs, shape_only=True)
    assert not model.layers[0].weight.is_meta
    assert torch.equal(model.layers[0].weight, before)


def test_shape_only_has_meta_constants_and_values():
    """Shape-only capture keeps shapes and dtypes but every constant is a meta tensor."""
    model, inputs = example("residual")
    prog = wb.capture(model, inputs, shape_only=True)
    assert prog.shape_only
    for name in prog.constants:
        assert prog.constant_tensor(name).is_meta
    real = wb.capture(model, inputs)
    shapes = lambda p: [tuple(n.meta["val"].shape) for n in p.graph.nodes if n.op == "call_function"]
    assert shapes(prog) == shapes(real)


def test_shape_only_of_a_large_meta_model_allocates_nothing():
    """A 4-billion-parameter model built on meta captures without allocating its weights."""
    with torch.device("meta"):
        big = torch.nn.Sequential(*[torch.nn.Linear(16384, 16384, bias=False) for _ in range(16)])
    prog = wb.capture(big, (torch.zeros(2, 16384),), shape_only=True)
    total = sum(prog.constant_tensor(n).numel() for n in prog.constants)
    assert total == 16 * 16384 * 16384


def test_single_tensor_input_is_accepted():
    """A bare tensor is accepted as a one-element input tuple."""
    model, (x,) = example("mlp")
    assert wb.capture(model, x).user_inputs == ("x",)


def test_decompose_gives_core_aten():
    """decompose=True lowers aten.linear to addmm/permute as ExecuTorch's to_edge does."""
    model, inputs = example("mlp")
    targets = {str(n.target) for n in wb.capture(model, inputs, decompose=True).graph.nodes}
    assert "aten.addmm.default" in targets and "aten.linear.default" not in targets


@pytest.mark.parametrize("bad", [lambda x: x, "model", None])
def test_non_module_is_rejected(bad):
    """Anything but an nn.Module is a clear error."""
    with pytest.raises(wb.CaptureError, match="nn.Module"):
        wb.capture(bad, (torch.zeros(1),))


def test_bad_inputs_type_is_rejected():
    """example_inputs must be a tuple (or one tensor)."""
    model, _ = example("mlp")
    with pytest.raises(wb.CaptureError, match="tuple"):
        wb.capture(model, {"x": torch.zeros(4, 32)})


def test_export_failure_is_wrapped():
    """A model torch.export cannot trace gives a CaptureError naming the model."""

    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow
                return x + 1
            return x - 1

    with pytest.raises(wb.CaptureError, match="DataDependent"):
        wb.capture(DataDependent(), (torch.ones(3),))


def test_inputs_of_another_structure_are_refused_by_name():
    """A call with a different input structure than the capture is an InputSignatureError
    naming the inputs — for the propagated module and planned execution alike."""
    from workbench.capture import InputSignatureError
    from workbench.planning.arena_execution import run_in_arenas

    model, (x, y) = example("fanout")
    prog = wb.capture(model, (x, y))
    assert len(prog.flatten_inputs((x, y))) == 2
    dg = wb.propagate(wb.place(prog, {}))
    for call in (lambda: prog.flatten_inputs((x,)), lambda: dg.module()(x), lambda: run_in_arenas(wb.plan(dg), x)):
        with pytest.raises(InputSignatureError, match="x, y"):
            call()


class _WithMask(torch.nn.Module):
    def forward(self, x, mask=None, scale: float = 1.0):
        return x * mask * scale if mask is not None else x * scale


def test_kwargs_reach_the_model():
    """kwargs are passed to torch.export: they become graph inputs after the positional
    ones (a non-tensor value is specialised: the graph holds for that value only)."""
    x, mask = torch.randn(3), torch.tensor([1.0, 0.0, 1.0])
    prog = wb.capture(_WithMask(), (x,), {"mask": mask, "scale": 2.0})
    assert prog.user_inputs == ("x", "mask", "scale")
    assert torch.equal(prog.exported.module()(x, mask=mask, scale=2.0), x * mask * 2.0)
    meta = wb.capture(_WithMask(), (x,), {"mask": mask}, shape_only=True)
    assert meta.shape_only and meta.user_inputs == ("x", "mask")


@pytest.mark.parametrize("bad, message", [(True, "shape_only=True"), ([1], "dict of keyword inputs"), ({1: 2}, "dict of keyword")])
def test_bad_kwargs_are_refused(bad, message):
    """kwargs must be a dict of names; a bool there means shape_only, which is keyword-only."""
    with pytest.raises(wb.CaptureError, match=message):
        wb.capture(_WithMask(), (torch.randn(3),), bad)


class Cache:  # a stand-in named like transformers' caches
    def __init__(self, t):
        self.t = t


class _ReturnsCache(torch.nn.Module):
    def forward(self, x):
        return x + 1, Cache(x)


class _ReturnsObject(torch.nn.Module):
    def forward(self, x):
        return x + 1, _WithMask()


def test_unflattenable_outputs_say_what_to_do():
    """An output torch.export cannot flatten is a CaptureError that says what to do: for a
    cache, use_cache=False or the decode helper; otherwise, return tensors."""
    with pytest.raises(wb.CaptureError, match=r"use_cache.*False.*capture_prefill.*capture_decode"):
        wb.capture(_ReturnsCache(), (torch.randn(2),))
    with pytest.raises(wb.CaptureError, match="whose forward returns tensors"):
        wb.capture(_ReturnsObject(), (torch.randn(2),))


def _stack_traces(prog) -> list:
    return [n.meta.get("stack_trace") for n in prog.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize(
    "shape_only, stack_traces, recorded",
    [(False, None, True), (True, None, False), (False, False, False), (True, True, True)],
)
def test_stack_traces_are_recorded_for_runnable_programs_unless_asked(shape_only, stack_traces, recorded):
    """Each op of a runnable capture keeps the model source that issued it (execution errors
    quote it); a shape-only capture skips them unless asked, and either default can be
    overridden. torch.fx's switch is left as it was."""
    import torch.fx.config

    before = torch.fx.config.do_not_emit_stack_traces
    model, inputs = example("mlp")
    traces = _stack_traces(wb.capture(model, inputs, shape_only=shape_only, stack_traces=stack_traces))
    assert all(traces) if recorded else not any(traces)
    assert torch.fx.config.do_not_emit_stack_traces == before


def test_stack_trace_switch_is_restored_when_export_fails():
    """A capture that fails leaves torch.fx recording stack traces as before."""
    import torch.fx.config

    class Bad(torch.nn.Module):
        def forward(self, x):
            return object()

    before = torch.fx.config.do_not_emit_stack_traces
    with pytest.raises(wb.CaptureError):
        wb.capture(Bad(), (torch.ones(2),), shape_only=True)
    assert torch.fx.config.do_not_emit_stack_traces == before



class _NoGradRouter(torch.nn.Module):
    """A router scored under torch.no_grad() (as Phi-MoE's is), then used by the output."""

    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(8, 4)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.proj(x)
        with torch.no_grad():
            weights = torch.softmax(self.score(h), dim=-1)
        with torch.no_grad():
            top = weights.max(dim=-1, keepdim=True).values
        return h * top, weights


def test_no_grad_regions_are_inlined():
    """A region under torch.no_grad() is spliced into the main graph: no higher-order op
    or submodule remains, the outputs the signature names exist, and the program runs
    through propagate and planned execution equal to eager."""
    model = _NoGradRouter().eval()
    x = torch.randn(3, 8)
    prog = wb.capture(model, (x,))
    nodes = list(prog.graph.nodes)
    assert not [n for n in nodes if n.op == "get_attr" or isinstance(n.target, torch._ops.HigherOrderOperator)]
    assert not [name for name, _ in prog.graph_module.named_children()]
    names = {n.name for n in nodes}
    assert set(prog.user_outputs) <= names and len(prog.user_outputs) == 2
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"]}))
    got = wb.run(wb.plan(dg), x, backend="sim").outputs
    with torch.no_grad():
        want = model(x)
    assert_matches_eager([wb.runtime.to_host(g) for g in got], list(want))


def test_export_failure_reads_as_one_paragraph(capfd):
    """A failed export is one short paragraph naming the model's own line and what to do;
    torch's full text is on torch_message (and the cause), and torch's partial graph is
    not printed."""

    class Routed(torch.nn.Module):
        def forward(self, x):
            ids = torch.nonzero(x > 0)
            return x[: int(ids.shape[0])] * 2 if ids.shape[0] > 1 else x

    with pytest.raises(wb.CaptureError) as info:
        wb.capture(Routed(), (torch.randn(6),))
    message = str(info.value)
    assert "\n" not in message and len(message) < 900
    assert "test_capture.py:" in message and "What to do:" in message
    assert info.value.torch_message and info.value.__cause__ is not None
    assert "def forward(" not in capfd.readouterr().err
