"""How computed values reach their arena slots: ``out=`` writes in place, the rest copied
in (and shown as such); in-place metadata ops on arena values; errors that name the node."""

import inspect

import pytest
import torch

import workbench as wb
from workbench.runtime import cuda_available, cuda_unavailable_reason, stage_inputs, to_host
from workbench.runtime.executor import estimate, run, steps_of

from conftest import moe_tiny

GPU = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]
BACKENDS = ["sim", pytest.param("cuda", marks=GPU)]


def _moe_plan(skip: bool):
    cfg, model, inputs, prog = moe_tiny()
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["*"]}), skip, skip)
    return model, inputs, dg, wb.plan(dg, "greedy")


def _same(got, want) -> bool:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    return len(got) == len(want) and all(torch.allclose(to_host(g), w, atol=1e-5) for g, w in zip(got, want))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("skip", [False, True])
def test_out_variants_write_in_place_and_avoid_the_slot_copy(skip, backend):
    """Every step the plan marks ``direct`` is written by its ``out=`` variant (no copy), every
    ``copy`` step copies once, and the avoided copies are counted: forcing every op through
    fresh memory (a ``run_node`` hook) copies the direct ones too. Outputs equal eager."""
    model, inputs, dg, plan = _moe_plan(skip)
    events = steps_of(plan).events
    direct = sum(s.slot_write == "direct" for s in events)
    copied = [s for s in events if s.slot_write == "copy"]
    staged = stage_inputs(dg, inputs, backend)
    res = run(plan, *staged, backend=backend)
    with torch.no_grad():
        assert _same(res.outputs, model(*inputs))
    assert res.slot_writes.direct == direct and direct > 3 * len(copied) > 0
    assert res.slot_writes.copied == len(copied)
    assert res.slot_writes.copied_bytes == sum(s.slot_copy_bytes for s in copied)
    assert sum(e.activity == "slot_copy" for e in res.timeline) == len(copied)
    forced = run(plan, *staged, backend=backend, run_node=lambda node, args, kwargs: node.target(*args, **kwargs))
    assert forced.slot_writes.direct == 0 and forced.slot_writes.copied == direct + len(copied)
    with torch.no_grad():
        assert _same(forced.outputs, model(*inputs))


def test_a_slot_copy_follows_its_op_on_the_same_lane_and_holds_back_its_readers():
    """A copied result is its own ``slot_copy`` event: after its op, on the op's lane, of the
    planned bytes; the steps that read the value start only once the copy ended."""
    model, inputs, dg, plan = _moe_plan(True)
    res = run(plan, *stage_inputs(dg, inputs, "sim"), backend="sim")
    by_node: dict[str, list] = {}
    for e in res.timeline:
        by_node.setdefault(e.node, []).append(e)
    steps = steps_of(plan)
    for step in (s for s in steps.events if s.slot_write == "copy"):
        op, slot_copy = sorted(by_node[step.name], key=lambda e: e.start_us)
        assert (op.activity, slot_copy.activity) == ("op", "slot_copy")
        assert (slot_copy.device, slot_copy.stream) == (op.device, op.stream) and slot_copy.start_us >= op.end_us
        assert slot_copy.nbytes == step.slot_copy_bytes
        readers = [s for s in steps.events if step.name in s.deps]
        assert all(min(e.start_us for e in by_node[r.name]) >= slot_copy.end_us for r in readers)


def test_estimate_models_the_same_slot_copies_as_a_run():
    """``estimate`` (shapes only) places the same op and slot-copy events as a sim run."""
    model, inputs, dg, plan = _moe_plan(False)
    ran = run(plan, *inputs, backend="sim").timeline
    modeled = estimate(plan)
    key = lambda e: (e.node, e.activity, e.kind, str(e.device), e.stream, round(e.start_us, 6), round(e.end_us, 6))  # noqa: E731
    assert [key(e) for e in ran] == [key(e) for e in modeled]


class _DetachedConstant(torch.nn.Module):
    """A constant made in ``forward`` and detached in place: export traces it as
    ``lift_fresh_copy`` then ``detach_`` on the copy, which lives in an arena slot."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.tensor([1.0, 2.0, 3.0, 4.0])
        c.detach_()
        return x * c + 1


@pytest.mark.parametrize("rules", [{}, {"cuda:0": ["*"]}])
@pytest.mark.parametrize("skip", [False, True])
def test_an_inplace_detach_of_an_arena_value_runs_like_eager(rules, skip):
    """``detach_`` on a value bound to an arena slot (a view of the arena) is a no-op at run
    time, as in eager under ``no_grad``, instead of torch's "can't detach views in-place"."""
    model, x = _DetachedConstant(), torch.randn(2, 4)
    prog = wb.capture(model, (x,))
    assert any(n.target is torch.ops.aten.detach_.default for n in prog.graph.nodes)
    dg = wb.propagate(wb.place(prog, rules), skip, skip)
    res = run(wb.plan(dg), *stage_inputs(dg, (x,), "sim"), backend="sim")
    assert torch.allclose(to_host(res.outputs), model(x))


class _Boom(RuntimeError):
    pass


def test_an_execution_error_keeps_its_type_and_names_its_node():
    """An op that fails at run time raises its own exception, with a note naming the node,
    its op, its device and the model source line that issued it, so the failure can be
    found in the graph and in the model."""
    model, inputs, dg, plan = _moe_plan(False)
    target = next(n for n in dg.graph.nodes if n.op == "call_function" and "softmax" in n.name)

    def run_node(node, args, kwargs):
        if node is target:
            raise _Boom("injected")
        return node.target(*args, **kwargs)

    with pytest.raises(_Boom) as info:
        run(plan, *inputs, backend="sim", run_node=run_node)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert repr(target.name) in notes and ("aten._softmax" in notes or "aten.softmax" in notes)
    assert "cuda:0" in notes
    assert f'File "{inspect.getsourcefile(type(model))}", line' in notes and "in forward" in notes

