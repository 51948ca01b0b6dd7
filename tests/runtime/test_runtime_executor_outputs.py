"""The executor's outputs equal eager PyTorch: every example model, several placements
(one, two and three devices), both skip settings, on ``sim`` and (GPU only) ``cuda``."""

import random
import warnings

import pytest
import torch

import workbench as wb
from workbench.runtime import cuda_available, cuda_unavailable_reason, stage_inputs, to_host
from workbench.kernels.cuda import device_count
from workbench.runtime.executor import ExecutorError, estimate, run

from conftest import captured

GPU = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]
BACKENDS = ["sim", pytest.param("cuda", marks=GPU)]

RULES = {
    "host": {},
    "one_device": {"cuda:0": ["aten.linear", "aten.addmm", "aten.matmul", "aten.mul"]},
    "three_devices": {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu", "aten.relu", "aten.softmax", "aten.mul"]},
}


@pytest.fixture(autouse=True)
def _exact_cuda_math():
    """cuDNN convolutions default to TF32 on recent GPUs; compare in full fp32."""
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = old


def place_quietly(prog, rules):
    """Shared rule sets name ops some models lack; that only warns, and is fine here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", wb.PlacementWarning)
        return wb.place(prog, rules)


def same(got, want, backend):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    tol = 1e-5 if backend == "sim" else 1e-4
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = to_host(g)
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype.is_floating_point:
            assert torch.allclose(g, w, atol=tol, rtol=tol), (g - w).abs().max()
        else:
            assert torch.equal(g, w)


def _skip_if_missing_gpus(plan, backend):
    if backend != "cuda":
        return
    need = 1 + max((d.index for d in plan.device_graph.devices if not d.is_host), default=-1)
    if need > device_count():
        pytest.skip(f"the placement needs {need} GPUs, this machine has {device_count()}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rules", list(RULES))
@pytest.mark.parametrize("name", ["mlp", "residual", "fanout", "attention"])
def test_examples_equal_eager(name, rules, backend):
    """Every example model, for each placement and both skip settings, returns eager
    PyTorch's outputs when run in its arenas with real copies — and every step reads only
    its own device's memory (validate mode)."""
    model, inputs, prog = captured(name)
    expected = model(*inputs)
    for skip in (False, True):
        dg = wb.propagate(place_quietly(prog, RULES[rules]), skip, skip)
        plan = wb.plan(dg, "best")
        _skip_if_missing_gpus(plan, backend)
        res = run(plan, *stage_inputs(dg, inputs, backend), backend=backend, validate=True)
        same(res.outputs, expected, backend)
        assert res.backend == backend


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_random_three_device_placements_equal_eager(seed, backend):
    """Random placements of the attention model over cpu, cuda:0 and cuda:1 (so copies of
    every kind, d2d included) give eager's outputs, with the copy bytes the graph promises."""
    model, inputs, prog = captured("attention", decompose=bool(seed % 2))
    rng = random.Random(seed)
    placed = wb.place(prog, lambda n: rng.choice(["cpu", "cuda:0", "cuda:1"]))
    skip = bool(seed // 2)
    dg = wb.propagate(placed, skip, skip)
    plan = wb.plan(dg, "best")
    _skip_if_missing_gpus(plan, backend)
    res = run(plan, *stage_inputs(dg, inputs, backend), backend=backend, validate=True)
    same(res.outputs, model(*inputs), backend)
    assert res.copy_bytes_by_kind() == dg.copy_bytes()
    assert res.copy_counts() == dg.copy_counts()


def test_validate_catches_a_device_op_reading_host_memory():
    """Validate mode has teeth: a graph whose relu claims to run on cuda:0 while its input
    was computed on the host (a propagation bug: no copy) is refused at that node."""
    import dataclasses

    _, inputs, prog = captured("mlp")
    dg = wb.propagate(wb.place(prog, {}))
    relu = next(n.name for n in dg.graph.nodes if "relu" in n.name)
    devices = dict(dg.node_device)
    devices[relu] = wb.Device.parse("cuda:0")
    broken = dataclasses.replace(dg, node_device=devices)
    plan = wb.plan(broken)
    with pytest.raises(ExecutorError, match=rf"{relu} .*device op on cuda:0.*lies in cpu memory"):
        run(plan, *inputs, backend="sim", validate=True)
    run(plan, *inputs, backend="sim")  # without validation the (wrong) graph just runs


def test_estimate_equals_the_sim_run_and_needs_no_data():
    """For static shapes, ``estimate`` (shapes only) gives exactly the timeline the sim run
    records; on a shape-only capture of the same model it gives the same timeline again."""
    for name, rules in (("residual", RULES["one_device"]), ("attention", RULES["three_devices"])):
        model, inputs, prog = captured(name)
        _, _, meta_prog = captured(name, shape_only=True)
        plan = wb.plan(wb.propagate(place_quietly(prog, rules)), "greedy")
        meta_plan = wb.plan(wb.propagate(place_quietly(meta_prog, rules)), "greedy")
        ran = run(plan, *inputs, backend="sim").timeline
        key = lambda tl: [(e.kind, e.node, e.device, e.stream, e.start_us, e.end_us, e.nbytes, e.flops) for e in tl]  # noqa: E731
        assert key(estimate(plan)) == key(ran)
        assert key(estimate(meta_plan)) == key(ran)
        with pytest.raises(ExecutorError, match="shape-only"):
            run(meta_plan, *inputs, backend="sim")


# -- the tiny MoE decode step ------------------------------------------------------------------


@pytest.fixture(scope="module")
def moe():
    from workbench.models import MoEConfig, QwenMoEDecoder

    model = QwenMoEDecoder(MoEConfig.tiny()).eval()
    inputs = model.example_inputs()
    return model, inputs, wb.capture(model, inputs), model(*inputs)


MOE_RULES = {
    "matmuls": {"cuda:0": ["aten.linear", "aten.bmm", "aten.matmul", "aten.index_select"]},
    "all": {"cuda:0": ["aten.*"]},
    "two_devices": {"cuda:0": ["aten.linear"], "cuda:1": ["aten.bmm", "aten.matmul", "aten.index_select", "aten.silu"]},
}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rules", list(MOE_RULES))
def test_moe_decode_step_equals_eager(moe, rules, backend):
    """The tiny MoE decode step (logits and every updated cache) equals eager for several
    placements, one and two devices, with both skip settings."""
    model, inputs, prog, expected = moe
    for skip in (False, True):
        dg = wb.propagate(wb.place(prog, MOE_RULES[rules]), skip, skip)
        plan = wb.plan(dg, "best")
        _skip_if_missing_gpus(plan, backend)
        res = run(plan, *stage_inputs(dg, inputs, backend), backend=backend, validate=True)
        same(res.outputs, expected, backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_strategies_equal_eager(moe, backend):
    """Every MoE placement strategy (experts on the device, on the host, streamed with
    gather copies), with skip flags off and on, equals eager; the gather copies move the
    bytes the graph promises."""
    from workbench.moe.strategies import strategy_variants

    model, inputs, prog, expected = moe
    for strategy in strategy_variants():
        dg = strategy.apply(prog)
        plan = wb.plan(dg, "best")
        res = run(plan, *stage_inputs(dg, inputs, backend), backend=backend, validate=True)
        same(res.outputs, expected, backend)
        assert res.copy_bytes_by_kind() == dg.copy_bytes(), strategy.label
