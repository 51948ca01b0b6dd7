"""Runtime profiles: the terms that make one inference runtime differ from another.

``runtime_profiles()`` reads the shipped table (``data/runtimes/runtime_profiles.csv``):
per runtime family, how it launches kernels (per launch, or a replayed graph) and what a
launch costs the host (the driver's, and the framework's own per-op cost of an eager
PyTorch runtime), its device time per kernel and its kernels per layer, whether it loops
over every expert, the share of the GPU's and the host's DRAM bandwidth it reaches and
how it places its host weights on a multi-socket host's NUMA nodes, the kernels its host multiplies
quantized weights with (``host_matvec.csv``: weights per second per core, per format), how
it copies an expert (pieces, per-copy cost, pinned or pageable staging), and how much copy
or host work it overlaps with the GPU — each with its source. A profile is a
``RuntimeTerms``: ``CostModel.compose(gpu=, host=, link=, runtime=profile)`` is the
machine a decode token of that runtime is timed on (``speed.timer``).

Rules:

1. Every profile sets every field of ``PROFILE_FIELDS``, once, with a source — its own, or
   its ``base``'s: a profile whose ``base`` names another profile (a later version of the
   same engine, say) states its own ``names`` and only the fields that differ, and takes
   the rest, sources included, from its base (bases may chain, at most
   ``MAX_BASE_DEPTH`` deep, and resolve in time linear in the table; an unknown base, a
   cycle, a deeper chain or a derived profile without its own ``names`` is refused).
2. A value is a number in its field's range, or ``fit:<term>`` (a term of
   ``fitted_terms.csv``, fitted to published runs by ``speed.regime_model``); ``names`` are the
   phrases (literal, ``|``-separated) that name the runtime in a run's text;
   ``launch_mode`` is a launch mode; ``host_kernels`` a kernel family of the matvec table
   or ``none``. A table that breaks a rule is refused with a ``RuntimeProfileError``
   naming the rows and what is valid; a cell is at most 2,000 characters and a table
   16 MiB.
3. ``profile_for(runtime)`` is the profile whose name phrase is found in the runtime's
   text (``run_text.find_name``: literal, the longest phrase first); None when none is.
   A phrase names one profile: a table in which two profiles share a phrase (case,
   spacing and the order of ``+``-joined parts aside) is refused when it loads, so which
   profile a text picks never depends on the order of the rows.
4. The tables are data: read as text, never executed, read again when edited.
5. A field that sets one ``CostModel`` figure has that figure's name (``launch_overhead``,
   ``executor_overhead``, ``kernel_gap``, ``copy_overhead``, ``launch_overlap``,
   ``overlap``, ``kernels_per_layer``, ``copies_per_expert``, ``pageable_copies``,
   ``loads_all_experts``, ``dequant_kernels_per_expert``); the others scale or pick a part's figures (the bandwidth
   fractions, ``numa``, ``host_kernels``) or multiply into one
   (``kernels_per_visited_expert × visits_every_expert``).
   ``cost_model_figures`` (the ``RuntimeTerms`` protocol) sets: ``launch_mode``; eager:
   ``launch_overhead``; ``executor_overhead``; ``kernel_gap``; ``launch_overlap``,
   ``overlap``, ``kernels_per_layer``, ``copies_per_expert``, ``pageable_copies``,
   ``loads_all_experts``, ``dequant_kernels_per_expert`` as stated; ``visited_expert_kernels`` = ``kernels_per_visited_expert × visits_every_expert``;
   ``device_memory_bandwidth`` = ``gpu_bandwidth_fraction`` × the GPU part's datasheet
   rate (a measured GPU's rate is already achieved: kept); ``host_memory_bandwidth`` =
   ``host_bandwidth_fraction`` × what the host's memory delivers under the profile's
   ``numa`` policy (``machine.numa``: ``local``, ``per_node`` or ``interleave``; threads on
   the run's sockets, else one socket for ``local`` and every socket otherwise);
   ``host_matvec_rates``
   = the kernel family's rate per core, scaled by this host's FP32 FLOP/s per core over
   the core it was measured on, × the threads (the run's, else the host's ``math_cores``
   or ``cores``, at most its cores); ``copy_overhead`` (on top of the
   link part's latency, and kept when the link is swapped); ``fuses_row_picks`` = 1 (the
   engines' MoE kernels read a routed expert's rows inside the matmul, ``op_work`` rule 2)
   and ``min_kernel_time`` = 0 (``kernel_gap`` holds a kernel's fixed cost, fitted or cited:
   a floor beside it would count that time twice). A run's own settings (``with_settings``) come last: the copies'
   staging it states, and a copy rate it measured (the h2d bandwidth, as reached).
6. ``engine`` names the engine a profile is one version, build or launch mode of (a plain
   name; a version takes its base's): leave-one-runtime-out holds out every profile of
   one engine together, since a new engine arrives with none of its siblings' runs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from ..file_reading import FileIdentity, file_version_key, read_csv_table
from .cost_model import LAUNCH_MODES, MEASURED_PREFIX
from .numa import NUMA_POLICIES, numa_bandwidth
from .op_cost import CostModelError
from ..weight_formats import weight_formats
from ..name_phrases import MAX_CELL_CHARS, find_name
from ..plain_names import PLAIN_NAME_RULE, is_plain_name

__all__ = ["BASE_FIELD", "FIT_PREFIX", "PROFILE_FIELDS", "FittedTermSpec", "RuntimeProfile", "RuntimeProfileError", "checked_fit",
           "fitted_terms", "host_matvec", "profile_for", "runtime_profiles", "runtime_profiles_path"]  # fmt: skip

FIT_PREFIX = "fit:"
#: Numeric fields and their valid range (low, high), both inclusive.
_RANGES: dict[str, tuple[float, float]] = {
    "launch_overhead": (0.0, 1.0), "executor_overhead": (0.0, 1.0), "launch_overlap": (0.0, 1.0),
    "kernel_gap": (0.0, 1.0), "kernels_per_layer": (0.0, 1e5), "kernels_per_visited_expert": (0.0, 1e4),
    "visits_every_expert": (0.0, 1.0), "gpu_bandwidth_fraction": (0.0, 1.0), "host_bandwidth_fraction": (0.0, 1.0),
    "copy_overhead": (0.0, 1.0), "copies_per_expert": (0.0, 1e3), "dequant_kernels_per_expert": (0.0, 1e3),
    "pageable_copies": (0.0, 1.0), "loads_all_experts": (0.0, 1.0), "overlap": (0.0, 1.0),
}  # fmt: skip
PROFILE_FIELDS: tuple[str, ...] = ("names", "launch_mode", "engine", "numa", "host_kernels", *_RANGES)
BASE_FIELD = "base"  # optional: the profile whose fields this one keeps where it states none (rule 1)
#: Bases a profile's chain may follow (rule 1): versions of an engine, not an unbounded list.
MAX_BASE_DEPTH = 32
_COLUMNS = ("profile", "field", "value", "source")
_MATVEC_COLUMNS = ("kernels", "format", "weights_per_s_per_core", "core_flops", "source")
_TERM_COLUMNS = ("term", "field", "low", "high", "prior", "source")


class RuntimeProfileError(CostModelError):
    """A runtime profile table that breaks a rule, or an unknown profile or term."""


@dataclass(frozen=True)
class FittedTermSpec:
    """A term fitted to published runs: its field's search range, the value used where no
    fit is possible (a physical default, with its source), and what it is."""

    term: str
    field: str  # the profile field it fills
    low: float
    high: float
    prior: float  # used where fewer runs than a fit needs depend on it (leave-one-source-out folds)
    source: str


@dataclass(frozen=True)
class RuntimeProfile:
    """One runtime family's terms (rule 1). A field whose value is fitted holds NaN in
    ``values`` and its term's name in ``fitted``; ``resolved`` fills them in."""

    name: str
    names: str  # phrases naming it in a run's text, "|"-separated
    launch_mode: str
    host_kernels: str  # a kernel family of the matvec table, or "none"
    values: Mapping[str, float]  # every numeric field
    fitted: Mapping[str, str] = field(default_factory=dict)  # field -> fitted term name
    sources: Mapping[str, str] = field(default_factory=dict)  # field -> source
    threads: Optional[int] = None  # host threads a run states (rule 5)
    sockets: Optional[int] = None  # sockets whose memory a run's threads use, when it states them
    pageable: Optional[bool] = None  # a run's copies from pageable (True) or pinned (False) memory, when stated
    copy_rate: Optional[float] = None  # host-to-device bytes/s a run measured, when stated
    engine: str = ""  # the engine whose version, build or mode this is: held out together (rule 6); "": its own name
    numa: str = "local"  # how its host weights sit on a multi-socket host's NUMA nodes (machine.numa)

    @property
    def engine_name(self) -> str:
        """The engine this profile is one version, build or mode of (rule 6)."""
        return self.engine or self.name

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
        return checked_fit(term, fits[term], f"profile {self.name!r}: ")

    def resolved(self, fits: Mapping[str, float]) -> "RuntimeProfile":
        """This profile with its fitted fields set from ``fits`` (each source names the
        term it was fitted as); a ``RuntimeProfileError`` when a term is missing."""
        values = {name: self.value(name, fits) for name in _RANGES}
        sources = {**self.sources, **{f: f"fitted term {t} = {fits[t]:.4g}; {self.sources.get(f, '')}"
                                      for f, t in self.fitted.items()}}  # fmt: skip
        return dataclasses.replace(self, values=values, fitted={}, sources=sources)

    def with_settings(self, threads: Optional[int] = None, sockets: Optional[int] = None, *,
                      pageable: Optional[bool] = None, copy_rate: Optional[float] = None,
                      numa: Optional[str] = None) -> "RuntimeProfile":
        """This profile as a run set it up: ``threads`` host threads, its threads on
        ``sockets`` sockets each reading its own node's memory (``per_node``, unless
        ``numa`` says otherwise), its weights placed by the NUMA policy ``numa``, its copies
        from ``pageable`` memory or not, at a measured ``copy_rate`` (bytes/s) — each None:
        the profile's and parts' own."""
        if numa is not None and numa not in NUMA_POLICIES:
            raise RuntimeProfileError(f"numa must be one of {', '.join(NUMA_POLICIES)}, got {numa!r}")
        for what, value in (("threads", threads), ("sockets", sockets)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096):
                raise RuntimeProfileError(f"{what} must be a whole number in [1, 4096], got {value!r}")
        if copy_rate is not None and (isinstance(copy_rate, bool) or not isinstance(copy_rate, (int, float))
                                      or not 1e6 <= copy_rate <= 1e13):  # fmt: skip
            raise RuntimeProfileError(f"copy_rate must be bytes/s in [1e6, 1e13], got {copy_rate!r}")
        if pageable is not None and not isinstance(pageable, bool):
            raise RuntimeProfileError(f"pageable must be True, False or None, got {pageable!r}")
        policy = numa if numa is not None else ("per_node" if sockets is not None else self.numa)
        return dataclasses.replace(self, threads=threads, sockets=sockets, pageable=pageable, copy_rate=copy_rate,
                                   numa=policy)

    def cost_model_figures(self, machine: Mapping[str, Any], parts: Mapping[str, str]) -> dict[str, Any]:
        """The cost-model figures this profile sets on a composed machine (rule 5)."""
        if self.fitted:
            raise RuntimeProfileError(f"profile {self.name!r} has fitted terms not filled in "
                                      f"({', '.join(sorted(set(self.fitted.values())))}): use "
                                      "regime_model.runtime_profile(name) or profile.resolved(fits)")
        v = self.values
        figures: dict[str, Any] = {
            "launch_mode": self.launch_mode, "kernel_gap": v["kernel_gap"], "executor_overhead": v["executor_overhead"],
            "launch_overlap": v["launch_overlap"], "overlap": v["overlap"], "kernels_per_layer": v["kernels_per_layer"],
            "visited_expert_kernels": v["kernels_per_visited_expert"] * v["visits_every_expert"],
            "copies_per_expert": v["copies_per_expert"], "pageable_copies": v["pageable_copies"],
            "loads_all_experts": v["loads_all_experts"],
            "copy_overhead": v["copy_overhead"],
            "dequant_kernels_per_expert": v["dequant_kernels_per_expert"],
            # its kernels pick expert rows inside their matmuls (grouped or fused MoE kernels)
            "fuses_row_picks": 1.0,
            # the fitted kernel time is a kernel's whole fixed cost: no floor beside it
            "min_kernel_time": 0.0,
        }  # fmt: skip
        if self.launch_mode == "eager":
            figures["launch_overhead"] = v["launch_overhead"]
        if self.pageable is not None:
            figures["pageable_copies"] = 1.0 if self.pageable else 0.0
        if self.copy_rate is not None:  # measured: already what the copies reach, from whatever memory
            figures["h2d_bandwidth"], figures["pageable_copies"] = self.copy_rate, 0.0
        if not str(parts.get("gpu", "")).startswith(MEASURED_PREFIX):
            figures["device_memory_bandwidth"] = machine["device_memory_bandwidth"] * v["gpu_bandwidth_fraction"]
        sockets = float(machine.get("host.sockets", 1.0))
        peak = machine.get("host.dram_peak_bandwidth")
        if v["host_bandwidth_fraction"] > 0 and peak is not None:
            # threads on every socket unless the run says how many, or the weights sit in one node
            used = self.sockets if self.sockets is not None else (1.0 if self.numa == "local" else sockets)
            reached = numa_bandwidth(peak, sockets, used, self.numa, machine.get("host.cross_socket_bandwidth"))
            figures["host_memory_bandwidth"] = reached * v["host_bandwidth_fraction"]
        cores = machine.get("host.cores")
        if self.host_kernels != "none" and cores is not None:
            threads = min(float(self.threads or machine.get("host.math_cores", cores)), float(cores))
            core = machine["host_flops"] / float(cores)  # this host's FP32 FLOP/s per core
            figures["host_matvec_rates"] = tuple(sorted((fmt, rate * core / measured_on * threads)
                                                        for fmt, rate, measured_on in host_matvec(self.host_kernels)))  # fmt: skip
        return figures


_DATA = Path(__file__).resolve().parents[2] / "data" / "runtimes"


def _data_dir() -> Path:
    return _DATA


def runtime_profiles_path() -> Path:
    """The shipped table: the repository's ``data/runtimes/runtime_profiles.csv``."""
    return _data_dir() / "runtime_profiles.csv"


def _read(path: Path, what: str, columns: tuple[str, ...]) -> list[Any]:
    table = read_csv_table(path, what, RuntimeProfileError, columns)
    long = [i + 2 for i, row in enumerate(table.itertuples(index=False)) if any(len(str(c)) > MAX_CELL_CHARS for c in row)]
    if long:
        raise RuntimeProfileError(f"{path}: rows {long[:10]} have a cell longer than {MAX_CELL_CHARS} characters")
    return list(table.itertuples(index=False))


def host_matvec(kernels: str, path: Optional[Union[str, Path]] = None) -> tuple[tuple[str, float, float], ...]:
    """``(weight format, weights per second per core, FP32 FLOP/s of the core it was
    measured on)`` of the host kernel family ``kernels`` (``data/runtimes/host_matvec.csv``)."""
    table = _matvec(file_version_key(path if path is not None else _data_dir() / "host_matvec.csv"))
    if kernels not in table:
        raise RuntimeProfileError(f"no host kernel family {kernels!r} in the matvec table; valid: {', '.join(sorted(table))}")
    return table[kernels]


@functools.lru_cache(maxsize=4)
def _matvec(key: FileIdentity) -> dict[str, tuple[tuple[str, float, float], ...]]:
    formats = weight_formats()
    found: dict[str, list[tuple[str, float, float]]] = {}
    problems: list[str] = []
    for i, row in enumerate(_read(Path(key[0]), "table of host matvec rates", _MATVEC_COLUMNS)):
        where = f"row {i + 2} ({row.kernels[:40]}/{row.format[:40]})"
        rate = _number(row.weights_per_s_per_core)
        if not is_plain_name(row.kernels):
            problems.append(f"{where}: a kernel family is a plain name ({PLAIN_NAME_RULE})")
        if row.format not in formats:
            problems.append(f"{where}: format is none of the format table's ({', '.join(sorted(formats))})")
        if rate is None or not 1e6 <= rate <= 1e12:
            problems.append(f"{where}: weights_per_s_per_core must be a number in [1e6, 1e12]")
        core = _number(row.core_flops)
        if core is None or not 1e8 <= core <= 1e13:
            problems.append(f"{where}: core_flops must be a number in [1e8, 1e13] (FP32 FLOP/s of one core)")
        if not row.source.strip():
            problems.append(f"{where}: no source")
        if any(f == row.format for f, _, _ in found.get(row.kernels, [])):
            problems.append(f"{where}: given twice")
        if rate is not None and core is not None:
            found.setdefault(row.kernels, []).append((row.format, rate, core))
    if problems:
        raise RuntimeProfileError(f"{key[0]}: " + "; ".join(problems[:12]))
    return {k: tuple(v) for k, v in found.items()}


def _number(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def fitted_terms(path: Optional[Union[str, Path]] = None) -> dict[str, FittedTermSpec]:
    """The terms profiles may fit (``data/runtimes/fitted_terms.csv``), by name."""
    return _terms(file_version_key(path if path is not None else _data_dir() / "fitted_terms.csv"))


@functools.lru_cache(maxsize=4)
def _terms(key: FileIdentity) -> dict[str, FittedTermSpec]:
    found: dict[str, FittedTermSpec] = {}
    problems: list[str] = []
    for i, row in enumerate(_read(Path(key[0]), "table of fitted terms", _TERM_COLUMNS)):
        where = f"row {i + 2} ({row.term[:40]})"
        low, high, prior = _number(row.low), _number(row.high), _number(row.prior)
        if not is_plain_name(row.term) or row.term in found:
            problems.append(f"{where}: a term is a new plain name ({PLAIN_NAME_RULE})")
        if row.field not in _RANGES:
            problems.append(f"{where}: field is none of {', '.join(_RANGES)}")
        elif low is None or high is None or prior is None or not (0 < low <= prior <= high) or high > _RANGES[row.field][1]:
            problems.append(f"{where}: needs 0 < low <= prior <= high <= {_RANGES[row.field][1]:g}")
        if not row.source.strip():
            problems.append(f"{where}: no source")
        if low is not None and high is not None and prior is not None and row.field in _RANGES:
            found[row.term] = FittedTermSpec(row.term, row.field, low, high, prior, row.source)
    if problems:
        raise RuntimeProfileError(f"{key[0]}: " + "; ".join(problems[:12]))
    return found


def checked_fit(term: str, value: object, where: str = "") -> float:
    """The value of the fitted term ``term`` as a float, or a ``RuntimeProfileError``: an
    unknown term, or a value that is not a real number in the term's range in
    ``fitted_terms.csv`` (a kernel time of 0 is no machine; no run supports it)."""
    spec = fitted_terms().get(term)
    if spec is None:
        raise RuntimeProfileError(f"{where}fitted term {str(term)[:40]!r} is none of fitted_terms.csv's "
                                  f"({', '.join(sorted(fitted_terms()))})")
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) else math.nan
    if not (math.isfinite(number) and spec.low <= number <= spec.high):
        raise RuntimeProfileError(f"{where}fitted term {term!r} = {value!r} is not a number in [{spec.low:g}, "
                                  f"{spec.high:g}] ({spec.field}: the term's range in fitted_terms.csv)")
    return number


def runtime_profiles(path: Optional[Union[str, Path]] = None) -> tuple[RuntimeProfile, ...]:
    """The runtime profiles of the table at ``path`` (default: the shipped one), in file
    order, checked (rules 1, 2)."""
    return _profiles(file_version_key(path if path is not None else runtime_profiles_path()))


@functools.lru_cache(maxsize=4)
def _profiles(key: FileIdentity) -> tuple[RuntimeProfile, ...]:
    path = Path(key[0])
    problems: list[str] = []
    rows: dict[str, dict[str, tuple[str, str]]] = {}
    terms = fitted_terms()
    for i, row in enumerate(_read(path, "table of runtime profiles", _COLUMNS)):
        where = f"row {i + 2} ({row.profile[:40]}/{row.field[:40]})"
        if not is_plain_name(row.profile):
            problems.append(f"{where}: a profile name is a plain name ({PLAIN_NAME_RULE})")
            continue
        if row.field not in PROFILE_FIELDS and row.field != BASE_FIELD:
            problems.append(f"{where}: field is none of {', '.join((*PROFILE_FIELDS, BASE_FIELD))}")
            continue
        if not row.source.strip():
            problems.append(f"{where}: no source")
        if row.field in rows.setdefault(row.profile, {}):
            problems.append(f"{where}: given twice")
        rows[row.profile][row.field] = (row.value, row.source)
        if row.field != BASE_FIELD:
            problems += [f"{where}: {p}" for p in _value_problems(row.field, row.value, terms)]
    merged, chain_problems = _with_bases(rows)
    problems += chain_problems
    for name, fields_ in merged.items():
        missing = [f for f in PROFILE_FIELDS if f not in fields_]
        if missing:
            problems.append(f"profile {name!r} lacks {', '.join(missing)}")
    if not problems:
        problems += _ambiguous_phrases(merged)
    if problems:
        raise RuntimeProfileError(f"{path}: " + "; ".join(problems[:12]) + (f"; and {len(problems) - 12} more" if len(problems) > 12 else ""))
    return tuple(_profile(name, fields_) for name, fields_ in merged.items())


def _with_bases(rows: Mapping[str, dict[str, tuple[str, str]]]) -> tuple[dict[str, dict[str, tuple[str, str]]], list[str]]:
    """Every profile's fields over its chain of bases (rule 1), and what is wrong with the
    chains. Each profile is resolved once, after its base, so a table of n profiles costs
    O(n) whatever its chains; a chain deeper than ``MAX_BASE_DEPTH`` is refused."""
    merged: dict[str, dict[str, tuple[str, str]]] = {}
    depth: dict[str, int] = {}
    problems: list[str] = []
    for name in rows:
        chain: list[str] = []  # profiles not yet resolved, each the base of the one before
        walked: set[str] = set()
        current, problem = name, ""
        while current not in merged and BASE_FIELD in rows[current]:
            if current in walked:
                problem = f"profile {name!r}: bases form a cycle ({' -> '.join(p[:40] for p in (*chain[-8:], current))})"
                break
            walked.add(current)
            chain.append(current)
            base = rows[current][BASE_FIELD][0].strip()
            if base not in rows:
                problem = f"profile {current[:40]!r}: base {base[:40]!r} is none of {', '.join(list(rows)[:20])}"
                break
            current = base
        if not problem and current not in merged:  # a profile without a base: its own fields
            merged[current], depth[current] = dict(rows[current]), 0
        if not problem and depth[current] + len(chain) > MAX_BASE_DEPTH:
            problem = (f"profile {name!r}: its chain of bases is {depth[current] + len(chain)} deep; at most "
                       f"{MAX_BASE_DEPTH} are followed (a version of a version, not a list)")
        if problem:
            problems.append(problem)
            for profile in chain:  # refused: each keeps its own fields, so nothing after it cascades
                merged.setdefault(profile, dict(rows[profile]))
                depth.setdefault(profile, MAX_BASE_DEPTH + 1)
            continue
        for profile in reversed(chain):
            base = rows[profile][BASE_FIELD][0].strip()
            if "names" not in rows[profile]:
                problems.append(f"profile {profile!r} has a base but no names of its own: two profiles would match "
                                "one text")
            fields_ = {f: v for f, v in merged[base].items() if f != BASE_FIELD}
            fields_.update({f: v for f, v in rows[profile].items() if f != BASE_FIELD})
            merged[profile], depth[profile] = fields_, depth[base] + 1
    return {name: merged[name] for name in rows}, problems


def _phrase_key(phrase: str) -> frozenset[str]:
    """A name phrase as ``find_name`` matches it: its ``+``-joined parts, case and spacing aside."""
    return frozenset(" ".join(part.lower().split()) for part in phrase.split("+") if part.strip())


def _ambiguous_phrases(merged: Mapping[str, dict[str, tuple[str, str]]]) -> list[str]:
    """Rule 3: a phrase names one profile. Two that share one (a version repeating its
    base's names, say) would be chosen by their order in the file, or never."""
    owners: dict[frozenset[str], list[str]] = {}
    for name, fields_ in merged.items():
        for phrase in fields_.get("names", ("", ""))[0].split("|"):
            key = _phrase_key(phrase)
            if key and name not in owners.setdefault(key, []):
                owners[key].append(name)
    return [f"name phrase {'+'.join(sorted(key))[:60]!r} names profiles {', '.join(map(repr, names[:4]))}: a phrase "
            "names one profile (give a version its own phrase, e.g. the engine and its version joined by '+')"
            for key, names in owners.items() if len(names) > 1]


def _profile(name: str, fields_: dict[str, tuple[str, str]]) -> RuntimeProfile:
    values: dict[str, float] = {}
    fitted: dict[str, str] = {}
    for f in _RANGES:
        text = fields_[f][0].strip()
        if text.startswith(FIT_PREFIX):
            fitted[f] = text[len(FIT_PREFIX):]
            values[f] = math.nan
        else:
            values[f] = float(text)
    return RuntimeProfile(name, fields_["names"][0], fields_["launch_mode"][0].strip(), fields_["host_kernels"][0].strip(),
                          values, fitted, {f: s for f, (_, s) in fields_.items()},
                          engine=fields_["engine"][0].strip(), numa=fields_["numa"][0].strip())  # fmt: skip


def _value_problems(name: str, text: str, terms: Mapping[str, FittedTermSpec]) -> list[str]:
    text = text.strip()
    if name == "names":
        return [] if text and all(p.strip() for p in text.split("|")) else ["names are phrases separated by '|'"]
    if name == "engine":
        return [] if is_plain_name(text) else [f"an engine is a plain name ({PLAIN_NAME_RULE})"]
    if name == "numa":
        return [] if text in NUMA_POLICIES else [f"numa must be one of {', '.join(NUMA_POLICIES)}"]
    if name == "launch_mode":
        return [] if text in LAUNCH_MODES else [f"launch_mode must be one of {', '.join(LAUNCH_MODES)}"]
    if name == "host_kernels":
        if text == "none":
            return []
        try:
            host_matvec(text)
        except RuntimeProfileError as exc:
            return [str(exc)]
        return []
    if text.startswith(FIT_PREFIX):
        term = text[len(FIT_PREFIX):]
        if term not in terms:
            return [f"fitted term {term[:40]!r} is none of fitted_terms.csv's ({', '.join(sorted(terms))})"]
        return [] if terms[term].field == name else [f"term {term!r} fills {terms[term].field}, not {name}"]
    value = _number(text)
    if value is None:
        return [f"value {text[:40]!r} is neither a number nor {FIT_PREFIX}<term>"]
    low, high = _RANGES[name]
    return [] if low <= value <= high else [f"value {text[:40]!r} is outside [{low:g}, {high:g}]"]


def profile_for(runtime: object, profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> Optional[RuntimeProfile]:
    """The profile whose name phrase is found in the text ``runtime`` (rule 3)."""
    table = profiles if profiles is not None else runtime_profiles()
    found = find_name(runtime, [(p.strip(), prof.name) for prof in table for p in prof.names.split("|")])
    return next((p for p in table if p.name == found), None)
