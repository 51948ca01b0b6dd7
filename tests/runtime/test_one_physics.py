"""One physics: the event simulator and the decode timer charge a planned token with the
same cost functions (``machine.costs``), step by step."""

import dataclasses

import pytest
import torch

import workbench as wb
from workbench.capture import capture
from workbench.machine import CostModel, costs
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe.strategies import expert_streaming, experts_on_host
from workbench.runtime.executor import estimate
from workbench.speed.agreement import PhysicsAgreement, agreement
from workbench.speed.graph_layout import layout_of
from workbench.speed.timer import time_decode
from workbench.strategy import all_on_device


@pytest.fixture(scope="module")
def plans():
    with torch.device("meta"):
        model = QwenMoEDecoder(MoEConfig.tiny())
        inputs = model.example_inputs()
    program = capture(model, inputs, shape_only=True)
    return {s.variant + ("+skip" if s.skip_copies else ""): wb.plan(s.apply(program))
            for s in (all_on_device(skip_copies=False), all_on_device(), experts_on_host(), expert_streaming())}  # fmt: skip


MACHINES = {
    "compiled_graph": CostModel.compose(gpu="h200", host="x86_server", link="pcie_gen4", runtime="compiled_graph"),
    "fused, host rates": dataclasses.replace(
        CostModel.compose(gpu="rtx_4090", host="epyc_9355", link="pcie_gen5", runtime="compiled_graph"),
        fuses_row_picks=1.0, min_kernel_time=0.0, host_matvec_rates=(("bf16", 4e9), ("fp32", 2e9)),
        host_op_overhead=7e-6),
}


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_the_simulator_and_the_timer_charge_the_same_work(plans, machine):
    """On every strategy and machine — with and without fused row picks, host matvec rates
    and the one-kernel floor — the kernels, host ops and copies of the simulated timeline
    add up to the timer's device, host and copy terms (summed from the layout's op groups,
    apart from the timeline): the same costs over the same steps."""
    for name, plan in plans.items():
        found = agreement(plan, MACHINES[machine], prefetch_hit_rate=0.5)
        assert found.work_ratio == pytest.approx(1.0, abs=1e-6), name


@pytest.mark.parametrize("launch", ["graph", "eager"])
def test_the_timer_gives_a_planned_token_its_simulated_span(plans, launch):
    """Under either launch mode, every strategy's token takes the time its simulated
    timeline spans (inputs in place): one schedule, not a second rule beside it."""
    model = MACHINES["compiled_graph"].with_launch_mode(launch)
    for name, plan in plans.items():
        found = agreement(plan, model, prefetch_hit_rate=0.5)
        assert found.launch_mode == launch
        assert found.ratio == pytest.approx(1.0, rel=1e-9), name


def test_a_step_without_overlap_is_timed_the_same_by_the_schedule_and_the_totals(plans):
    """With every copy skipped there is nothing to overlap: the schedule and the rule over
    totals give one number (kernel gaps and the graph launch included)."""
    found = agreement(plans["all_on_device+skip"], MACHINES["compiled_graph"])
    assert found.ratio == pytest.approx(1.0, rel=1e-9)
    assert abs(found.schedule_overlap_us) < 0.01 * found.sim_us
    assert found.binding_us == 0.0  # its inputs are already on the device: nothing to bind


def test_the_schedule_hides_what_the_totals_rule_cannot_see(plans):
    """Copies issued ahead of the layers that wait for them run beside compute: the
    scheduled token is shorter than the rule over totals, by the named schedule overlap,
    and never shorter than its GPU work alone."""
    found = agreement(plans["all_on_device"], MACHINES["compiled_graph"])
    assert found.schedule_overlap_us > 0.02 * found.timer_us
    assert found.totals_us - found.schedule_overlap_us == pytest.approx(found.timer_us)
    token = time_decode(layout_of(plans["all_on_device"]), MACHINES["compiled_graph"])
    side = token.host + token.copy
    assert token.seconds >= token.device and 0 < token.hidden <= side
    assert token.hidden == pytest.approx(side - max(0.0, token.seconds - token.gpu))


def test_binding_the_inputs_is_named_beside_the_token(plans):
    """A call that binds its inputs first (the session's calling convention) ends later
    than the decode token by the named binding effect; without inputs to bind, by none."""
    found = agreement(plans["all_on_device"], MACHINES["compiled_graph"])
    bound = estimate(plans["all_on_device"], MACHINES["compiled_graph"], in_place_writes=True)
    assert found.binding_us > 0
    assert found.sim_us + found.binding_us == pytest.approx(max(e.end_us for e in bound))


def test_a_layout_from_facts_is_timed_by_its_totals():
    """A layout with no planned call (from facts, or a planned one with it dropped) is
    timed by the rule over totals; dropping the call does not change what the layout is."""
    config = MoEConfig.tiny()
    with torch.device("meta"):
        model = QwenMoEDecoder(config)
        inputs = model.example_inputs()
    plan = wb.plan(all_on_device(skip_copies=False).apply(capture(model, inputs, shape_only=True)))
    layout = layout_of(plan)
    bare = dataclasses.replace(layout, call=None)
    assert bare == layout and layout.call is not None
    machine = MACHINES["compiled_graph"]
    totals = time_decode(bare, machine)
    assert totals.hidden == pytest.approx(machine.overlap * layout.overlappable * min(totals.gpu, totals.host + totals.copy))


def test_fused_row_picks_read_each_weight_byte_once(plans):
    """A runtime that fuses a pick of expert rows into the matmul charges fewer device bytes
    in both the simulator and the timer, by the same amount."""
    plan = plans["all_on_device+skip"]
    base = dataclasses.replace(MACHINES["compiled_graph"], min_kernel_time=0.0)  # no floor hides the bytes
    fused = dataclasses.replace(base, fuses_row_picks=1.0)
    sim = [estimate(plan, m, in_place_writes=True).span_us for m in (base, fused)]
    timer = [time_decode(layout_of(plan), m).seconds * 1e6 for m in (base, fused)]
    assert sim[1] < sim[0] and timer[1] < timer[0]
    assert sim[0] - sim[1] == pytest.approx(timer[0] - timer[1], rel=1e-6)


def test_host_matvec_rates_reach_the_simulator_and_the_timer():
    """A runtime's stated matvec rate for the host's weight format (bf16 here) sets the
    host's compute time in both: a slower rate slows the host steps of each by the same time."""
    config = dataclasses.replace(MoEConfig.tiny(), dtype="bfloat16")
    with torch.device("meta"):
        model = QwenMoEDecoder(config)
        inputs = model.example_inputs()
    plan = wb.plan(experts_on_host().apply(capture(model, inputs, shape_only=True)))
    fast = dataclasses.replace(MACHINES["compiled_graph"], host_matvec_rates=(("bf16", 1e12),))
    slow = dataclasses.replace(fast, host_matvec_rates=(("bf16", 1e8),))
    sim = [estimate(plan, m, in_place_writes=True).totals_by_kind()["host"] for m in (fast, slow)]
    timer = [time_decode(layout_of(plan), m).host * 1e6 for m in (fast, slow)]
    assert sim[1] > sim[0] and timer[1] > timer[0]
    assert sim[1] - sim[0] == pytest.approx(timer[1] - timer[0], rel=1e-6)


def test_pageable_staging_costs_the_same_per_copy_and_in_total():
    """A share of pageable bytes over the link costs what the same bytes copied one by one
    cost: times add (the timer's totals are the sum of the simulator's copies)."""
    model = CostModel.compose(gpu="h200", link="pcie_gen4", runtime="compiled")
    pinned, pageable = 3_000_000, 1_000_000
    one_by_one = (costs.copy_seconds(model, "h2d", pinned) + costs.copy_seconds(model, "h2d", pageable, pinned=False))
    assert costs.link_seconds(model, pinned + pageable, 2, pageable / (pinned + pageable)) == pytest.approx(one_by_one)


def test_a_kernel_is_charged_at_its_dtype_class_peak():
    """fp32 FLOPs run at the fp32 peak, bf16 at the bf16 one: the same FLOPs take longer in
    fp32 on a part whose fp32 peak is lower."""
    model = CostModel.compose(gpu="h200", runtime="compiled")
    flops = 1e12
    assert costs.kernel_seconds(model, flops, 0, "fp32") == pytest.approx(flops / model.device_flops_fp32)
    assert costs.kernel_seconds(model, flops, 0, "bf16") == pytest.approx(flops / model.device_flops_bf16)
    assert costs.kernel_seconds(model, 0, 0, "bf16") == model.min_kernel_time


def test_the_agreement_check_reports_a_disagreement():
    """The check can fail: a span or work charged differently shows as a ratio away from 1."""
    found = PhysicsAgreement("m", "graph", sim_us=110.0, timer_us=100.0, totals_us=120.0, sim_work_us=90.0,
                             timer_work_us=80.0, binding_us=0.0)  # fmt: skip
    assert found.ratio == pytest.approx(1.1) and found.work_ratio == pytest.approx(1.125)
    assert found.schedule_overlap_us == pytest.approx(20.0)
