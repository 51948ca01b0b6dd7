"""The time of one decode token: ``time_decode`` over a layout and a cost model's figures."""

import dataclasses
import math

import pytest

from workbench.errors import WorkbenchError
from workbench.machine import CostModel
from workbench.speed.layout import DecodeLayout
from workbench.speed.timer import DecodeTimeError, time_decode

GB = 1e9


def _layout(**changes):
    base = DecodeLayout(device_bytes=2 * GB, device_flops=4e9, kernels=None, layers=40)
    return dataclasses.replace(base, **changes)


def _machine(**changes):
    base = dataclasses.replace(CostModel.compose(gpu="rtx_4090", host="epyc_9355", link="pcie_gen4", runtime="compiled_graph"),
                               kernels_per_layer=30.0, kernel_gap=2e-6)  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_the_gpu_part_is_bytes_over_bandwidth_plus_kernels_times_their_gap():
    """Graph replay: the device time is the token's bytes over the GPU's bandwidth (its
    FLOPs are far below the roofline's ridge) plus layers × kernels per layer × the gap,
    and one graph launch; nothing else."""
    m = _machine()
    t = time_decode(_layout(), m)
    device = 2 * GB / m.device_memory_bandwidth + 40 * 30 * 2e-6
    assert t.device == pytest.approx(device) and t.kernels == 1200
    assert t.seconds == pytest.approx(device + m.graph_launch_overhead) and t.tok_s == pytest.approx(1 / t.seconds)
    doubled = time_decode(_layout(), _machine(device_memory_bandwidth=2 * m.device_memory_bandwidth))
    assert doubled.device == pytest.approx(device - 1 * GB / m.device_memory_bandwidth)


def test_a_layouts_own_kernels_count_unless_the_runtime_states_its_own():
    """A graph's counted kernels are used when the runtime states no kernels per layer; a
    loop over every expert adds its kernels per visited expert."""
    counted = _layout(kernels=3000.0, moe_layers=40, num_experts=128)
    assert time_decode(counted, _machine(kernels_per_layer=0.0)).kernels == 3000
    assert time_decode(counted, _machine()).kernels == 1200
    assert time_decode(counted, _machine(visited_expert_kernels=10.0)).kernels == 1200 + 40 * 128 * 10
    with pytest.raises(DecodeTimeError, match="states no kernels_per_layer"):
        time_decode(_layout(), _machine(kernels_per_layer=0.0))


def test_eager_launches_add_to_the_device_time_unless_the_host_runs_ahead():
    """Eager: the host issues every kernel; with ``launch_overlap`` 1 the step takes the
    longer of issue and device time, with 0 their sum."""
    ahead = _machine(launch_mode="eager", launch_overhead=5e-6, executor_overhead=1e-6, launch_overlap=1.0)
    t = time_decode(_layout(), ahead)
    assert t.issue == pytest.approx(1200 * 6e-6)
    assert t.gpu == pytest.approx(max(t.device, t.issue))
    waits = time_decode(_layout(), dataclasses.replace(ahead, launch_overlap=0.0))
    assert waits.gpu == pytest.approx(t.device + t.issue)


def test_the_host_part_is_the_longer_of_its_memory_and_its_matvec_time():
    """Host experts take the longer of their bytes over the host's bandwidth and their
    weights over the runtime's matvec rate for their format (else the host's FLOP rate
    over a multiply-add and the dequantization per weight), plus a call overhead each."""
    layout = _layout(host_bytes=1 * GB, host_weights=2e9, host_format="q4_k", host_dequant_ops=3.0, host_calls=40.0)
    memory_bound = _machine(host_matvec_rates=(("q4_k", 1e12),))
    t = time_decode(layout, memory_bound)
    assert t.host == pytest.approx(1 * GB / memory_bound.host_memory_bandwidth + 40 * memory_bound.host_op_overhead)
    assert t.host_bound == "memory"
    slow = time_decode(layout, _machine(host_matvec_rates=(("q4_k", 1e9),)))
    assert slow.host == pytest.approx(2.0 + 40 * memory_bound.host_op_overhead) and slow.host_bound == "compute"
    unstated = time_decode(layout, _machine(host_flops=1e10))
    assert unstated.host == pytest.approx(2e9 / (1e10 / 5) + 40 * memory_bound.host_op_overhead)


def test_copies_follow_link_staging_pieces_and_what_the_runtime_loads():
    """Copied experts cross the link at its bandwidth (pageable staging at the link's
    pageable share), each copy pays the link latency; a runtime's copies per expert
    multiply the copies; a runtime that loads every expert its loop visits copies the
    experts the GPU does not hold, not only the routed misses."""
    layout = _layout(expert_loads=100.0, expert_bytes=10e6, expert_copies=100.0, experts_offloaded=1000.0)
    m = _machine()
    t = time_decode(layout, m)
    assert t.copy == pytest.approx(1 * GB / m.h2d_bandwidth + 100 * m.h2d_latency)
    assert t.link_bytes == pytest.approx(1 * GB)
    pageable = time_decode(layout, _machine(pageable_copies=1.0))
    assert pageable.copy == pytest.approx(1 * GB / (m.h2d_bandwidth * m.pageable_factor) + 100 * m.h2d_latency)
    pieces = time_decode(layout, _machine(copies_per_expert=3.0))
    assert pieces.copy == pytest.approx(t.copy + 200 * m.h2d_latency)
    everything = time_decode(layout, _machine(loads_all_experts=1.0))
    assert everything.link_bytes == pytest.approx(10 * GB)


def test_overlap_hides_the_shorter_side_as_far_as_runtime_and_placement_allow():
    """``t = gpu + side - overlap × overlappable × min(gpu, side)``."""
    layout = _layout(expert_loads=100.0, expert_bytes=10e6, expert_copies=100.0)
    serial = time_decode(layout, _machine(overlap=0.0))
    assert serial.seconds == pytest.approx(serial.gpu + serial.copy) and serial.hidden == 0
    full = time_decode(layout, _machine(overlap=1.0))
    assert full.seconds == pytest.approx(max(full.gpu, full.copy))
    half = time_decode(dataclasses.replace(layout, overlappable=0.5), _machine(overlap=1.0))
    assert half.hidden == pytest.approx(0.5 * min(half.gpu, half.copy))


def test_bad_arguments_and_timeless_layouts_are_refused():
    """Not a layout, not a cost model, or a layout with no bytes and no kernels: a
    ``DecodeTimeError`` (a WorkbenchError) saying what is valid; a time is never zero,
    negative or NaN."""
    with pytest.raises(DecodeTimeError, match="layout must be a DecodeLayout"):
        time_decode("layout", _machine())  # type: ignore[arg-type]
    with pytest.raises(DecodeTimeError, match="cost_model must be a CostModel"):
        time_decode(_layout(), {"device_memory_bandwidth": 1})  # type: ignore[arg-type]
    empty = _layout(device_bytes=0.0, device_flops=0.0, kernels=0.0)
    with pytest.raises(DecodeTimeError, match="no decode time") as info:
        time_decode(empty, _machine(kernels_per_layer=0.0, graph_launch_overhead=0.0))
    assert isinstance(info.value, WorkbenchError)
    t = time_decode(_layout(), _machine())
    assert math.isfinite(t.tok_s) and t.tok_s > 0
