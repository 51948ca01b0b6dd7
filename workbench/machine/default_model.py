"""The cost model used when none is given, and why it was chosen.

Rules:

1. The GPU at hand is the name CUDA reports for device 0 when the ``cuda`` backend can run
   here (``kernels.cuda.cuda_available``: CuPy and torch both see a GPU, and
   ``WORKBENCH_DISABLE_CUDA`` is not set); otherwise there is none. Asking reads the
   device's properties only (no context, stream or allocation) and is asked once per
   process.
2. A measured preset matches a GPU when the GPU name its file records (``machine.gpu``,
   written by ``workbench.calibrate``) equals that GPU's name, ignoring case and spaces at
   either end; presets are tried in name order and the first match wins. A preset file
   that cannot be read matches nothing.
3. The default is the matching measured preset, else the datasheet H200 on PCIe Gen5 with
   an x86 server host. Its ``name`` says which and why: ``"measured:h200 (GPU at hand:
   NVIDIA H200)"``, ``"h200+pcie_gen5+x86_server (datasheet; no GPU at hand)"`` or
   ``"... (datasheet; no measured preset for GPU at hand: NVIDIA L4)"``. Only the name
   differs from ``CostModel.preset`` of the same preset: the figures are the preset's.
4. ``choose_default_cost_model(gpu)`` decides for a GPU name given (None: no GPU), so both
   branches are testable anywhere; ``default_cost_model()`` asks rule 1 and is what every
   caller that was given no cost model uses.
5. A choice is made once per GPU name and state of the files it reads: the measured
   presets and the table of parts, each by its identity (``file_reading`` rule 7), so an
   edited, added or removed preset, or an edited table, is read again; while any of them
   was modified moments ago, the choice is made afresh on every call.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from typing import Optional

from ..file_reading import FileIdentity, file_identity, parse_json, read_regular_file, settled
from ..kernels.cuda import DISABLE_ENV, cuda_available, cupy_module
from .cost_model import DEFAULT_PARTS, MEASURED_PREFIX, CostModel, CostModelError, measured_dir, measured_preset_names
from .parts import parts_path

__all__ = [
    "DATASHEET_DEFAULT",
    "choose_default_cost_model",
    "default_cost_model",
    "default_device_preset",
    "gpu_at_hand",
    "measured_preset_for",
]

#: The datasheet preset used when no measured preset matches the GPU at hand (rule 3).
DATASHEET_DEFAULT = (DEFAULT_PARTS["gpu"], DEFAULT_PARTS["link"], DEFAULT_PARTS["host"])
#: A measured preset file is a few hundred kilobytes of samples at most.
_MAX_PRESET_BYTES = 16 << 20


@functools.lru_cache(maxsize=1)
def _device_name() -> Optional[str]:
    if not cuda_available():
        return None
    try:
        name = cupy_module().cuda.runtime.getDeviceProperties(0)["name"]
    except Exception:  # a driver that lists a device it cannot describe: no GPU to match
        return None
    text = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
    return text.strip() or None


def gpu_at_hand() -> Optional[str]:
    """The name of the GPU the ``cuda`` backend would use, or None (rule 1)."""
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return None
    return _device_name()


def _recorded_gpu(stem: str) -> Optional[str]:
    """The GPU name measured preset ``stem`` records, or None when its file cannot say."""
    path = measured_dir() / f"{stem}.json"
    try:
        data = parse_json(read_regular_file(path, "measured preset", CostModelError, max_bytes=_MAX_PRESET_BYTES),
                          "measured preset", CostModelError)
    except CostModelError:
        return None
    machine = data.get("machine") if isinstance(data, dict) else None
    gpu = machine.get("gpu") if isinstance(machine, dict) else None
    return gpu if isinstance(gpu, str) else None


def measured_preset_for(gpu: Optional[str]) -> Optional[str]:
    """``"measured:<name>"`` of the measured preset recorded on ``gpu`` (rule 2), or None."""
    if gpu is None:
        return None
    if not isinstance(gpu, str):
        raise CostModelError(f"gpu must be a GPU name (a string) or None, got {gpu!r}")
    wanted = gpu.strip().casefold()
    for stem in measured_preset_names():
        recorded = _recorded_gpu(stem)
        if recorded is not None and recorded.strip().casefold() == wanted:
            return MEASURED_PREFIX + stem
    return None


def default_device_preset(gpu: Optional[str] = None, *, detect: bool = True) -> str:
    """The device preset of the default model: a measured preset's ``"measured:<name>"``
    or the datasheet ``"h200"``, for ``gpu`` (``detect``: the GPU at hand when ``gpu`` is
    None)."""
    if gpu is None and detect:
        gpu = gpu_at_hand()
    return measured_preset_for(gpu) or DATASHEET_DEFAULT[0]


def choose_default_cost_model(gpu: Optional[str]) -> CostModel:
    """The default model for a machine whose GPU is named ``gpu`` (None: no GPU) (rule 3)."""
    folder = measured_dir()
    read = [folder / f"{stem}.json" for stem in measured_preset_names()] + [parts_path()]
    files = tuple(file_identity(path) for path in read)
    if all(f is not None and settled(f) for f in files):
        return _choose(gpu, str(folder), files)
    return _choose.__wrapped__(gpu, str(folder), files)  # a file just written: its identity may not tell an edit yet


@functools.lru_cache(maxsize=16)
def _choose(gpu: Optional[str], folder: str, files: tuple[Optional[FileIdentity], ...]) -> CostModel:
    """Rule 5: ``folder`` and ``files`` (what is read, by identity) key the choice."""
    measured = measured_preset_for(gpu)
    if measured is not None:
        model = CostModel.preset(measured)
        return replace(model, name=f"{measured} (GPU at hand: {gpu})")
    device, link, host = DATASHEET_DEFAULT
    model = CostModel.preset(device, link=link, host=host)
    why = "no GPU at hand" if gpu is None else f"no measured preset for GPU at hand: {gpu}"
    return replace(model, name=f"{model.name} (datasheet; {why})")


def default_cost_model() -> CostModel:
    """The model used when none is given: the measured preset of the GPU at hand, else the
    datasheet H200 on PCIe Gen5 with an x86 server; its name says which and why (rules 1-3)."""
    return choose_default_cost_model(gpu_at_hand())
