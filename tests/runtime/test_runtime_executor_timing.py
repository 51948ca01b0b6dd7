"""Sim timing on the executor's real timelines: copy durations, stream serialization,
copy/compute overlap, and write-after-read waits on reused arena memory."""

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.runtime import Timeline
from workbench.machine import CostModel
from workbench.runtime.executor import estimate, run, steps_of

N = 1024  # floats per input: 4 KiB
NBYTES = 4 * N

# Round numbers: 1 GB/s links and device memory (1 byte per ns), 1 µs copy latency,
# no launch overhead, kernel gap or kernel floor, so a copy of NBYTES lasts 1 + 4.096 µs and an elementwise op on
# two such tensors (read 2, write 1) lasts 12.288 µs.
MODEL = CostModel(
    h2d_bandwidth=1e9, d2h_bandwidth=1e9, d2d_bandwidth=1e9,
    h2d_latency=1e-6, d2h_latency=1e-6, d2d_latency=1e-6,
    device_memory_bandwidth=1e9, launch_overhead=0.0, kernel_gap=0.0, min_kernel_time=0.0,
    name="round numbers",
)  # fmt: skip


class TwoInputs(nn.Module):
    """a = x * 2 and b = a * 3 on the device, then b + y: y is copied in after a dies."""

    def forward(self, x, y):
        a = x * 2
        b = a * 3
        return b + y


def timeline(algorithm, skip=False):
    x, y = torch.randn(N), torch.randn(N)
    prog = wb.capture(TwoInputs(), (x, y))
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.mul", "aten.add"]}), skip, skip)
    plan = wb.plan(dg, algorithm)
    res = run(plan, x, y, backend="sim", cost_model=MODEL)
    assert torch.allclose(res.outputs, TwoInputs()(x, y))
    return plan, res.timeline, {e.node: e for e in res.timeline}


def copy_of(events, value):
    (event,) = [e for e in events.values() if e.kind in ("h2d", "d2h", "d2d") and e.node.startswith(value + "_to_")]
    return event


def test_a_copy_lasts_latency_plus_bytes_over_bandwidth():
    """Each h2d and d2h of the run lasts exactly latency + N / bandwidth, N its bytes."""
    _, tl, events = timeline("naive")
    for e in tl:
        if e.kind in ("h2d", "d2h"):
            assert e.nbytes == NBYTES
            assert e.duration_us == pytest.approx(1.0 + NBYTES / 1e3)
            assert e.duration_us == pytest.approx(MODEL.copy_time_us(e.kind, NBYTES))


def test_copies_use_the_copy_stream_of_the_device_they_serve():
    """h2d and d2d run on the destination device's copy stream, d2h on the source's; compute
    on the device's compute stream; host work on the host's main stream."""
    plan, tl, events = timeline("naive")
    steps = steps_of(plan)
    for e in tl:
        step = steps.by_name[e.node]
        if e.kind in ("h2d", "d2d"):
            assert (e.device, e.stream) == (step.dst, "copy")
        elif e.kind == "d2h":
            assert (e.device, e.stream) == (step.src, "copy")
        elif e.kind == "compute":
            assert (e.device, e.stream) == ("cuda:0", "compute")
        else:
            assert (e.device, e.stream) == ("cpu", "main")


def test_two_independent_copies_on_one_stream_serialize():
    """The h2d copies of x and y share cuda:0's copy stream and depend on nothing (no
    memory reuse with the naive plan): the second starts exactly when the first ends,
    not when its own consumer is ready."""
    _, _, events = timeline("naive")
    cx, cy = copy_of(events, "x"), copy_of(events, "y")
    assert (cx.device, cx.stream) == (cy.device, cy.stream) == ("cuda:0", "copy")
    assert cy.start_us == pytest.approx(cx.end_us)
    assert cy.start_us < events["mul_1"].end_us  # it did not wait for the compute before it


def test_copy_and_compute_overlap_on_different_streams():
    """While the first mul computes, the copy of y (independent of it) runs on the copy
    stream: the two intervals intersect, and the timeline's overlap fraction says so."""
    _, tl, events = timeline("naive")
    cy, mul = copy_of(events, "y"), events["mul"]
    assert cy.stream != mul.stream
    assert max(cy.start_us, mul.start_us) < min(cy.end_us, mul.end_us)
    assert tl.overlap_fraction() > 0


def test_a_copy_into_reused_memory_waits_for_the_last_reader_of_the_previous_occupant():
    """With a reusing plan, y's device copy lands on bytes that held an earlier tensor; it
    starts only once that tensor's last reader has finished — later than the copy stream
    was free. The naive plan (no reuse) lets the same copy start at once."""
    plan, tl, events = timeline("greedy")
    target = plan.allocations[copy_of(events, "y").node]
    lo, hi = target.offset, target.offset + target.nbytes
    previous = [
        a for a in plan.allocations.values()
        if a.device == "cuda:0" and a.end < target.start and a.offset < hi and lo < a.offset + a.nbytes
    ]  # fmt: skip
    assert previous, "the plan should reuse memory for y's copy"
    occupant = max(previous, key=lambda a: a.start)
    readers = [
        n.name for n in plan.device_graph.graph.nodes
        if any(plan.storage_of.get(a.name) == occupant.name for a in n.all_input_nodes)
    ]  # fmt: skip
    last_read = max(events[r].end_us for r in readers)
    cy, cx = copy_of(events, "y"), copy_of(events, "x")
    assert cy.start_us == pytest.approx(last_read)
    assert cy.start_us > cx.end_us  # the stream was free earlier: the wait came from reuse
    assert set(readers) & set(steps_of(plan).by_name[cy.node].reuse_deps)

    _, _, free = timeline("naive")
    assert copy_of(free, "y").start_us == pytest.approx(copy_of(free, "x").end_us)


def test_modeled_time_is_deterministic_and_matches_estimate():
    """Two runs give identical timelines, equal to ``estimate`` from shapes alone."""
    plan, tl1, _ = timeline("greedy")
    _, tl2, _ = timeline("greedy")
    key = lambda tl: [(e.kind, e.node, e.device, e.stream, e.start_us, e.end_us, e.nbytes) for e in tl]  # noqa: E731
    assert key(tl1) == key(tl2) == key(estimate(plan, MODEL))


def test_run_result_summaries():
    """``time_us`` is the span, ``copy_bytes_by_kind`` the bytes per kind, and
    ``overlap_fraction`` the timeline's."""
    x, y = torch.randn(N), torch.randn(N)
    prog = wb.capture(TwoInputs(), (x, y))
    plan = wb.plan(wb.propagate(wb.place(prog, {"cuda:0": ["aten.mul", "aten.add"]})), "naive")
    res = run(plan, x, y, backend="sim", cost_model=MODEL)
    assert isinstance(res.timeline, Timeline) and isinstance(res.load_timeline, Timeline)
    assert res.time_us == res.timeline.span_us > 0
    assert res.copy_bytes_by_kind() == {"h2d": 2 * NBYTES, "d2h": NBYTES, "d2d": 0}
    assert res.overlap_fraction == res.timeline.overlap_fraction()
    assert res.cost_model is MODEL
    with pytest.raises(TypeError, match="CostModel"):
        run(plan, x, y, backend="sim", cost_model="h200")


def test_a_plan_estimated_again_under_another_machine_gets_that_machines_timeline(monkeypatch):
    """A plan keeps its ops' counted costs across estimates (rule 10) but not the machine:
    estimated under a slow device, then a fast one, it gets the fast one's timeline event
    for event, exactly as a plan never estimated before does, and the second estimate
    counts no op again."""
    from workbench.runtime import sim_timing

    x, y = torch.randn(N), torch.randn(N)
    dg = wb.propagate(wb.place(wb.capture(TwoInputs(), (x, y)), {"cuda:0": ["aten.mul", "aten.add"]}))
    fast = CostModel.preset("h200", link="nvlink_c2c")
    reused, fresh = wb.plan(dg), wb.plan(dg)
    slow = estimate(reused, MODEL)
    counted = []
    real = sim_timing.cached_op_cost
    monkeypatch.setattr(sim_timing, "cached_op_cost", lambda *a, **k: counted.append(a[0]) or real(*a, **k))
    again = estimate(reused, fast)
    assert not counted
    first = estimate(fresh, fast)
    assert counted  # a plan estimated for the first time counts its ops
    assert again.span_us != slow.span_us
    key = lambda tl: [(e.kind, e.node, e.device, e.stream, e.start_us, e.end_us, e.nbytes, e.flops) for e in tl]  # noqa: E731
    assert key(again) == key(first)


GPU = [pytest.mark.gpu, pytest.mark.skipif(not wb.runtime.cuda_available(), reason=wb.runtime.cuda_unavailable_reason())]


@pytest.mark.parametrize("backend", ["sim", pytest.param("cuda", marks=GPU)])
def test_a_timeline_says_how_its_times_were_obtained(backend):
    """Timeline rule 5: a sim run's and an estimate's timelines name the cost model that
    timed them; a CUDA run's says it was measured, on which GPU. A figure drawn from either
    can then say which it shows."""
    x, y = torch.randn(N), torch.randn(N)
    plan = wb.plan(wb.propagate(wb.place(wb.capture(TwoInputs(), (x, y)), {"cuda:0": ["aten.mul", "aten.add"]})))
    if backend == "sim":
        res = run(plan, x, y, backend="sim", cost_model=MODEL)
        assert res.timeline.source == estimate(plan, MODEL).source == "modeled by round numbers"
    else:
        res = run(plan, *wb.runtime.stage_inputs(plan.device_graph, (x, y), "cuda"), backend="cuda")
        assert res.timeline.source == f"measured with CUDA events on {torch.cuda.get_device_name(0)}"


def test_a_hand_built_timeline_has_no_source_and_a_bad_one_is_refused():
    """A timeline built by hand claims nothing (its maker must say); a source that is not a
    string is refused, naming what it is."""
    assert Timeline().source == ""
    with pytest.raises(TypeError, match="source is a string"):
        Timeline((), (), 3)  # type: ignore[arg-type]
