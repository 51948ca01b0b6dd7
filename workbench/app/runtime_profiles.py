"""Runtime profiles: the few terms that make one inference runtime differ from another.

``runtime_profiles()`` reads the shipped table (``data/runtimes/runtime_profiles.csv``):
per runtime family, the share of DRAM bandwidth its host expert matmuls reach and the rate
its host cores dequantize and multiply quantized weights, the fixed
cost of one expert copy, its per-kernel cost and kernel count, whether it loops over every
expert, and how much copy or host work it overlaps with the GPU — each with its source.

Rules:

1. Every profile sets every field of ``PROFILE_FIELDS``, once, with a source.
2. A value is a number in its field's range, or ``fit:<term>`` (fitted to published runs
   elsewhere; ``RuntimeProfile.fitted`` names them); ``matches`` is a regular expression,
   ``launch_mode`` a launch mode. A table that breaks a rule is refused with a
   ``RuntimeProfileError`` naming the rows and what is valid.
3. ``profile_for(runtime)`` is the first profile, in file order, whose ``matches``
   expression is found in the runtime's text; None when none is.
4. The table is data: read as text, never executed.
5. A profile is a ``RuntimeTerms`` for ``CostModel.compose(runtime=profile)`` once its
   fitted terms are filled in (``resolved(fits)``; ``decode_model.runtime_profile(name)``
   fills in the shipped fits). It sets: ``launch_mode``; ``launch_overhead`` =
   ``per_launch_cost`` (eager profiles); ``kernel_gap`` = ``kernel_time`` (the device
   time a kernel costs beyond its bytes, between one kernel and the next);
   ``device_memory_bandwidth`` = ``gpu_bandwidth_fraction`` × the GPU part's datasheet
   rate (a measured GPU's rate is already achieved: kept); ``host_memory_bandwidth`` =
   ``host_bandwidth_fraction`` × the host part's DRAM peak (when the fraction is used,
   > 0, and the part states a peak); h2d and d2h latency = the link part's + ``per_copy_cost``
   (the runtime's own fixed cost of one copy on top of the DMA's). ``launch_overlap``,
   ``overlap`` and the kernel counts are not figures of a cost model: the simulated
   schedule takes them from the graph it runs; nor is ``dequant_rate``: the cost model
   counts a stored format's dequantization operations (its ``dequant_ops``) at the part's
   FLOP rate.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from ..file_reading import read_csv_table
from ..runtime.cost_model import LAUNCH_MODES, MEASURED_PREFIX
from ..runtime.parts import part_facts
from ..runtime.op_cost import CostModelError

__all__ = ["FIT_PREFIX", "PROFILE_FIELDS", "RuntimeProfile", "RuntimeProfileError", "profile_for", "runtime_profiles",
           "runtime_profiles_path"]  # fmt: skip

FIT_PREFIX = "fit:"
#: Numeric fields and their valid range (low, high), both inclusive.
_RANGES: dict[str, tuple[float, float]] = {
    "per_launch_cost": (0.0, 1.0), "launch_overlap": (0.0, 1.0), "kernel_time": (0.0, 1.0), "kernels_per_layer": (0.0, 1e5), "kernels_per_visited_expert": (0.0, 1e4),
    "visits_every_expert": (0.0, 1.0), "gpu_bandwidth_fraction": (0.0, 1.0), "host_bandwidth_fraction": (0.0, 1.0),
    "dequant_rate": (0.0, 1e12),
    "per_copy_cost": (0.0, 1.0), "overlap": (0.0, 1.0),
}  # fmt: skip
PROFILE_FIELDS: tuple[str, ...] = ("matches", "launch_mode", *_RANGES)
_COLUMNS = ("profile", "field", "value", "source")


class RuntimeProfileError(CostModelError):
    """A runtime profile table that breaks a rule, or an unknown profile or term."""


@dataclass(frozen=True)
class RuntimeProfile:
    """One runtime family's terms (rule 1). A field whose value is fitted holds NaN in
    ``values`` and its term's name in ``fitted``; ``resolve`` fills them in."""

    name: str
    matches: str
    launch_mode: str
    values: Mapping[str, float]  # every numeric field
    fitted: Mapping[str, str] = field(default_factory=dict)  # field -> fitted term name
    sources: Mapping[str, str] = field(default_factory=dict)  # field -> source

    def value(self, name: str, fits: Mapping[str, float]) -> float:
        """The field ``name``, its fitted term taken from ``fits`` when it is fitted."""
        if name not in _RANGES:
            raise RuntimeProfileError(f"no numeric field {name!r} in a runtime profile; valid: {', '.join(_RANGES)}")
        term = self.fitted.get(name)
        if term is None:
            return float(self.values[name])
        if term not in fits:
            raise RuntimeProfileError(f"profile {self.name!r}: {name} is the fitted term {term!r}, which is not given "
                                      f"(given: {', '.join(sorted(fits)) or 'none'})")
        return float(fits[term])

    def resolved(self, fits: Mapping[str, float]) -> "RuntimeProfile":
        """This profile with its fitted fields set from ``fits`` (each source names the
        term it was fitted as); an ``RuntimeProfileError`` when a term is missing."""
        values = {name: self.value(name, fits) for name in _RANGES}
        sources = {**self.sources, **{f: f"fitted term {t} = {fits[t]:.4g}; {self.sources.get(f, '')}"
                                      for f, t in self.fitted.items()}}  # fmt: skip
        return RuntimeProfile(self.name, self.matches, self.launch_mode, values, {}, sources)

    def cost_model_figures(self, machine: Mapping[str, Any], parts: Mapping[str, str]) -> dict[str, Any]:
        """The cost-model figures this profile sets on a composed machine (rule 5)."""
        if self.fitted:
            raise RuntimeProfileError(f"profile {self.name!r} has fitted terms not filled in "
                                      f"({', '.join(sorted(set(self.fitted.values())))}): use "
                                      "decode_model.runtime_profile(name) or profile.resolved(fits)")
        figures: dict[str, Any] = {"launch_mode": self.launch_mode, "kernel_gap": self.values["kernel_time"],
                                   "h2d_latency": machine["h2d_latency"] + self.values["per_copy_cost"],
                                   "d2h_latency": machine["d2h_latency"] + self.values["per_copy_cost"]}  # fmt: skip
        if self.launch_mode == "eager":
            figures["launch_overhead"] = self.values["per_launch_cost"]
        if not str(parts.get("gpu", "")).startswith(MEASURED_PREFIX):
            figures["device_memory_bandwidth"] = machine["device_memory_bandwidth"] * self.values["gpu_bandwidth_fraction"]
        host = str(parts.get("host", ""))
        peak = None if host.startswith(MEASURED_PREFIX) else part_facts("host", host).get("dram_peak_bandwidth")
        if self.values["host_bandwidth_fraction"] > 0 and peak is not None:
            figures["host_memory_bandwidth"] = peak * self.values["host_bandwidth_fraction"]
        return figures


def runtime_profiles_path() -> Path:
    """The shipped table: the repository's ``data/runtimes/runtime_profiles.csv``."""
    return Path(__file__).resolve().parents[2] / "data" / "runtimes" / "runtime_profiles.csv"


def runtime_profiles(path: Optional[Union[str, Path]] = None) -> tuple[RuntimeProfile, ...]:
    """The runtime profiles of the table at ``path`` (default: the shipped one), in file
    order, checked (rules 1, 2)."""
    return _profiles(Path(path) if path is not None else runtime_profiles_path())


@functools.lru_cache(maxsize=4)
def _profiles(path: Path) -> tuple[RuntimeProfile, ...]:
    table = read_csv_table(path, "table of runtime profiles", RuntimeProfileError, _COLUMNS)
    problems: list[str] = []
    rows: dict[str, dict[str, tuple[str, str]]] = {}
    for i, row in enumerate(table.itertuples(index=False)):
        where = f"row {i + 2} ({row.profile}/{row.field})"
        if not row.profile.strip():
            problems.append(f"{where}: no profile name")
            continue
        if row.field not in PROFILE_FIELDS:
            problems.append(f"{where}: field is none of {', '.join(PROFILE_FIELDS)}")
            continue
        if not row.source.strip():
            problems.append(f"{where}: no source")
        if row.field in rows.setdefault(row.profile, {}):
            problems.append(f"{where}: given twice")
        rows[row.profile][row.field] = (row.value, row.source)
        problems += [f"{where}: {p}" for p in _value_problems(row.field, row.value)]
    for name, fields_ in rows.items():
        missing = [f for f in PROFILE_FIELDS if f not in fields_]
        if missing:
            problems.append(f"profile {name!r} lacks {', '.join(missing)}")
    if problems:
        raise RuntimeProfileError(f"{path}: " + "; ".join(problems))
    profiles = []
    for name, fields_ in rows.items():
        values: dict[str, float] = {}
        fitted: dict[str, str] = {}
        for f in _RANGES:
            text = fields_[f][0].strip()
            if text.startswith(FIT_PREFIX):
                fitted[f] = text[len(FIT_PREFIX):]
                values[f] = math.nan
            else:
                values[f] = float(text)
        profiles.append(RuntimeProfile(name, fields_["matches"][0], fields_["launch_mode"][0].strip(), values, fitted,
                                       {f: s for f, (_, s) in fields_.items()}))  # fmt: skip
    return tuple(profiles)


def _value_problems(name: str, text: str) -> list[str]:
    text = text.strip()
    if name == "matches":
        try:
            re.compile(text)
        except re.error as exc:
            return [f"matches {text!r} is not a regular expression ({exc})"]
        return [] if text else ["matches is empty"]
    if name == "launch_mode":
        return [] if text in LAUNCH_MODES else [f"launch_mode must be one of {', '.join(LAUNCH_MODES)}"]
    if text.startswith(FIT_PREFIX):
        term = text[len(FIT_PREFIX):]
        return [] if re.fullmatch(r"[a-z][a-z0-9_]*", term) else [f"fitted term name {term!r} is not snake_case"]
    try:
        value = float(text)
    except ValueError:
        return [f"value {text!r} is neither a number nor {FIT_PREFIX}<term>"]
    low, high = _RANGES[name]
    if not (math.isfinite(value) and low <= value <= high):
        return [f"value {text!r} is outside [{low:g}, {high:g}]"]
    return []


def profile_for(runtime: object, profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> Optional[RuntimeProfile]:
    """The first profile whose ``matches`` is found in the text ``runtime`` (rule 3)."""
    text = runtime if isinstance(runtime, str) else ""
    for profile in profiles if profiles is not None else runtime_profiles():
        if re.search(profile.matches, text):
            return profile
    return None
