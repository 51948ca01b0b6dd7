"""Executor memory: arenas and constants placed once, nothing leaks (after a run, after a
failure midway, after a bad input), outputs outlive the session, clear errors."""

import re

import pytest
import torch

import workbench as wb
from workbench.runtime import (
    CudaUnavailableError,
    SimDeviceAllocator,
    UnknownBackendError,
    buffer_of,
    cuda_available,
    cuda_unavailable_reason,
    device_of,
    live_bytes_by_device,
    registry_for_backend,
    stage_inputs,
    to_device,
    to_host,
)
from workbench.runtime.executor import ExecutorError, InputError, load, run

from conftest import captured

GPU = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]
BACKENDS = ["sim", pytest.param("cuda", marks=GPU)]


def settled():
    """Live bytes per device, without a garbage collection: the executor frees its memory
    explicitly or by reference counting, never by waiting for the cycle collector."""
    return live_bytes_by_device()


def attention_plan(skip):
    model, inputs, prog = captured("attention")
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear", "aten.matmul", "aten.topk"]}), skip, skip)
    return model, inputs, dg, wb.plan(dg, "best")


class Boom(RuntimeError):
    pass


def fail_at(k):
    """A ``run_node`` hook that runs nodes normally and raises at the k-th compute node."""
    seen = []

    def run_node(node, args, kwargs):
        seen.append(node.name)
        if len(seen) == k:
            raise Boom(f"injected failure at {node.name}")
        return node.target(*args, **kwargs)

    return run_node


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("skip", [False, True])
def test_run_leaves_no_live_bytes(skip, backend):
    """After ``run`` (and once its outputs are dropped) live bytes return to their starting
    value on every device; while outputs are held, only caller-owned outputs stay live."""
    model, inputs, dg, plan = attention_plan(skip)
    staged = stage_inputs(dg, inputs, backend)
    start = settled()
    res = run(plan, *staged, backend=backend)
    held = settled()
    owned = {str(device_of(o, backend)) for o in res.outputs if buffer_of(o) is not None}
    assert owned == ({"cuda:0"} if skip else set())  # device outputs own their buffers
    assert {d for d in held if held[d] != start.get(d, 0)} == owned
    del res
    assert settled() == start


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("skip", [False, True])
def test_failure_midway_leaves_no_live_bytes(skip, backend):
    """An exception in the middle of a call (injected at each compute node in turn, so
    after copies and caller-owned outputs were allocated) propagates, and live bytes are
    back to their starting value on every device at once: freed by the executor, not left
    to the frames of the traceback."""
    model, inputs, dg, plan = attention_plan(skip)
    staged = stage_inputs(dg, inputs, backend)
    compute = sum(1 for n in dg.graph.nodes if n.op == "call_function" and "copy" not in str(n.target) and n.target.__name__ != "getitem")
    start = settled()
    for k in range(1, compute + 1):
        with pytest.raises(Boom) as info:
            run(plan, *staged, backend=backend, run_node=fail_at(k))
        assert settled() == start, k  # even while the traceback (and its frames) is held
        del info


def test_failed_call_keeps_the_session_usable():
    """A call that fails midway frees its own allocations but not the session's arenas; the
    next call succeeds, and closing frees everything."""
    model, inputs, dg, plan = attention_plan(True)
    staged = stage_inputs(dg, inputs, "sim")
    start = settled()
    hooks = {"fail": True}

    def run_node(node, args, kwargs):
        if hooks["fail"] and "softmax" in node.name:
            raise Boom("injected")
        return node.target(*args, **kwargs)

    session = load(plan, "sim", run_node=run_node)
    loaded = settled()
    with pytest.raises(Boom):
        session.run(*staged)
    assert settled() == loaded
    hooks["fail"] = False
    res = session.run(*staged)
    assert torch.allclose(to_host(res.outputs[0]), model(*inputs)[0], atol=1e-5)
    del res
    session.close()
    session.close()  # closing twice is fine
    assert settled() == start
    with pytest.raises(ExecutorError, match="closed"):
        session.run(*staged)


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_tensor_where_a_device_tensor_is_required(backend):
    """With skip-h2d the caller owns device inputs: a host tensor there is a clear error
    naming the input, its device and how to stage it — and nothing stays allocated."""
    model, inputs, dg, plan = attention_plan(True)
    (name,) = dg.program.user_inputs
    assert not dg.input_devices[name].is_host
    start = settled()
    message = (
        rf"input '{name}' must be supplied on cuda:0 .*skip_h2d_for_method_inputs.* but got a host tensor; "
        rf"stage it with workbench\.runtime\.to_device\(x, 'cuda:0', backend='{backend}'\)"
    )
    with pytest.raises(InputError, match=message):
        run(plan, *inputs, backend=backend)
    assert settled() == start
    with load(plan, backend) as session:
        with pytest.raises(InputError, match=message):
            session.run(*inputs)
    assert settled() == start


def test_wrong_inputs_are_clear_errors():
    """A device tensor for a host input, a wrong dtype, a wrong shape and a wrong count are
    each refused with a message saying what is expected."""
    _, inputs, _, plan = attention_plan(False)
    (x,) = inputs
    with pytest.raises(InputError, match=r"must be a host \(cpu\) tensor, but it is on cuda:0"):
        run(plan, to_device(x, "cuda:0", backend="sim"), backend="sim")
    with pytest.raises(InputError, match="must have dtype torch.float32, got torch.float64"):
        run(plan, x.double(), backend="sim")
    with pytest.raises(InputError, match=r"must have shape \('6', '16'\), got \(6, 8\)"):
        run(plan, x[:, :8], backend="sim")
    with pytest.raises(InputError, match="expected 1 inputs"):
        run(plan, x, x, backend="sim")


def test_sim_tensors_made_with_to_device_are_accepted_and_never_copied_in():
    """A caller-owned input staged with ``to_device(..., backend="sim")`` is read in place:
    the call's timeline has no h2d copy and no input binding for it."""
    model, inputs, prog = captured("attention")
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.*"]}), True, True)  # everything on the device
    plan = wb.plan(dg)
    x = to_device(inputs[0], "cuda:0", backend="sim")
    res = run(plan, x, backend="sim")
    assert res.copy_counts()["h2d"] == 0
    assert not [e for e in res.timeline if e.node == dg.program.user_inputs[0]]
    assert torch.allclose(to_host(res.outputs[0]), model(*inputs)[0], atol=1e-5)


class CountingSim(SimDeviceAllocator):
    """A simulated device allocator that counts the bytes copied in from the host."""

    def __init__(self):
        self.h2d_bytes = 0

    def copy_host_to_device(self, dst, dst_offset, src, stream=None):
        self.h2d_bytes += src.numel() * src.element_size()
        return super().copy_host_to_device(dst, dst_offset, src, stream)


def test_repeated_calls_reuse_weights_and_give_the_same_outputs():
    """Constants are placed once, at load: the load timeline has exactly one copy per
    (constant, resident device), the weights cross the link once, each call copies only
    its activations, and repeated calls return the same outputs."""
    model, inputs, dg, plan = attention_plan(False)
    counting = CountingSim()
    registry = registry_for_backend("sim")
    registry.register(counting, replace=True)
    with load(plan, "sim", registry=registry) as session:
        loaded = counting.h2d_bytes
        assert loaded == plan.constant_bytes["cuda:0"]
        placed = sorted((e.node, e.device) for e in session.load_timeline)
        expected = sorted((c, str(d)) for c, held in dg.residency.items() for d in held)
        assert placed == expected and len(set(placed)) == len(placed)
        first = session.run(*inputs)
        for _ in range(3):
            again = session.run(*inputs)
            for a, b in zip(first.outputs, again.outputs):
                assert torch.equal(a, b)
            assert again.load_timeline is first.load_timeline
        assert counting.h2d_bytes - loaded == 4 * dg.copy_bytes()["h2d"]
        assert session.constant_region_bytes["cuda:0"] >= plan.constant_bytes["cuda:0"]
        for (name, device) in placed:
            const = session.constant(name, device)
            assert device_of(const, "sim") == wb.Device.parse(device)
            assert torch.equal(const, dg.program.constant_tensor(name))


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_outlive_the_session(backend):
    """Outputs never alias the session's arenas: after close they keep their values (host
    outputs were copied out, device outputs own their buffer)."""
    model, inputs, dg, plan = attention_plan(True)
    staged = stage_inputs(dg, inputs, backend)
    with load(plan, backend) as session:
        res = session.run(*staged)
        snapshot = [to_host(o).clone() for o in res.outputs]
        for o in res.outputs:
            assert not session.in_session_memory(o)
    junk = torch.randn(1 << 16)  # let freed memory be reused
    assert all(torch.equal(to_host(o), s) for o, s in zip(res.outputs, snapshot))
    del junk


def test_backend_errors_are_one_clear_line():
    """``backend="cuda"`` without a GPU names the reason in one line; an unknown backend
    lists the valid ones; None means the default (sim here)."""
    _, inputs, _, plan = attention_plan(False)
    if not cuda_available():
        with pytest.raises(CudaUnavailableError) as info:
            run(plan, *inputs, backend="cuda")
        assert "\n" not in str(info.value) and "CUDA is unavailable" in str(info.value)
        assert run(plan, *inputs).backend == "sim"
    with pytest.raises(UnknownBackendError, match=re.escape("valid backends are 'cuda', 'sim'")):
        run(plan, *inputs, backend="tpu")
    with pytest.raises(TypeError, match="MemoryPlan"):
        run("not a plan", *inputs)
