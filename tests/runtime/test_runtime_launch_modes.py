"""Launch modes of the simulated machine: per-kernel launches (eager) and graph replay."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.models.examples import example
from workbench.machine import CostModel
from workbench.machine.op_cost import CostModelError
from workbench.runtime.executor import estimate, steps_of
from workbench.runtime.sim_timing import SimClock
from workbench.runtime.steps import HOST_LANE, Step

COPY_KINDS = ("h2d", "d2h", "d2d")


def _step(index, kind, device="cuda:0", deps=()):
    """A Step as the executor would make it: copies on a copy stream, kernels on the
    compute stream, host work on the host lane."""
    if kind == "compute":
        lane, src, dst = (device, "compute"), "", ""
    elif kind == "host":
        lane, src, dst = HOST_LANE, "", ""
    elif kind == "d2h":
        lane, src, dst = (device, "copy"), device, "cpu"
    else:  # h2d
        lane, src, dst = (device, "copy"), "cpu", device
    return Step(
        index=index, name=f"s{index}", op="call_function", device=device if kind != "host" else "cpu", event=kind,
        lane=lane, deps=tuple(deps), reuse_deps=(), src=src, dst=dst,
    )


def _schedule(model, steps, durations):
    clock = SimClock(model)
    for step, duration in zip(steps, durations):
        clock.add(step, lambda d=duration: (d, 8, 0))
    return clock


def _end(clock):
    """When the call's last event ends, from the call's start (t = 0)."""
    return max(e.end_us for e in clock.timeline())


def _model(launch, graph_launch, gap, floor):
    return CostModel(launch_overhead=launch, graph_launch_overhead=graph_launch, kernel_gap=gap, min_kernel_time=floor)


@st.composite
def programs(draw):
    """A random call: kernels on two devices, host steps, copies, each depending on some
    earlier steps; random durations; launch figures with graph launch <= kernel launch."""
    n = draw(st.integers(1, 25))
    kinds = draw(st.lists(st.sampled_from(["compute", "compute", "compute", "host", "h2d", "d2h"]), min_size=n, max_size=n))
    devices = draw(st.lists(st.sampled_from(["cuda:0", "cuda:1"]), min_size=n, max_size=n))
    steps = []
    for i, (kind, device) in enumerate(zip(kinds, devices)):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        steps.append(_step(i, kind, device, [f"s{d}" for d in deps]))
    durations = draw(st.lists(st.floats(0.0, 50.0), min_size=n, max_size=n))
    launch = draw(st.floats(0.0, 20e-6))
    graph_launch = draw(st.floats(0.0, 1.0)) * launch
    model = _model(launch, graph_launch, draw(st.floats(0.0, 5e-6)), draw(st.floats(0.0, 5e-6)))
    return model, steps, durations


@settings(max_examples=200, deadline=None)
@given(programs())
def test_graph_replay_is_never_slower_than_eager_and_copies_are_unaffected(program):
    """For any steps and any figures with graph_launch_overhead <= launch_overhead, every
    event ends no later under graph replay than under eager launches (so the span is no
    longer), and every copy lasts exactly as long and moves the same bytes in both modes."""
    model, steps, durations = program
    eager = {e.node: e for e in _schedule(model, steps, durations).timeline()}
    graph = {e.node: e for e in _schedule(model.with_launch_mode("graph"), steps, durations).timeline()}
    assert eager.keys() == graph.keys()
    for name, e in eager.items():
        g = graph[name]
        assert g.end_us <= e.end_us + 1e-9
        if e.kind in COPY_KINDS:
            assert g.nbytes == e.nbytes and g.duration_us == pytest.approx(e.duration_us, rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(programs())
def test_eager_issues_one_device_operation_per_launch_overhead(program):
    """Under eager launches the k-th device operation (kernel or copy) starts no earlier
    than k launch overheads after the call began, so the call lasts at least
    n_device_ops × launch_overhead; the host has spent at least that much issuing them."""
    model, steps, durations = program
    clock = _schedule(model, steps, durations)
    kernels = sorted((e for e in clock.timeline() if e.kind != "host"), key=lambda e: e.id)
    for k, e in enumerate(kernels, start=1):
        assert e.start_us >= k * model.launch_overhead * 1e6 - 1e-9
    assert _end(clock) >= len(kernels) * model.launch_overhead * 1e6 - 1e-9
    assert clock.host_us >= len(kernels) * model.launch_overhead * 1e6 - 1e-9


def test_issue_bound_and_device_bound_chains_have_their_closed_forms():
    """K tiny kernels on one stream: eager with a launch slower than a kernel ends at
    K·launch + floor (issue-bound); graph replay ends at graph launch + K·floor + (K-1)·gap
    (device-bound); the host has spent K launches, or one graph launch."""
    K = 50
    model = _model(launch=4e-6, graph_launch=3e-6, gap=0.5e-6, floor=1e-6)
    steps = [_step(i, "compute", deps=[f"s{i - 1}"] if i else []) for i in range(K)]
    floor = [model.compute_time_us(0, 8, "cuda:0")] * K
    eager = _schedule(model, steps, floor)
    graph = _schedule(model.with_launch_mode("graph"), steps, floor)
    assert _end(eager) == pytest.approx(K * 4.0 + 1.0)
    assert _end(graph) == pytest.approx(3.0 + K * 1.0 + (K - 1) * 0.5)
    assert (eager.host_us, graph.host_us) == (pytest.approx(K * 4.0), pytest.approx(3.0))


def test_a_host_step_closes_the_captured_graph():
    """Kernels, a host step, kernels: graph replay launches two graphs (the host runs
    between them), and the second graph's kernels wait for the host step's end."""
    model = _model(launch=4e-6, graph_launch=3e-6, gap=0.0, floor=1e-6).with_launch_mode("graph")
    kinds = ["compute", "compute", "host", "compute", "compute"]
    steps = [_step(i, kind) for i, kind in enumerate(kinds)]
    clock = _schedule(model, steps, [1.0, 1.0, 10.0, 1.0, 1.0])
    events = {e.node: e for e in clock.timeline()}
    assert events["s0"].start_us == 3.0
    assert events["s2"].start_us == 3.0  # the host step, right after launching the first graph
    assert events["s3"].start_us == events["s2"].end_us + 3.0 == 16.0
    assert clock.host_us == 16.0


def _residual_plan():
    model, inputs = example("residual")
    prog = wb.capture(model, inputs)
    return wb.plan(wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear", "aten.gelu"]})))


def test_on_a_real_plan_graph_is_faster_copies_are_the_same_and_estimates_repeat():
    """The residual example with copies in and out over NVLink-C2C: graph replay's span is below eager's,
    the copies are the same events (kind, bytes, duration) in both, eager's last event
    ends at least n_kernels × launch_overhead after the call began, and estimating twice
    gives the same timeline."""
    plan = _residual_plan()
    model = CostModel.preset("a100_80gb", link="nvlink_c2c")  # a fast link: kernels are on the critical path
    eager, graph = estimate(plan, model), estimate(plan, model.with_launch_mode("graph"))
    kernels = sum(1 for s in steps_of(plan).events if s.event == "compute")
    assert kernels > 0 and graph.span_us < eager.span_us
    assert max(e.end_us for e in eager) >= kernels * model.launch_overhead * 1e6
    copies = [(e.node, e.kind, e.nbytes, pytest.approx(e.duration_us)) for e in eager if e.kind in COPY_KINDS]
    assert copies and copies == [(e.node, e.kind, e.nbytes, e.duration_us) for e in graph if e.kind in COPY_KINDS]
    assert estimate(plan, model).to_dataframe().equals(eager.to_dataframe())


def test_a_sim_run_is_timed_in_the_models_launch_mode():
    """wb.run on sim uses the cost model's launch mode: its timeline equals estimate's in
    both modes, and the two modes differ."""
    model, inputs = example("residual")
    plan = _residual_plan()
    cm = CostModel.preset("h200")
    spans = []
    for mode in ("eager", "graph"):
        m = cm.with_launch_mode(mode)
        res = wb.run(plan, *inputs, backend="sim", cost_model=m)
        assert res.timeline.to_dataframe().equals(estimate(plan, m).to_dataframe())
        spans.append(res.time_us)
    assert spans[1] < spans[0]


# -- presets ------------------------------------------------------------------------------


def test_every_preset_combination_is_valid_and_graph_launch_is_no_dearer():
    """Every device × link × host preset that exists builds a valid model whose graph launch
    costs no more host time than one kernel launch (the condition for rule 7), in eager mode
    by default; a link that exists with one host only (NVLink-C2C: Grace) refuses any other."""
    names = CostModel.presets()
    for device in names["device"]:
        for link in names["link"]:
            for host in names["host"]:
                if link == "nvlink_c2c" and host != "grace":
                    with pytest.raises(CostModelError, match="exists only with the 'grace' host"):
                        CostModel.preset(device, link=link, host=host)
                    continue
                m = CostModel.preset(device, link=link, host=host)
                assert m.launch_mode == "eager"
                assert 0 < m.graph_launch_overhead <= m.launch_overhead
                assert m.name == f"{device}+{link}+{host}"


def test_a100_presets_have_the_datasheet_figures():
    """A100 SXM4: HBM 1,555 GB/s (40 GB) and 2,039 GB/s (80 GB); 312 TFLOP/s bf16, 19.5 fp32."""
    a40, a80 = CostModel.preset("a100_40gb"), CostModel.preset("a100_80gb")
    assert (a40.device_memory_bandwidth, a80.device_memory_bandwidth) == (1.555e12, 2.039e12)
    for m in (a40, a80):
        assert (m.device_flops_bf16, m.device_flops_fp32) == (312e12, 19.5e12)


def test_launch_figures_are_validated():
    """An unknown launch mode and negative launch figures are refused, naming the field."""
    with pytest.raises(ValueError, match="launch_mode must be one of eager, graph"):
        CostModel(launch_mode="cudagraph")
    for field in ("launch_overhead", "graph_launch_overhead", "kernel_gap", "min_kernel_time"):
        with pytest.raises(ValueError, match=f"{field} must be >= 0"):
            CostModel(**{field: -1e-6})
    with pytest.raises(wb.WorkbenchError, match="must be finite"):
        CostModel(h2d_bandwidth=float("inf"))


# -- files ----------------------------------------------------------------------------------


def test_json_round_trip_keeps_every_figure():
    """to_json → from_json gives back an equal model for every device preset in both modes."""
    for device in CostModel.presets()["device"]:
        for mode in ("eager", "graph"):
            m = CostModel.preset(device).with_launch_mode(mode)
            assert CostModel.from_json(m.to_json()) == m


def test_bad_cost_model_files_say_what_is_wrong(tmp_path):
    """Unknown or missing figures, unparsable text and a missing file are errors naming the problem."""
    values = CostModel().to_dict()
    with pytest.raises(ValueError, match=r"unknown \['warp_size'\]"):
        CostModel.from_dict({**values, "warp_size": 32})
    del values["kernel_gap"]
    with pytest.raises(ValueError, match=r"missing \['kernel_gap'\]"):
        CostModel.from_dict(values)
    with pytest.raises(ValueError, match="cost model JSON is not valid JSON"):
        CostModel.from_json("{not json")
    with pytest.raises(ValueError, match="no cost model file"):
        CostModel.load(tmp_path / "absent.json")


def test_measured_presets_load_from_the_measured_folder(tmp_path, monkeypatch):
    """A measured file in the measured folder is the preset "measured:<stem>", with its own
    link unless one is named; an absent one is an error listing those present."""
    monkeypatch.setenv("WORKBENCH_MEASURED_DIR", str(tmp_path))
    measured = dataclasses.replace(CostModel.preset("h200"), h2d_bandwidth=51.5e9, launch_overhead=4.4e-6, name="gpu x")
    (tmp_path / "gpu_x.json").write_text('{"cost_model": ' + measured.to_json() + ', "date": "today"}')
    assert CostModel.preset("measured:gpu_x") == measured
    assert CostModel.presets()["measured"] == ("measured:gpu_x",)
    on_c2c = CostModel.preset("measured:gpu_x", link="nvlink_c2c")
    assert on_c2c.h2d_bandwidth == 450e9 and on_c2c.launch_overhead == 4.4e-6
    with pytest.raises(ValueError, match="measured presets: measured:gpu_x"):
        CostModel.preset("measured:gpu_y")


def test_compute_time_of_a_device_kernel_has_a_floor_and_no_launch():
    """A device kernel lasts max(min_kernel_time, roofline) whatever the launch figures; a
    host op adds host_op_overhead."""
    m = CostModel(min_kernel_time=2e-6, launch_overhead=50e-6)
    assert m.compute_time_us(0, 0, "cuda:0") == 2.0
    assert m.compute_time_us(0, 10**9, "cuda:0", torch.float32) == pytest.approx(1e9 / m.device_memory_bandwidth * 1e6)
    assert m.compute_time_us(0, 0, "cpu") == m.host_op_overhead * 1e6


@settings(max_examples=40, deadline=None)
@given(programs(), st.floats(0.0, 50e-6))
def test_executor_overhead_delays_the_host_by_that_much_per_step_in_eager_mode(program, overhead):
    """With ``executor_overhead`` no event starts earlier than without it and the host
    thread ends no earlier; without host steps (whose waits for the device can absorb
    it) the host ends exactly that much per step later; graph replay is unaffected."""
    base, steps, durations = program
    slow = dataclasses.replace(base, executor_overhead=overhead)
    fast_clock, slow_clock = _schedule(base, steps, durations), _schedule(slow, steps, durations)
    assert slow_clock.host_us >= fast_clock.host_us - 1e-9
    if not any(s.event == "host" for s in steps):
        assert slow_clock.host_us == pytest.approx(fast_clock.host_us + len(steps) * overhead * 1e6, abs=1e-6)
    fast_events = {e.node: e for e in fast_clock.timeline()}
    assert all(e.start_us >= fast_events[e.node].start_us - 1e-9 for e in slow_clock.timeline())
    graph = [e.start_us for e in _schedule(base.with_launch_mode("graph"), steps, durations).timeline()]
    assert graph == [e.start_us for e in _schedule(slow.with_launch_mode("graph"), steps, durations).timeline()]


def test_a_sim_run_charges_the_executor_overhead_as_its_estimate_does():
    """On sim, a run with a model that has ``executor_overhead`` records the timeline
    ``estimate`` predicts, and decoder blocks cost launch + executor overhead per step."""
    from workbench.machine.calibration.executor_probe import executor_steps

    model = dataclasses.replace(CostModel.preset("h200"), executor_overhead=17e-6)
    (n1, short), (n2, long) = executor_steps("sim", 1, 1, model), executor_steps("sim", 3, 1, model)
    assert (long[0] - short[0]) / (n2 - n1) == pytest.approx(model.launch_overhead + model.executor_overhead, rel=1e-9)
    net, inputs = example("residual")
    plan = wb.plan(wb.propagate(wb.place(wb.capture(net, inputs), {"cuda:0": ["*"]})), "greedy")
    ran = wb.run(plan, *inputs, backend="sim", cost_model=model)
    key = lambda tl: [(e.node, e.kind, round(e.start_us, 6), round(e.end_us, 6)) for e in tl]  # noqa: E731
    assert key(ran.timeline) == key(estimate(plan, model))
