"""Calibration: measure the machine at hand and fit a ``CostModel`` to it.

``calibrate(backend="cuda")`` times primitive operations on the GPU and the host,
fits every ``CostModel`` figure to the times, saves the result (figures, fits, every raw
sample, the machine) as a measured preset under ``data/measured/`` and returns the model;
``CostModel.preset("measured:<name>")`` or ``CostModel.load(path)`` brings it back, so
any modeled number in the project can come from a measured machine.

Rules:

1. One code path for every backend. A *probe* times primitives and returns seconds per
   repeat; ``measure`` runs the same probes in the same order on any backend and
   ``fit_model`` turns the samples into figures. The ``sim`` probe times the simulated
   machine through ``SimClock`` and the op costing the executor uses, so calibrating
   ``sim`` gives back the simulated model's own figures.
2. Copies, per path (``h2d``/``d2h`` from pinned memory, from pageable memory staged
   through pinned buffers, from pageable memory plainly; ``d2d``), by size: ``t =
   latency + bytes / bandwidth`` fitted by least squares over sizes on the medians,
   weighted so that each size counts by its relative error. The pinned fits give the
   h2d/d2h figures, the d2d fit the d2d figures (on one GPU a copy within its memory;
   across GPUs when there are two); ``pageable_factor`` is the staged bandwidth over the
   pinned one, averaged over both directions (the ``cuda`` backend stages pageable
   copies). Plain pageable copies are fitted and saved for comparison.
3. Launches: ``launch_overhead`` is the slope of the host time to issue n tiny kernels
   one by one against n; ``graph_launch_overhead`` the host time of one graph replay.
   ``executor_overhead`` is the slope of the span of n small decoder blocks run through
   the workbench executor (``executor_probe``) against their number of steps, less
   ``launch_overhead``: what the executor adds per step of a decoder's op mix (below a
   nanosecond counts as none).
4. Kernels back to back (graph replay, device time from the first kernel's start to the
   last one's end, or between CUDA events — a constant that cancels in a slope): the
   slope over k of a chain of k tiny kernels is the per-kernel floor ``kernel_gap +
   min_kernel_time``; the slope of a chain of k kernels each reading and writing S bytes
   of device memory is ``kernel_gap + 2S / memory bandwidth``; the memory bandwidth is
   the inverse slope of single such kernels by bytes touched (read + written). Hence
   ``kernel_gap`` (between 0 and the floor: it takes in the ramp-up and tail of a
   kernel) and ``min_kernel_time`` (the rest of the floor).
5. Matmuls per dtype class (square, sizes of the plan; FLOPs and bytes counted by
   ``op_cost``): ``device_flops_<class>`` is the inverse slope of time against FLOPs.
   fp32 is measured without TF32. A dtype the GPU cannot multiply (fp8 before Ada/
   Hopper) keeps the base model's figure and is listed in ``not_measured``.
6. Host: ``host_memory_bandwidth`` and ``host_flops`` are the inverse slopes of copies by
   bytes touched and fp32 matmuls by FLOPs; ``host_op_overhead`` the median time of a
   tiny op less its few bytes' time at that bandwidth.
7. Everything else (``launch_mode``, the runtime terms) comes from the base model.
8. A saved preset records the machine as ``nvidia-smi --query-gpu=name,driver_version,
   pcie.link.gen.current,pcie.link.width.current --format=csv`` reports it (queried after
   the copies, when the link has trained up), the CUDA runtime and driver, torch and
   CuPy versions, the date (UTC) and every raw sample.

File format (JSON, ``FORMAT``): ``format``, ``name``, ``backend``, ``date``, ``machine``
(a dict of strings and numbers), ``cost_model`` (``CostModel.to_dict()``), ``fits``
(probe → ``{"intercept_s", "slope_s", "points", "rms_relative_residual"}``),
``not_measured`` (figures kept from the base model), ``plan`` (sizes and repeats), and
``samples`` (a list of ``{"probe", "size", "work", "seconds"}``: ``size`` is the knob
— bytes, kernels, matrix side —, ``work`` the fit's abscissa — bytes moved or touched,
kernels, FLOPs —, ``seconds`` one time per repeat).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import pandas as pd
import torch

from ...atomic_files import write_text
from ...units import format_bytes
from ...errors import WorkbenchError
from ...file_reading import parse_json, read_regular_file
from ...json_fields import dataclass_fields_of
from ..cost_model import DTYPE_CLASSES, MEASURED_PREFIX, CostModel, measured_dir, op_cost
from ...plain_names import PLAIN_NAME_RULE, is_plain_name
from .probes import COPY_PATHS, CudaProbe, Probe, SimProbe, matmul_args, meta_tensor, TINY_ELEMENTS
from ..default_model import choose_default_cost_model, default_cost_model

__all__ = [
    "BACKENDS",
    "COPY_PATHS",
    "FORMAT",
    "Calibration",
    "CalibrationError",
    "CalibrationPlan",
    "Fit",
    "Sample",
    "calibrate",
    "calibration_table",
    "copy_table",
    "fit_affine",
    "fit_model",
    "measure",
    "measured_calibrations",
]

FORMAT = "workbench-measured-preset/1"
BACKENDS: tuple[str, ...] = ("sim", "cuda")
#: A measured preset is a few hundred kilobytes of samples; a file this large is not one.
_MAX_PRESET_BYTES = 16 << 20
#: A dtype per ``DTYPE_CLASSES`` entry, the one its matmul is measured with.
CLASS_DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
}


class CalibrationError(WorkbenchError, ValueError):
    """A calibration cannot run or its file is not valid (the message says why)."""


@dataclass(frozen=True)
class CalibrationPlan:
    """What to measure: sizes and repeats. The defaults take well under a minute on an H200."""

    copy_sizes: tuple[int, ...] = tuple(4 << 10 << (2 * i) for i in range(9))  # bytes: 4 KiB … 256 MiB
    repeats: int = 10  # most repeats per point (fewer for big copies, at least 3)
    launch_counts: tuple[int, ...] = (128, 512, 2048)  # kernels issued one by one
    graph_kernels: tuple[int, ...] = (32, 128, 512)  # tiny kernels per captured graph
    chain_bytes: int = 16 << 20  # bytes each kernel of the copy chain copies
    chain_kernels: tuple[int, ...] = (4, 16)  # copy kernels per captured graph
    kernel_copy_sizes: tuple[int, ...] = (64 << 20, 256 << 20, 1 << 30)  # bytes of one device copy kernel
    matmul_sizes: tuple[int, ...] = (2048, 4096, 8192)  # square matmul sides, every dtype class
    host_copy_sizes: tuple[int, ...] = (16 << 20, 64 << 20, 256 << 20)  # bytes
    host_matmul_sizes: tuple[int, ...] = (256, 512, 1024)  # fp32 matmul sides on the host
    executor_blocks: tuple[int, ...] = (2, 8)  # decoder blocks run through the executor

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise CalibrationError(f"CalibrationPlan.{f.name} must be positive integers, got {value!r}")
        for name in ("launch_counts", "graph_kernels", "chain_kernels", "kernel_copy_sizes", "matmul_sizes",
                     "host_copy_sizes", "host_matmul_sizes", "copy_sizes", "executor_blocks"):  # fmt: skip
            if len(set(getattr(self, name))) < 2:
                raise CalibrationError(f"CalibrationPlan.{name} needs at least two different values to fit a slope")

    def repeats_for(self, nbytes: int) -> int:
        """Repeats for a copy of ``nbytes``: about 256 MiB in all, between 3 and ``repeats``."""
        return max(3, min(self.repeats, (256 << 20) // max(nbytes, 1)))


@dataclass(frozen=True)
class Sample:
    """One probe at one size: seconds per repeat (see the module's file format)."""

    probe: str
    size: int  # the knob: bytes, kernels, matrix side
    work: float  # the fit's abscissa: bytes, kernels, FLOPs
    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


@dataclass(frozen=True)
class Fit:
    """``t ≈ intercept_s + slope_s × work`` over the points of one probe."""

    intercept_s: float
    slope_s: float
    points: int
    rms_relative_residual: float  # sqrt(mean(((fit - t) / t)^2))

    @property
    def rate(self) -> float:
        """Work per second (bytes/s, FLOP/s, kernels/s): 1 / slope."""
        return 1.0 / self.slope_s


def fit_affine(work: Sequence[float], seconds: Sequence[float], *, relative: bool) -> Fit:
    """Least squares of ``t = a + b × work``; ``relative`` weights each point by 1/t, so
    small and large sizes count alike (latencies), else large ones dominate (rates)."""
    x, t = np.asarray(work, dtype=float), np.asarray(seconds, dtype=float)
    if x.size < 2 or np.unique(x).size < 2:
        raise CalibrationError(f"a fit needs at least two different sizes, got {x.tolist()}")
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise CalibrationError(f"measured times must be finite and positive, got {t.tolist()}")
    weight = 1.0 / t if relative else np.ones_like(t)
    design = np.stack([np.ones_like(x), x], axis=1) * weight[:, None]
    (a, b), *_ = np.linalg.lstsq(design, t * weight, rcond=None)
    residual = float(np.sqrt(np.mean(((a + b * x - t) / t) ** 2)))
    return Fit(float(a), float(b), int(x.size), residual)


# -- measuring and fitting ---------------------------------------------------------------------


def _mm_flops(n: int, dtype: torch.dtype) -> int:
    return op_cost(torch.ops.aten.mm.default, matmul_args(n, dtype)).flops


def _tiny_bytes() -> int:
    """Bytes a tiny op touches (its inputs and output), as ``op_cost`` counts them."""
    return op_cost(torch.ops.aten.add.Tensor, (meta_tensor(TINY_ELEMENTS), meta_tensor(TINY_ELEMENTS))).bytes_touched


def run_probes(probe: Probe, plan: CalibrationPlan) -> tuple[Sample, ...]:
    """Every probe of ``plan`` on ``probe``, in a fixed order (rules 2-6)."""
    samples: list[Sample] = []
    r = plan.repeats
    for path in COPY_PATHS:
        for n in plan.copy_sizes:
            samples.append(Sample(path, n, n, probe.copy(path, n, plan.repeats_for(n))))
    for n in plan.launch_counts:
        samples.append(Sample("launch_eager", n, n, probe.launches(n, r)))
    k = max(plan.graph_kernels)
    samples.append(Sample("launch_graph", k, k, probe.graph_launch(k, r)))
    for k in plan.graph_kernels:
        samples.append(Sample("chain_tiny", k, k, probe.graph_chain(k, 0, r)))
    for k in plan.chain_kernels:
        samples.append(Sample("chain_copy", k, k, probe.graph_chain(k, plan.chain_bytes, r)))
    for n in plan.kernel_copy_sizes:
        samples.append(Sample("copy_kernel", n, 2 * n, probe.copy_kernel(n, plan.repeats_for(n))))
    for cls in DTYPE_CLASSES:
        dtype = CLASS_DTYPES[cls]
        for n in plan.matmul_sizes:
            seconds = probe.matmul(dtype, n, r)
            if seconds is not None:
                samples.append(Sample(f"matmul_{cls}", n, _mm_flops(n, dtype), seconds))
    samples.append(Sample("host_op", 1, _tiny_bytes(), probe.host_op(r)))
    for n in plan.host_copy_sizes:
        samples.append(Sample("host_copy", n, 2 * n, probe.host_copy(n, plan.repeats_for(n))))
    for n in plan.host_matmul_sizes:
        samples.append(Sample("host_matmul", n, _mm_flops(n, torch.float32), probe.host_matmul(n, r)))
    for n in plan.executor_blocks:
        steps, seconds = probe.executor_steps(n, r)
        samples.append(Sample("executor_step", n, steps, seconds))
    return tuple(samples)


def _fit(samples: Sequence[Sample], probe: str, *, relative: bool) -> Optional[Fit]:
    chosen = [s for s in samples if s.probe == probe]
    if not chosen:
        return None
    return fit_affine([s.work for s in chosen], [s.median for s in chosen], relative=relative)


def fit_model(
    samples: Sequence[Sample], base: CostModel, name: str, chain_bytes: int
) -> tuple[CostModel, dict[str, Fit], tuple[str, ...]]:
    """(model, fits, figures kept from ``base``) from ``samples`` (rules 2-7);
    ``chain_bytes`` is what each kernel of the ``chain_copy`` probe copied."""
    fits: dict[str, Fit] = {}
    for probe in COPY_PATHS:
        found = _fit(samples, probe, relative=True)
        if found is not None:
            fits[probe] = found
    affine = ("launch_eager", "chain_tiny", "chain_copy", "copy_kernel", "host_copy", "host_matmul", "executor_step")
    for probe in affine:
        found = _fit(samples, probe, relative=False)
        if found is not None:
            fits[probe] = found
    missing = [p for p in (*COPY_PATHS, *affine) if p not in fits]
    if missing:
        raise CalibrationError(f"samples lack the probes {missing}; measure them (see CalibrationPlan)")
    flat = [p for p in (*COPY_PATHS, "copy_kernel", "host_copy", "host_matmul") if fits[p].slope_s <= 0]
    if flat:
        raise CalibrationError(f"times of {flat} do not grow with the bytes or FLOPs: the measurement is broken")
    values: dict[str, Any] = {}
    for kind in ("h2d", "d2h", "d2d"):
        pinned = fits[f"{kind}_pinned" if kind != "d2d" else "d2d"]
        values[f"{kind}_latency"] = max(0.0, pinned.intercept_s)
        values[f"{kind}_bandwidth"] = pinned.rate
    shares = [fits[f"{k}_staged"].rate / fits[f"{k}_pinned"].rate for k in ("h2d", "d2h")]
    values["pageable_factor"] = min(1.0, sum(shares) / len(shares))
    values["launch_overhead"] = max(0.0, fits["launch_eager"].slope_s)
    extra = fits["executor_step"].slope_s - values["launch_overhead"]
    values["executor_overhead"] = extra if extra > 1e-9 else 0.0
    values["graph_launch_overhead"] = statistics.median(
        t for s in samples if s.probe == "launch_graph" for t in s.seconds
    )
    bandwidth = fits["copy_kernel"].rate
    floor = max(0.0, fits["chain_tiny"].slope_s)
    gap = min(floor, max(0.0, fits["chain_copy"].slope_s - 2 * chain_bytes / bandwidth))
    values.update(device_memory_bandwidth=bandwidth, kernel_gap=gap, min_kernel_time=floor - gap)
    kept = []
    for cls in DTYPE_CLASSES:
        found = _fit(samples, f"matmul_{cls}", relative=False)
        if found is None:
            kept.append(f"device_flops_{cls}")
            continue
        if found.slope_s <= 0:
            raise CalibrationError(f"matmul_{cls} times do not grow with the FLOPs: the measurement is broken")
        fits[f"matmul_{cls}"] = found
        values[f"device_flops_{cls}"] = found.rate
    values["host_memory_bandwidth"] = fits["host_copy"].rate
    tiny = next(s for s in samples if s.probe == "host_op")  # overhead + its few bytes' time (rule 6)
    values["host_op_overhead"] = max(0.0, tiny.median - tiny.work / fits["host_copy"].rate)
    values["host_flops"] = fits["host_matmul"].rate
    return replace(base, **values, name=MEASURED_PREFIX + name), fits, tuple(kept)


@dataclass(frozen=True)
class Calibration:
    """A measured machine: its model, the fits behind it, every raw sample."""

    name: str
    backend: str
    date: str  # ISO 8601, UTC
    machine: dict[str, Any]
    model: CostModel
    fits: dict[str, Fit]
    samples: tuple[Sample, ...]
    not_measured: tuple[str, ...] = ()
    plan: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "backend": self.backend,
            "date": self.date,
            "machine": self.machine,
            "cost_model": self.model.to_dict(),
            "fits": {k: asdict(v) for k, v in self.fits.items()},
            "not_measured": list(self.not_measured),
            "plan": self.plan,
            "samples": [{**asdict(s), "seconds": list(s.seconds)} for s in self.samples],
        }

    def save(self, folder: Union[str, Path, None] = None) -> Path:
        """Write ``<folder>/<name>.json`` (default folder: ``measured_dir()``); returns the path.
        The write is atomic (``atomic_files``): a failed write leaves the old file and no
        temporary file, and concurrent saves of one name never share a temporary file."""
        if not is_plain_name(self.name):
            raise CalibrationError(
                f"cannot save a calibration named {self.name!r}: a name is letters, digits, '_', '-', '.' "
                "(no path separator, no leading dot)"
            )
        path = Path(folder if folder is not None else measured_dir()) / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_text(path, json.dumps(self.to_dict(), indent=1) + "\n", "a measured preset")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Calibration":
        """A saved calibration; a file that is not one is an error saying what is wrong
        (only a regular file is read: a named pipe is refused, never waited on)."""
        path = Path(path)
        raw = read_regular_file(path, "measured preset (JSON)", CalibrationError, max_bytes=_MAX_PRESET_BYTES)
        data = parse_json(raw, f"measured preset {path}", CalibrationError)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise CalibrationError(f"{path} is not a measured preset (format {found!r}, expected {FORMAT!r})")
        try:
            return cls(
                name=str(data["name"]),
                backend=str(data["backend"]),
                date=str(data["date"]),
                machine=dict(data["machine"]),
                model=CostModel.from_dict(data["cost_model"]),
                fits={k: Fit(**dataclass_fields_of(Fit, v, f"{path}: fit {k!r}", CalibrationError)) for k, v in data["fits"].items()},
                samples=tuple(Sample(s["probe"], int(s["size"]), float(s["work"]), tuple(s["seconds"])) for s in data["samples"]),
                not_measured=tuple(data.get("not_measured", ())),
                plan=dict(data.get("plan", {})),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CalibrationError(f"{path}: a measured preset field is missing or malformed ({exc!r})") from None


def _probe(backend: str, cost_model: Optional[CostModel], device: int) -> Probe:
    if backend not in BACKENDS:
        raise CalibrationError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if cost_model is not None and not isinstance(cost_model, CostModel):
        raise CalibrationError(f"cost_model must be a CostModel, got {type(cost_model).__name__}")
    if backend == "sim":
        return SimProbe(cost_model if cost_model is not None else default_cost_model())
    return CudaProbe(device)


def measure(
    backend: str = "cuda",
    *,
    plan: Optional[CalibrationPlan] = None,
    cost_model: Optional[CostModel] = None,
    name: Optional[str] = None,
    device: int = 0,
) -> Calibration:
    """Measure the machine of ``backend`` and fit a model to it (rules 1-8), saving nothing.

    ``cost_model``: on ``sim``, the simulated machine that is measured (default: the
    executor's default model, ``default_cost_model()``); on ``cuda``, the base whose
    figures are kept where nothing was measured (default: the H200 datasheet preset,
    never an earlier measurement). ``name`` defaults to the
    GPU's name (``h200``) or ``sim``.
    """
    plan = plan if plan is not None else CalibrationPlan()
    if not isinstance(plan, CalibrationPlan):
        raise CalibrationError(f"plan must be a CalibrationPlan, got {type(plan).__name__}")
    probe = _probe(backend, cost_model, device)
    samples = run_probes(probe, plan)
    machine = probe.machine()  # after the copies: the link has trained up (rule 8)
    label = name if name is not None else probe.name()
    if not is_plain_name(label):
        raise CalibrationError(f"name must be a plain name ({PLAIN_NAME_RULE}), got {label!r}")
    if cost_model is not None:
        base = cost_model
    else:  # a measurement never rests on an earlier one: the datasheet figures fill its gaps
        base = default_cost_model() if backend == "sim" else choose_default_cost_model(None)
    model, fits, kept = fit_model(samples, base, label, plan.chain_bytes)
    return Calibration(
        name=label,
        backend=backend,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        machine=machine,
        model=model,
        fits=fits,
        samples=samples,
        not_measured=kept,
        plan=asdict(plan),
    )


def calibrate(
    backend: str = "cuda",
    *,
    save: Union[bool, str, Path] = True,
    plan: Optional[CalibrationPlan] = None,
    cost_model: Optional[CostModel] = None,
    name: Optional[str] = None,
    device: int = 0,
) -> CostModel:
    """Measure the machine of ``backend``, fit a ``CostModel`` to it and return it.

    ``save``: True writes the measured preset to ``measured_dir()/<name>.json`` (then
    ``CostModel.preset("measured:<name>")`` loads it), a path writes it into that folder,
    False writes nothing. On ``sim`` the result has the simulated model's own figures.
    See ``measure`` for the other arguments and the module rules for what is measured.
    """
    result = measure(backend, plan=plan, cost_model=cost_model, name=name, device=device)
    if save is not False:
        result.save(None if save is True else save)
    return result.model


# -- tables --------------------------------------------------------------------------------


def measured_calibrations(folder: Union[str, Path, None] = None) -> list[Calibration]:
    """Every measured preset in ``folder`` (default ``measured_dir()``), by name; hidden
    files (a save's temporary file) are skipped, and anything else that is not a preset
    file (a named pipe, a directory) is an error naming it."""
    path = Path(folder if folder is not None else measured_dir())
    if not path.is_dir():
        return []
    return [Calibration.load(p) for p in sorted(path.glob("*.json")) if is_plain_name(p.stem)]


def _figures(model: CostModel) -> dict[str, float]:
    return {
        "h2d GB/s": round(model.h2d_bandwidth / 1e9, 2),
        "d2h GB/s": round(model.d2h_bandwidth / 1e9, 2),
        "h2d latency µs": round(model.h2d_latency * 1e6, 2),
        "pageable factor": round(model.pageable_factor, 3),
        "HBM TB/s": round(model.device_memory_bandwidth / 1e12, 3),
        "bf16 TFLOP/s": round(model.device_flops_bf16 / 1e12, 1),
        "fp32 TFLOP/s": round(model.device_flops_fp32 / 1e12, 1),
        "launch µs": round(model.launch_overhead * 1e6, 2),
        "executor µs/step": round(model.executor_overhead * 1e6, 2),
        "graph launch µs": round(model.graph_launch_overhead * 1e6, 2),
        "kernel floor µs": round((model.kernel_gap + model.min_kernel_time) * 1e6, 2),
    }


def calibration_table(
    calibrations: Sequence[Calibration], presets: Sequence[CostModel] = ()
) -> pd.DataFrame:
    """One row per measured preset (machine, date, link as ``nvidia-smi`` reported it, the
    figures) and one per datasheet preset in ``presets``, for comparison."""
    rows = []
    for c in calibrations:
        m = c.machine
        rows.append({
            "preset": MEASURED_PREFIX + c.name,
            "machine": m.get("nvidia_smi.name", m.get("gpu", m.get("simulated", ""))),
            "date": c.date[:10],
            "driver": m.get("nvidia_smi.driver_version", ""),
            "CUDA": m.get("cuda_runtime", ""),
            "PCIe": f"Gen{m['nvidia_smi.pcie.link.gen.current']} x{m['nvidia_smi.pcie.link.width.current']}"
            if "nvidia_smi.pcie.link.gen.current" in m else "",
            **_figures(c.model),
        })  # fmt: skip
    for p in presets:
        rows.append({"preset": p.name, "machine": "datasheet", "date": "", "driver": "", "CUDA": "", "PCIe": "", **_figures(p)})
    return pd.DataFrame(rows)


def copy_table(calibration: Calibration) -> pd.DataFrame:
    """Copy bandwidth by path and size, from a calibration's raw samples: one row per size,
    one column per copy path, GB/s (10^9 bytes/s) of the median time."""
    rows: dict[int, dict[str, Any]] = {}
    for s in calibration.samples:
        if s.probe in COPY_PATHS:
            rows.setdefault(s.size, {"size": format_bytes(s.size, digits=0)})[s.probe] = round(s.size / s.median / 1e9, 2)
    return pd.DataFrame([rows[n] for n in sorted(rows)], columns=["size", *COPY_PATHS])
