"""Calibration: measuring a machine and fitting a CostModel; measured preset files."""

import dataclasses
import json
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.machine import CostModel
from workbench.machine.calibration.calibrate import (
    FORMAT,
    Calibration,
    CalibrationError,
    CalibrationPlan,
    calibration_table,
    fit_affine,
    fit_model,
    measure,
    measured_calibrations,
    run_probes,
)
from workbench.machine.calibration.probes import COPY_PATHS, SimProbe

# Small but complete: two or three sizes per probe (sim answers are exact, so this is enough).
PLAN = CalibrationPlan(
    copy_sizes=(4 << 10, 1 << 20, 64 << 20),
    repeats=3,
    launch_counts=(16, 64),
    graph_kernels=(8, 32),
    chain_kernels=(2, 8),
    kernel_copy_sizes=(16 << 20, 64 << 20),
    matmul_sizes=(1024, 2048),
    host_copy_sizes=(1 << 20, 4 << 20),
    host_matmul_sizes=(128, 256),
    executor_blocks=(1, 3),
)

ODD = dataclasses.replace(
    CostModel.preset("a100_40gb", link="pcie_gen4", host="laptop"),
    h2d_bandwidth=21.3e9, d2h_bandwidth=23.9e9, d2d_bandwidth=190e9, h2d_latency=9.1e-6, d2h_latency=11.7e-6,
    d2d_latency=3.3e-6, pageable_factor=0.37, launch_overhead=6.1e-6, graph_launch_overhead=4.4e-6,
    kernel_gap=0.7e-6, min_kernel_time=1.9e-6, host_op_overhead=3.3e-6, launch_mode="graph",
    executor_overhead=23.5e-6,
)  # fmt: skip


def _numbers(model):
    return {k: v for k, v in model.to_dict().items() if isinstance(v, float) or isinstance(v, int)}


@pytest.mark.parametrize("truth", [CostModel.preset("h200"), ODD], ids=["h200", "odd"])
def test_calibrating_the_sim_gives_back_the_sims_own_figures(truth):
    """The sim probe answers what the sim executor would record; fitting those answers
    recovers every figure of the simulated model (to 1e-9 relative), keeps its launch
    mode and prefetch hit rate, and names the result measured:sim."""
    model = wb.calibrate("sim", cost_model=truth, plan=PLAN, save=False)
    fitted, expected = _numbers(model), _numbers(truth)
    assert fitted.keys() == expected.keys()
    for name, value in expected.items():
        assert fitted[name] == pytest.approx(value, rel=1e-9, abs=1e-15), name
    assert (model.launch_mode, model.name) == (truth.launch_mode, "measured:sim")


def test_a_saved_calibration_loads_back_with_every_sample(tmp_path):
    """calibrate(save=folder) writes <name>.json: CostModel.load gives the returned model,
    Calibration.load gives back every raw sample and fit, the date is ISO 8601 UTC, and
    every copy path was measured at every size."""
    model = wb.calibrate("sim", plan=PLAN, save=tmp_path, name="sim_a")
    path = tmp_path / "sim_a.json"
    assert CostModel.load(path) == model
    again = Calibration.load(path)
    fresh = measure("sim", plan=PLAN, name="sim_a")
    assert again.samples == fresh.samples and again.fits == fresh.fits and again.model == model
    assert datetime.fromisoformat(again.date).utcoffset().total_seconds() == 0
    measured = {(s.probe, s.size) for s in again.samples}
    assert {(p, n) for p in COPY_PATHS for n in PLAN.copy_sizes} <= measured
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["plan"]["copy_sizes"] == list(PLAN.copy_sizes)
    assert all(len(s["seconds"]) >= 3 for s in data["samples"])


def test_a_saved_preset_is_a_measured_preset(tmp_path, monkeypatch):
    """With the measured folder pointed at tmp, calibrate(save=True) writes there and
    CostModel.preset("measured:<name>") is the calibrated model; the table lists it."""
    monkeypatch.setenv("WORKBENCH_MEASURED_DIR", str(tmp_path))
    model = wb.calibrate("sim", cost_model=ODD, plan=PLAN, name="odd")
    assert CostModel.preset("measured:odd") == model
    (found,) = measured_calibrations()
    table = calibration_table([found], [CostModel.preset("h200")])
    assert list(table["preset"]) == ["measured:odd", "h200+pcie_gen5+x86_server"]
    assert table["launch µs"][0] == round(ODD.launch_overhead * 1e6, 2)
    assert table["kernel floor µs"][0] == round((ODD.kernel_gap + ODD.min_kernel_time) * 1e6, 2)


class _Noisy:
    """A sim probe whose every time is off by a deterministic ±2%."""

    def __init__(self, probe):
        self._probe, self._k = probe, 0

    def __getattr__(self, name):
        method = getattr(self._probe, name)
        if name in ("machine", "name", "backend"):
            return method

        def noisy(*args):
            out = method(*args)
            if out is None:
                return None
            if name == "executor_steps":  # (steps, seconds): only the seconds are measured
                return out[0], shake(out[1])
            return shake(out)

        def shake(out):
            self._k += 1
            return tuple(t * (1 + 0.02 * ((self._k * 7919 + i * 104729) % 201 - 100) / 100) for i, t in enumerate(out))

        return noisy


def test_fits_tolerate_measurement_noise():
    """With every time off by up to ±2%, the bandwidths, latencies, launch figures, the
    per-kernel floor and the peaks come out within 5% of the truth."""
    samples = run_probes(_Noisy(SimProbe(ODD)), PLAN)
    model, fits, kept = fit_model(samples, ODD, "noisy", PLAN.chain_bytes)
    assert kept == ()
    for name in ("h2d_bandwidth", "d2h_bandwidth", "d2d_bandwidth", "h2d_latency", "d2h_latency",
                 "pageable_factor", "launch_overhead", "graph_launch_overhead", "device_memory_bandwidth",
                 "device_flops_bf16", "device_flops_fp64", "host_memory_bandwidth", "host_flops",
                 "executor_overhead"):  # fmt: skip
        assert getattr(model, name) == pytest.approx(getattr(ODD, name), rel=0.05), name
    floor = model.kernel_gap + model.min_kernel_time
    assert floor == pytest.approx(ODD.kernel_gap + ODD.min_kernel_time, rel=0.05)
    assert all(f.rms_relative_residual < 0.05 for f in fits.values())


@settings(max_examples=50, deadline=None)
@given(
    st.floats(0.0, 1e-3),
    st.floats(1e-13, 1e-6),
    st.lists(st.integers(1, 1 << 30), min_size=2, max_size=8, unique=True),
    st.booleans(),
)
def test_fit_affine_recovers_a_line(intercept, slope, sizes, relative):
    """On noiseless points t = a + b·x (two or more distinct x), least squares returns a
    and b, weighted or not."""
    fit = fit_affine(sizes, [intercept + slope * x for x in sizes], relative=relative)
    assert fit.slope_s == pytest.approx(slope, rel=1e-6)
    assert fit.intercept_s == pytest.approx(intercept, rel=1e-6, abs=1e-6 * slope * max(sizes))


def test_bad_calibration_inputs_say_what_is_wrong(tmp_path):
    """An unknown backend, a plan that cannot fit a slope, a bad name, a fit of one size or
    of non-positive times, and files that are not measured presets are refused with the
    reason; nothing is written when measuring fails."""
    with pytest.raises(CalibrationError, match="unknown backend 'tpu'; valid: sim, cuda"):
        wb.calibrate("tpu", save=tmp_path)
    with pytest.raises(CalibrationError, match="launch_counts needs at least two"):
        CalibrationPlan(launch_counts=(64, 64))
    with pytest.raises(CalibrationError, match="positive integers"):
        CalibrationPlan(repeats=0)
    with pytest.raises(CalibrationError, match="lowercase"):
        wb.calibrate("sim", plan=PLAN, name="My GPU", save=tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CalibrationError, match="two different sizes"):
        fit_affine([4096, 4096], [1e-5, 1e-5], relative=True)
    with pytest.raises(CalibrationError, match="finite and positive"):
        fit_affine([1, 2], [1e-5, 0.0], relative=True)
    plain = tmp_path / "plain.json"
    plain.write_text(CostModel().to_json())
    with pytest.raises(CalibrationError, match="not a measured preset"):
        Calibration.load(plain)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"format": FORMAT, "name": "x"}))
    with pytest.raises(CalibrationError, match="missing or malformed"):
        Calibration.load(broken)


def test_times_that_do_not_grow_with_size_are_a_broken_measurement():
    """Copy times that shrink as the copies grow (a broken timer) are refused, naming the path."""
    samples = run_probes(SimProbe(ODD), PLAN)
    broken = [
        dataclasses.replace(s, seconds=tuple(1.0 / s.size for _ in s.seconds)) if s.probe == "d2h_plain" else s
        for s in samples
    ]
    with pytest.raises(CalibrationError, match=r"\['d2h_plain'\] do not grow"):
        fit_model(broken, ODD, "broken", PLAN.chain_bytes)


def test_cuda_calibration_needs_a_gpu_and_says_so():
    """Without a usable GPU, calibrate("cuda") raises CudaUnavailableError with the reason."""
    from workbench.runtime import CudaUnavailableError, cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(CudaUnavailableError, match="calibrate"):
        wb.calibrate("cuda", save=False)
