"""Graph launch (``load(plan, launch="graph")``): segments, sim timing, outputs, output pool."""

import dataclasses
import math
import warnings

import pytest
import torch

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.runtime import SimDeviceAllocator, live_bytes, stage_inputs, to_host
from workbench.machine import CostModel
from workbench.runtime.allocators import AllocatorRegistry, HostAllocator
from workbench.runtime.executor import estimate, run
from workbench.runtime.graph_segments import graph_segments
from workbench.runtime.steps import steps_of
from workbench.moe.strategies import strategy_variants

from tests.conftest import assert_matches_eager


@pytest.fixture(scope="module")
def moe():
    model = QwenMoEDecoder(MoEConfig.tiny()).eval()
    inputs = model.example_inputs()
    program = wb.capture(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    plans = {}
    for strategy in strategy_variants():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dg = strategy.apply(program)
        plans[strategy.label] = wb.plan(dg, "best")
    return model, inputs, expected, plans


LABELS = [s.label for s in strategy_variants()]


def _staged(plan, inputs):
    return stage_inputs(plan.device_graph, inputs, "sim")


@pytest.mark.parametrize("bad", ["Graph", "per_op", "", None, 3])
def test_bad_launch_is_an_error_naming_the_valid_modes_and_allocates_nothing(moe, bad):
    """A launch value that is not 'eager' or 'graph' is a WorkbenchError naming both, raised
    before anything is allocated (None is the default, not an error: it is skipped)."""
    plan = moe[3]["all_on_device"]
    if bad is None:
        with wb.load(plan, "sim", launch=bad) as session:
            assert session.launch == "eager"
        return
    before = live_bytes()
    with pytest.raises(WorkbenchError, match="'eager', 'graph'"):
        wb.load(plan, "sim", launch=bad)
    assert live_bytes() == before


def test_bad_outputs_and_incompatible_options_are_errors(moe):
    """outputs must be 'fresh' or 'pooled'; graph launch refuses fresh outputs and
    concurrent calls; each message names what is valid."""
    plan = moe[3]["all_on_device"]
    with pytest.raises(WorkbenchError, match="'fresh', 'pooled'"):
        wb.load(plan, "sim", outputs="shared")
    with pytest.raises(WorkbenchError, match="outputs='pooled'"):
        wb.load(plan, "sim", launch="graph", outputs="fresh")
    with pytest.raises(WorkbenchError, match="max_concurrent_calls must be 1"):
        wb.load(plan, "sim", launch="graph", max_concurrent_calls=2)


@pytest.mark.parametrize("label", LABELS)
def test_segments_are_maximal_runs_of_capturable_steps(moe, label):
    """Every device step is either in exactly one segment or a break with a reason; steps
    of a segment are consecutive device steps in issue order with no break between them,
    and two neighbouring segments have at least one break between them (maximal)."""
    plan = moe[3][label]
    steps = steps_of(plan)
    segs = graph_segments(plan, steps)
    order = [s.name for s in steps.steps if s.event is not None]
    position = {name: i for i, name in enumerate(order)}
    captured = [n for s in segs.segments for n in s.steps]
    broken = [b.step for b in segs.breaks]
    assert sorted(captured + broken) == sorted(order)
    assert all(b.reason for b in segs.breaks)
    for seg in segs.segments:
        idx = [position[n] for n in seg.steps]
        assert idx == list(range(idx[0], idx[0] + len(idx)))
    for a, b in zip(segs.segments, segs.segments[1:]):
        between = range(position[a.last] + 1, position[b.first])
        assert len(between) >= 1 and all(order[i] in segs.uncaptured for i in between)


def test_host_steps_and_host_side_copies_of_data_break_segments(moe):
    """Host steps are never captured; routed and reuse copies (their handlers read data
    on the host) never are either, whatever plan holds them."""
    for label, plan in moe[3].items():
        steps = steps_of(plan)
        segs = graph_segments(plan, steps)
        captured = segs.segment_of()
        for step in steps.steps:
            if step.event == "host":
                assert step.name not in captured, (label, step.name)
            if step.copy is not None and str(step.copy.role) in ("reuse", "routed"):
                assert step.name not in captured, (label, step.name)


@pytest.mark.parametrize("label", LABELS)
def test_graph_launch_outputs_equal_eager_launch_bits_and_eager_torch(moe, label):
    """On sim, graph launch runs the same operations as per-op launch: call after call its
    outputs equal per-op launch's (within float tolerance: the two sessions' arenas lie at
    different addresses, and some CPU kernels round by alignment) and match eager PyTorch."""
    model, inputs, expected, plans = moe
    plan = plans[label]
    staged = _staged(plan, inputs)
    with wb.load(plan, "sim") as session:
        want = [to_host(t).clone() for t in session.run(*staged).outputs]
    with wb.load(plan, "sim", launch="graph") as session:
        for _ in range(3):
            res = session.run(*staged)
            got = [to_host(t) for t in res.outputs]
            assert_matches_eager(got, want, label)
    assert_matches_eager(got, expected, label)


@pytest.mark.parametrize("label", LABELS)
def test_graph_launch_is_never_slower_and_its_segments_are_on_the_timeline(moe, label):
    """With the default preset (graph launch cheaper than a kernel launch), a graph-launched
    call's modeled span is no longer than the per-op one; RunResult.segments has one span
    per segment, named by its first and last step, within the call's timeline."""
    _, inputs, _, plans = moe
    plan = plans[label]
    staged = _staged(plan, inputs)
    eager = run(plan, *staged, backend="sim")
    with wb.load(plan, "sim", launch="graph") as session:
        res = session.run(*staged)
        segs = session.segments.segments
    assert res.launch == "graph" and eager.launch == "eager"
    assert res.time_us <= eager.time_us + 1e-6
    assert [(s.index, s.first, s.last) for s in res.segments] == [(s.index, s.first, s.last) for s in segs]
    end = max(e.end_us for e in res.timeline)
    assert all(0 <= s.start_us <= s.end_us <= end for s in res.segments)


@pytest.mark.parametrize("label", ["all_on_device", "expert_streaming", "experts_on_host"])
def test_graph_launch_charges_one_launch_per_segment_and_device(moe, label):
    """With a graph launch of one second and every other launch cost zero, the modeled
    span is (in seconds, rounded down) the number of captured graphs: one per segment and
    device, not one per step. estimate(launch='graph') gives the run's timeline."""
    _, inputs, _, plans = moe
    plan = plans[label]
    model = dataclasses.replace(CostModel.preset("h200", link="pcie_gen5"), graph_launch_overhead=1.0, launch_overhead=0.0)
    with wb.load(plan, "sim", model, launch="graph") as session:
        res = session.run(*_staged(plan, inputs))
        graphs = sum(len(s.devices) for s in session.segments.segments)
    assert graphs >= 1
    assert math.floor(res.time_us / 1e6) == graphs
    if label == "all_on_device":  # static shapes: the estimate is the run's timeline
        assert estimate(plan, model, launch="graph").span_us == pytest.approx(res.time_us)


def test_estimate_refuses_a_bad_launch(moe):
    """estimate's launch is checked like load's."""
    with pytest.raises(WorkbenchError, match="'eager', 'graph'"):
        estimate(moe[3]["all_on_device"], launch="replay")


class _CountingSim(SimDeviceAllocator):
    """The sim device allocator, counting the blocks it hands out."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def _allocate(self, nbytes, device):
        self.count += 1
        return super()._allocate(nbytes, device)


@pytest.mark.parametrize("label", ["all_on_device+skip", "expert_streaming+skip"])
def test_pooled_outputs_make_steady_state_calls_allocate_nothing(moe, label):
    """With pooled outputs (and with graph launch), calls after the first two allocate no
    sim device memory, while fresh outputs allocate on every call of a plan with device
    outputs; the outputs are the same bits either way."""
    _, inputs, _, plans = moe
    plan = plans[label]
    counts = {}
    outs = {}
    for mode in ("fresh", "pooled", "graph"):
        counter = _CountingSim()
        registry = AllocatorRegistry([HostAllocator(), counter], backend="sim")
        staged = _staged(plan, inputs)
        kwargs = {"launch": "graph"} if mode == "graph" else {"outputs": mode}
        with wb.load(plan, "sim", registry=registry, **kwargs) as session:
            session.run(*staged)
            session.run(*staged)
            before = counter.count
            for _ in range(3):
                res = session.run(*staged)
            counts[mode] = counter.count - before
            outs[mode] = [to_host(t).clone() for t in res.outputs]
    assert counts["pooled"] == 0 and counts["graph"] == 0
    assert counts["fresh"] >= 3
    assert_matches_eager(outs["pooled"], outs["fresh"], "pooled vs fresh outputs")


def test_pooled_outputs_stay_valid_through_the_next_call_and_are_reused_after(moe):
    """Ownership rule: call N's pooled outputs keep their values through call N+1 (even
    when N+1 takes them as inputs), and call N+2 writes the same memory again."""
    _, inputs, _, plans = moe
    plan = plans["all_on_device+skip"]
    staged = _staged(plan, inputs)
    with wb.load(plan, "sim", outputs="pooled") as session:
        first = session.run(*staged).outputs
        kept = [to_host(t).clone() for t in first]
        devices = [t for t in first if isinstance(t, torch.Tensor) and not session.exec_backend.device_of(t).is_host]
        assert devices, "the +skip plan returns its caches on the device"
        session.run(*staged)
        assert all(torch.equal(to_host(t), k) for t, k in zip(first, kept))
        third = session.run(*staged).outputs
        ptrs = {t.data_ptr() for t in devices}
        assert ptrs & {t.data_ptr() for t in third if isinstance(t, torch.Tensor)}


def test_decode_with_graph_launch_matches_eager_launch_and_the_model(moe):
    """wb.decode with launch='graph' feeds each step the caches of the step before (pooled
    outputs) and picks the same tokens as per-op launch, every step matching eager."""
    model, _, _, plans = moe
    plan = plans["all_on_device+skip"]
    eager = wb.decode(plan, 4, reference=model)
    graph = wb.decode(plan, 4, reference=model, launch="graph")
    assert graph.tokens == eager.tokens
    assert graph.matches_eager == (True,) * 4
    assert all(r.launch == "graph" and r.segments for r in graph.steps)


def test_reuse_copies_of_a_prefetching_plan_run_between_segments():
    """A streaming plan with prefetch has reuse copies (their handler finds hits on the
    device per call); each is a break with its variant's reason, and graph launch still
    gives per-op launch's outputs (within float tolerance: another run's memory)."""
    from workbench.moe.strategies import expert_streaming

    model = QwenMoEDecoder(MoEConfig.tiny(), expert_prefetch=True).eval()
    inputs = model.example_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = wb.plan(expert_streaming(prefetch=True).apply(wb.capture(model, inputs)), "best")
    steps = steps_of(plan)
    reuse = [s.name for s in steps.steps if s.copy is not None and str(s.copy.role) == "reuse"]
    assert reuse
    reasons = {b.step: b.reason for b in graph_segments(plan, steps).breaks}
    assert all("reuse copy" in reasons[name] for name in reuse)
    staged = _staged(plan, inputs)
    eager = run(plan, *staged, backend="sim")
    graph = run(plan, *staged, backend="sim", launch="graph")
    assert_matches_eager(graph.outputs, [to_host(t) for t in eager.outputs], "graph vs per-op launch")
    assert graph.launch == "graph" and len(graph.segments) > 1
