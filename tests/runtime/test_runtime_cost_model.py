"""The cost model: copy times, roofline compute times, presets."""

import dataclasses

import pytest
import torch

from workbench.machine import CostModel, dtype_class


def test_copy_time_is_latency_plus_bytes_over_bandwidth_exactly():
    """For every direction, N bytes take exactly latency + N / bandwidth (in µs)."""
    cm = CostModel.preset("h200", link="pcie_gen4")
    n = 123_456_789
    assert cm.copy_time_us("h2d", n) == (cm.h2d_latency + n / cm.h2d_bandwidth) * 1e6
    assert cm.copy_time_us("d2h", n) == (cm.d2h_latency + n / cm.d2h_bandwidth) * 1e6
    assert cm.copy_time_us("d2d", n) == (cm.d2d_latency + n / cm.d2d_bandwidth) * 1e6
    assert cm.copy_time_us("h2d", 0) == cm.h2d_latency * 1e6


def test_link_presets_have_the_published_bandwidths():
    """Gen4 ~25 GB/s, Gen5 ~50 GB/s, NVLink-C2C 450 GB/s per direction: 1 GB costs 40/20/2.2 ms plus latency."""
    gb = 10**9
    for link, bandwidth in (("pcie_gen4", 25e9), ("pcie_gen5", 50e9), ("nvlink_c2c", 450e9)):
        cm = CostModel.preset("h200", link=link)
        assert cm.h2d_bandwidth == cm.d2h_bandwidth == bandwidth
        assert cm.copy_time_us("h2d", gb) - cm.h2d_latency * 1e6 == pytest.approx(gb / bandwidth * 1e6)


def test_pageable_copies_are_slower_by_the_factor():
    """Unpinned h2d/d2h run at bandwidth × pageable_factor; d2d ignores pinning."""
    cm = CostModel.preset()
    n = 10**8
    assert cm.copy_time_us("h2d", n, pinned=False) == (cm.h2d_latency + n / (cm.h2d_bandwidth * cm.pageable_factor)) * 1e6
    assert cm.copy_time_us("d2d", n, pinned=False) == cm.copy_time_us("d2d", n)


def test_h200_device_figures():
    """The h200 preset has HBM 4.8 TB/s and ~989 TFLOP/s bf16; the H200 measured by
    calibration (the one measured description of it) reaches less of both."""
    cm = CostModel.preset("h200")
    assert cm.device_memory_bandwidth == 4.8e12 and cm.device_flops_bf16 == 989e12
    measured = CostModel.preset("measured:h200")
    assert measured.device_flops_bf16 < cm.device_flops_bf16 and measured.device_memory_bandwidth < cm.device_memory_bandwidth
    assert "h200_measured" not in CostModel.presets()["device"]


def test_unknown_presets_list_the_valid_names():
    """Bad device, link or host names fail with the valid choices in the message."""
    with pytest.raises(ValueError, match="pcie_gen4.*pcie_gen5"):
        CostModel.preset("h200", link="pcie_gen9")
    with pytest.raises(ValueError, match="h200"):
        CostModel.preset("a100")
    with pytest.raises(ValueError, match="x86_server"):
        CostModel.preset(host="z80")
    assert "nvlink_c2c" in CostModel.presets()["link"]


def test_roofline_picks_the_larger_of_compute_and_memory_time():
    """A FLOP-heavy kernel is compute-bound, a byte-heavy one memory-bound, a tiny one runs
    ``min_kernel_time``; a device kernel's duration carries no launch cost (the scheduler
    charges launches)."""
    cm = CostModel.preset("h200")
    flops, nbytes = 10**12, 10**6
    compute_bound = cm.compute_time_us(flops, nbytes, "cuda:0", torch.bfloat16)
    assert compute_bound == flops / cm.device_flops_bf16 * 1e6
    memory_bound = cm.compute_time_us(10**3, 10**10, "cuda:0", torch.bfloat16)
    assert memory_bound == 10**10 / cm.device_memory_bandwidth * 1e6
    assert cm.compute_time_us(1, 8, "cuda:0") == cm.min_kernel_time * 1e6 > 0


def test_dtype_selects_the_peak_and_host_uses_host_figures():
    """fp32 ops use the fp32 peak (slower than bf16); ops on cpu use host FLOP/s and bandwidth."""
    cm = CostModel.preset("h200")
    flops = 10**12
    assert cm.compute_time_us(flops, 0, "cuda", torch.float32) > cm.compute_time_us(flops, 0, "cuda", torch.bfloat16)
    assert cm.compute_time_us(flops, 0, "cpu", torch.float32) == (cm.host_op_overhead + flops / cm.host_flops) * 1e6
    assert [dtype_class(d) for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64)] == [
        "fp64", "fp32", "bf16", "bf16", "fp32"
    ]


def test_cost_model_is_frozen_and_validated():
    """Fields cannot be changed in place, and non-positive bandwidths are refused."""
    cm = CostModel.preset()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cm.h2d_bandwidth = 1.0
    with pytest.raises(ValueError, match="h2d_bandwidth"):
        dataclasses.replace(cm, h2d_bandwidth=0)
    with pytest.raises(ValueError, match="copy kind"):
        cm.copy_time_us("p2p", 10)


def test_breakeven_intensity_matches_flops_over_link():
    """Hiding a streamed byte needs peak FLOP/s ÷ link bandwidth FLOPs per byte."""
    cm = CostModel.preset("h200", link="pcie_gen5")
    assert cm.link_breakeven_flops_per_byte() == pytest.approx(989e12 / 50e9)
    assert cm.with_link("nvlink_c2c").link_breakeven_flops_per_byte() == pytest.approx(989e12 / 450e9)


def test_default_model_is_the_default_preset():
    """CostModel() and CostModel.preset() describe the same machine (h200, PCIe Gen5, x86 server)."""
    assert CostModel() == CostModel.preset() == CostModel.preset("h200", "pcie_gen5", "x86_server")


def test_the_default_machine_is_the_parts_tables():
    """``CostModel()`` given no figures is the default parts of the parts table — every
    figure the table's, none a constant of the code — and the datasheet default preset."""
    from workbench.machine.cost_model import DEFAULT_PARTS
    from workbench.machine.parts import part_figures

    model = CostModel()
    for kind, name in DEFAULT_PARTS.items():
        for field, value in part_figures(kind, name).items():
            assert getattr(model, field) == value, field
    assert model == CostModel.preset(DEFAULT_PARTS["gpu"], link=DEFAULT_PARTS["link"], host=DEFAULT_PARTS["host"])
