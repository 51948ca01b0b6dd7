"""Calibration on a real GPU: every probe answers, the fitted figures are physical, and
the measured preset records the machine. Skipped without a GPU."""

import json
import statistics

import pytest
import torch

import workbench as wb
from workbench.runtime import cuda_available, cuda_unavailable_reason
from workbench.machine import CostModel
from workbench.machine.calibration.calibrate import Calibration, CalibrationPlan

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]

QUICK = CalibrationPlan(
    copy_sizes=(64 << 10, 4 << 20, 32 << 20),
    repeats=3,
    launch_counts=(64, 256),
    graph_kernels=(16, 64),
    chain_kernels=(2, 8),
    kernel_copy_sizes=(32 << 20, 128 << 20),
    matmul_sizes=(1024, 2048),
    host_copy_sizes=(4 << 20, 16 << 20),
    host_matmul_sizes=(128, 256),
)


@pytest.fixture(scope="module")
def probe():
    from workbench.machine.calibration.probes import CudaProbe

    return CudaProbe(0)


@pytest.mark.parametrize("path", ["h2d_pinned", "h2d_staged", "h2d_plain", "d2h_pinned", "d2h_staged", "d2h_plain", "d2d"])
def test_every_copy_path_takes_positive_time_growing_with_size(probe, path):
    """Each copy path answers positive seconds per repeat, and 32 MiB takes longer than
    64 KiB (medians of 5: a device copy's fixed cost is close to 32 MiB's own time on HBM,
    so single repeats may overlap)."""
    small, big = probe.copy(path, 64 << 10, 5), probe.copy(path, 32 << 20, 5)
    assert len(small) == len(big) == 5 and min(small) > 0
    assert statistics.median(big) > statistics.median(small)


def test_graph_replay_of_tiny_kernels_is_cheaper_per_kernel_than_eager_issue(probe):
    """Host time per eagerly issued tiny kernel exceeds the device time per kernel of a
    replayed graph of the same kernels (what graph replay saves), and one graph launch
    costs the host less than issuing its 64 kernels one by one."""
    eager = min(probe.launches(256, 3)) / 256
    per_kernel = (min(probe.graph_chain(64, 0, 3)) - min(probe.graph_chain(16, 0, 3))) / 48
    assert 0 < per_kernel < eager
    assert min(probe.graph_launch(64, 3)) < 64 * eager


def test_matmuls_answer_for_every_float_class_the_gpu_has(probe):
    """fp64, fp32 and bf16 matmuls time positive; fp8 answers, or None on GPUs without fp8."""
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        assert min(probe.matmul(dtype, 1024, 2)) > 0
    fp8 = probe.matmul(torch.float8_e4m3fn, 1024, 2)
    assert fp8 is None or min(fp8) > 0
    if torch.cuda.get_device_capability(0) >= (9, 0):
        assert fp8 is not None


def test_calibrate_cuda_writes_a_physical_measured_preset(tmp_path):
    """calibrate("cuda") returns figures in physical ranges, writes <gpu>.json with the
    nvidia-smi line (name, driver, link generation and width) and every sample, and the
    file loads back as the same model."""
    model = wb.calibrate("cuda", plan=QUICK, save=tmp_path)
    (path,) = tmp_path.glob("*.json")
    assert CostModel.load(path) == model
    assert 1e9 < model.h2d_bandwidth < 1e12 and 1e9 < model.d2h_bandwidth < 1e12
    assert 0 < model.pageable_factor <= 1
    assert 1e11 < model.device_memory_bandwidth < 2e13
    assert 0.2e-6 < model.launch_overhead < 200e-6 and 0 < model.graph_launch_overhead < 200e-6
    assert 0 < model.kernel_gap + model.min_kernel_time < 20e-6
    assert model.device_flops_bf16 > model.device_flops_fp32 > 0
    calibration = Calibration.load(path)
    machine = calibration.machine
    assert machine["gpu"] == torch.cuda.get_device_name(0)
    for key in ("name", "driver_version", "pcie.link.gen.current", "pcie.link.width.current"):
        assert f"nvidia_smi.{key}" in machine or "nvidia_smi_error" in machine
    assert json.loads(path.read_text())["samples"]
