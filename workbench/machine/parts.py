"""Hardware as parts: the named GPUs, hosts, links and runtimes a cost model is composed of.

``parts()`` reads the shipped table (``data/parts/parts.csv``): one row per figure of a
part, with the datasheet (or the estimate) it comes from. ``CostModel.compose(gpu=,
host=, link=, runtime=)`` takes each part's ``CostModel`` fields from it. A user's own
machine is a parts file of the same columns passed by path (``parts=``): its parts join
the shipped ones, and a part it names replaces the shipped part of that name whole.

Rules:

1. Each kind of part sets its own ``CostModel`` fields, all of them: a ``gpu`` the device
   math and memory figures, a ``host`` the host CPU's, a ``link`` the copy paths', a
   ``runtime`` how kernels are launched and how a decode token's work overlaps. A host may
   also state descriptive figures (``cores``, ``math_cores``: the cores a runtime's math
   threads run on, the performance cores of a hybrid CPU; ``sockets``;
   ``dram_peak_bandwidth``: the DRAM peak of all sockets; ``memory_bytes``: its RAM), a gpu
   its ``memory_bytes`` (as the device reports it: memory sold as "24 GB" is 24 GiB) and
   host interface (``pcie_gen``, ``pcie_lanes``): not ``CostModel`` fields
   (``part_facts`` reads them). Any part but a runtime may state ``names``: the phrases
   that name it in free text (``NVIDIA H200|H200``), literal and separated by ``|``. A link
   that exists only with one host states it (``host``: NVLink-C2C joins a Hopper GPU to a
   Grace CPU, a GH200), and a machine composed with that link takes that host
   (``CostModel.compose``).
2. Every figure has a source; values are finite numbers in their field's range (a
   bandwidth or FLOP rate > 0, a latency or overhead >= 0, a share in [0, 1],
   ``pageable_factor`` in (0, 1], counts whole and >= 1; ``launch_mode``: a launch mode)
   and within what hardware can do (``_LIMITS``: rates, sizes, overheads and kernel
   counts no machine has are refused, whether in the shipped table or a user's file);
   no (kind, name, field) appears twice; a name is a plain identifier. A table that breaks
   a rule is refused with a ``CostModelError`` naming the rows.
3. The table is data, read and never executed, at most 16 MiB; a measured part
   (``measured:<name>``) is not in it but in a measured preset file (``CostModel.compose``
   reads it). An edited file is read again (a read is keyed by the file's path, size and
   modification time).
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any, Optional, Union

import pandas as pd

from ..file_reading import FileIdentity, file_version_key, finite_number, read_csv_table
from ..plain_names import PLAIN_NAME_RULE, is_plain_name
from .op_cost import CostModelError

__all__ = ["PART_FIELDS", "PART_KINDS", "DESCRIPTIVE_FIELDS", "PartsFile", "link_host", "part_facts", "part_figures",
           "part_names", "part_phrases", "parts", "parts_file_key", "parts_path"]  # fmt: skip

#: A user's parts file, by path (None: the shipped table alone).
PartsFile = Optional[Union[str, "os.PathLike[str]"]]

#: The CostModel fields each kind of part sets (rule 1).
PART_FIELDS: dict[str, tuple[str, ...]] = {
    "gpu": ("device_flops_fp64", "device_flops_fp32", "device_flops_bf16", "device_flops_fp8", "device_memory_bandwidth"),
    "host": ("host_flops", "host_memory_bandwidth", "host_op_overhead"),
    "link": ("h2d_bandwidth", "d2h_bandwidth", "d2d_bandwidth", "h2d_latency", "d2h_latency", "d2d_latency",
             "pageable_factor"),
    "runtime": ("launch_mode", "launch_overhead", "executor_overhead", "graph_launch_overhead", "kernel_gap",
                "min_kernel_time", "overlap", "launch_overlap", "kernels_per_layer", "visited_expert_kernels",
                "copies_per_expert", "pageable_copies", "loads_all_experts", "copy_overhead", "fuses_row_picks"),
}  # fmt: skip
PART_KINDS = tuple(PART_FIELDS)
#: Figures a part may state that no time uses (rule 1).
DESCRIPTIVE_FIELDS: dict[str, tuple[str, ...]] = {
    "host": ("cores", "math_cores", "sockets", "dram_peak_bandwidth", "cross_socket_bandwidth", "memory_bytes", "names"),
    "gpu": ("memory_bytes", "pcie_gen", "pcie_lanes", "names"),
    "link": ("names", "host"),
}
_COLUMNS = ("kind", "name", "field", "value", "source")
#: Descriptive fields whose value is text, not a number.
_TEXT_FIELDS = frozenset({"names", "host"})

#: Fields that may be 0 (a fixed cost can vanish; a runtime term can be absent).
_MAY_BE_ZERO = frozenset({"h2d_latency", "d2h_latency", "d2d_latency", "launch_overhead", "executor_overhead",
                          "graph_launch_overhead", "kernel_gap", "min_kernel_time", "host_op_overhead",
                          "kernels_per_layer", "visited_expert_kernels", "copies_per_expert", "copy_overhead"})  # fmt: skip
#: Shares: numbers in [0, 1] (``pageable_factor`` in (0, 1]).
_SHARES = frozenset({"overlap", "launch_overlap", "pageable_copies", "loads_all_experts", "pageable_factor",
                     "fuses_row_picks"})
#: Whole counts, with their largest sensible value.
_COUNTS = {"cores": 4096, "math_cores": 4096, "sockets": 64, "pcie_gen": 8, "pcie_lanes": 32}
#: What hardware can do (rule 2): each rate, size and count between these, so a figure no
#: machine has (a typo's 1e30 FLOP/s, 10^12 kernels per layer) is refused, never timed.
#: The upper limits sit 10× or more above the fastest shipping part of 2026 (a B200's
#: ~4.5e15 dense fp8 FLOP/s and 8e12 B/s of HBM; a two-socket server's ~1.7e12 B/s of
#: DDR5; NVLink-C2C's 9e11 B/s); an overhead or latency is under a second.
_LIMITS: dict[str, tuple[float, float]] = {
    **{f: (1e8, 1e17) for f in ("device_flops_fp64", "device_flops_fp32", "device_flops_bf16", "device_flops_fp8")},
    "device_memory_bandwidth": (1e8, 1e14), "host_flops": (1e8, 1e16), "host_memory_bandwidth": (1e7, 1e13),
    "dram_peak_bandwidth": (1e7, 1e13), "cross_socket_bandwidth": (1e8, 1e13), "h2d_bandwidth": (1e6, 1e13), "d2h_bandwidth": (1e6, 1e13),
    "d2d_bandwidth": (1e6, 1e14), "memory_bytes": (1e6, 1e14),
    **{f: (0.0, 1.0) for f in ("h2d_latency", "d2h_latency", "d2d_latency", "launch_overhead", "executor_overhead",
                               "graph_launch_overhead", "kernel_gap", "min_kernel_time", "host_op_overhead",
                               "copy_overhead")},
    "kernels_per_layer": (0.0, 1e5), "visited_expert_kernels": (0.0, 1e4), "copies_per_expert": (0.0, 1e3),
}  # fmt: skip


_SHIPPED = Path(__file__).resolve().parents[2] / "data" / "parts" / "parts.csv"


def parts_path() -> Path:
    """The shipped table: the repository's ``data/parts/parts.csv``."""
    return _SHIPPED


def parts(path: PartsFile = None) -> pd.DataFrame:
    """The table of parts at ``path`` (default: the shipped one), one row per figure,
    checked (rule 2)."""
    return _read(Path(path) if path is not None else parts_path()).copy()


def _read(path: Path) -> pd.DataFrame:
    return _checked(file_version_key(path))


@functools.lru_cache(maxsize=8)
def _checked(key: FileIdentity) -> pd.DataFrame:
    path = Path(key[0])
    table = read_csv_table(path, "table of hardware parts", CostModelError, _COLUMNS)
    problems = [p for i, row in enumerate(table.itertuples(index=False)) for p in _row_problems(i, row)]
    dup = table[table.duplicated(["kind", "name", "field"])]
    problems += [f"{r.kind}/{r.name}/{r.field} is given twice" for r in dup.itertuples(index=False)]
    for (kind, name), group in table[table["kind"].isin(PART_KINDS)].groupby(["kind", "name"]):
        missing = sorted(set(PART_FIELDS[kind]) - set(group["field"]))
        if missing:
            problems.append(f"{kind} part {name!r} lacks {', '.join(missing)}")
    if problems:
        shown = "; ".join(problems[:12]) + (f"; and {len(problems) - 12} more" if len(problems) > 12 else "")
        raise CostModelError(f"{path}: {shown}")
    return table


def _row_problems(i: int, row: Any) -> list[str]:
    where = f"row {i + 2} ({str(row.kind)[:40]}/{str(row.name)[:40]}/{str(row.field)[:40]})"
    allowed = PART_FIELDS.get(row.kind)
    if allowed is None:
        return [f"{where}: kind is none of {', '.join(PART_KINDS)}"]
    problems = []
    if not is_plain_name(row.name):
        problems.append(f"{where}: a part name is a plain name ({PLAIN_NAME_RULE})")
    valid = allowed + DESCRIPTIVE_FIELDS.get(row.kind, ())
    if row.field not in valid:
        return problems + [f"{where}: a {row.kind} part sets {', '.join(valid)}"]
    if not row.source.strip():
        problems.append(f"{where}: no source")
    problem = _value_problem(row.field, row.value)
    if problem:
        problems.append(f"{where}: {problem}")
    return problems


def _value_problem(field: str, text: str) -> str:
    """What is wrong with ``text`` as a value of ``field`` (rule 2), or ""."""
    if field == "launch_mode":
        return "" if text in ("eager", "graph") else "launch_mode must be eager or graph"
    if field == "host":  # a link that exists only with one host (NVLink-C2C: the Grace CPU of a GH200)
        return "" if is_plain_name(text) else f"a link's host is a host part's name ({PLAIN_NAME_RULE})"
    if field == "names":
        phrases = [p.strip() for p in text.split("|")]
        if not all(phrases) or len(text) > 400:
            return "names are non-empty phrases separated by '|', at most 400 characters in all"
        return ""
    value = finite_number(text)
    if value is None:
        return f"value {text[:40]!r} is not a finite number"
    if field in _SHARES:
        low_open = field == "pageable_factor"
        if not ((0 < value if low_open else 0 <= value) and value <= 1):
            return f"{field} is a share in {'(0' if low_open else '[0'}, 1], got {value:g}"
    elif field in _COUNTS:
        if value != int(value) or not 1 <= value <= _COUNTS[field]:
            return f"{field} is a whole number in [1, {_COUNTS[field]}], got {value:g}"
    elif field in _MAY_BE_ZERO:
        if value < 0:
            return f"{field} must be >= 0, got {value:g}"
    elif value <= 0:
        return f"{field} must be > 0, got {value:g}"
    low, high = _LIMITS.get(field, (-math.inf, math.inf))
    if not low <= value <= high:
        return f"{field} {value:g} is outside what hardware can do: valid [{low:g}, {high:g}]"
    return ""


def _catalog(path: PartsFile) -> pd.DataFrame:
    """The shipped table, with the parts of the user's table at ``path`` joined (rule 1's
    intro: a user's part replaces the shipped part of its kind and name whole)."""
    if path is None:
        return _read(parts_path())
    return _joined(file_version_key(parts_path()), file_version_key(Path(path)))


@functools.lru_cache(maxsize=8)
def _joined(shipped_key: FileIdentity, user_key: FileIdentity) -> pd.DataFrame:
    shipped, own = _checked(shipped_key), _checked(user_key)
    replaced = set(zip(own["kind"], own["name"]))
    keep = [(k, n) not in replaced for k, n in zip(shipped["kind"], shipped["name"])]
    return pd.concat([shipped[keep], own], ignore_index=True)


def part_names(kind: str, parts: PartsFile = None) -> tuple[str, ...]:
    """The names of the parts of ``kind`` (shipped, and the user's table at ``parts``)."""
    _check_kind(kind)
    table = _catalog(parts)
    return tuple(sorted(set(table.loc[table["kind"] == kind, "name"])))


def _check_kind(kind: str) -> None:
    if kind not in PART_FIELDS:
        raise CostModelError(f"unknown kind of part {kind!r}; valid: {', '.join(PART_KINDS)}")


def parts_file_key(parts: PartsFile = None) -> tuple[Any, ...]:
    """What a reading of the catalog (shipped, and ``parts``) depends on: each file's path,
    size and modification time — equal keys, equal parts (rule 3)."""
    shipped = file_version_key(parts_path())
    return (shipped,) if parts is None else (shipped, file_version_key(Path(parts)))


def _index(parts: PartsFile) -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    """``(kind, name) -> ((field, value), ...)`` of the catalog: looked up once per read."""
    if parts is None:
        return _indexed(file_version_key(parts_path()), None)
    return _indexed(file_version_key(parts_path()), file_version_key(Path(parts)))


@functools.lru_cache(maxsize=8)
def _indexed(shipped_key: FileIdentity, user_key: Optional[FileIdentity]) -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    table = _checked(shipped_key) if user_key is None else _joined(shipped_key, user_key)
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for row in table.itertuples(index=False):
        found.setdefault((row.kind, row.name), []).append((row.field, row.value))
    return {key: tuple(rows) for key, rows in found.items()}


def _rows(kind: str, name: str, parts: PartsFile) -> tuple[tuple[str, str], ...]:
    _check_kind(kind)
    rows = _index(parts).get((kind, name)) if isinstance(name, str) else None
    if rows is None:
        where = f" (shipped, or in {parts})" if parts is not None else ""
        raise CostModelError(f"unknown {kind} part {str(name)[:80]!r}{where}; valid: {', '.join(part_names(kind, parts))}, "
                             "or 'measured:<name>' for a measured preset, or a part of your own in a parts file "
                             "passed as parts=")  # fmt: skip
    return rows


def part_figures(kind: str, name: str, parts: PartsFile = None) -> dict[str, Any]:
    """The ``CostModel`` fields the part ``name`` of ``kind`` sets (rule 1)."""
    return {field: value if field == "launch_mode" else float(value)
            for field, value in _rows(kind, name, parts) if field in PART_FIELDS[kind]}  # fmt: skip


def part_facts(kind: str, name: str, parts: PartsFile = None) -> dict[str, float]:
    """The descriptive figures (rule 1) the part ``name`` of ``kind`` states, e.g. a host's
    ``dram_peak_bandwidth`` or a gpu's ``memory_bytes``; absent ones are left out."""
    numeric = tuple(f for f in DESCRIPTIVE_FIELDS.get(kind, ()) if f not in _TEXT_FIELDS)
    return {field: float(value) for field, value in _rows(kind, name, parts) if field in numeric}


def link_host(link: str, parts: PartsFile = None) -> Optional[str]:
    """The host part a link exists only with (its ``host`` row: NVLink-C2C joins a Hopper GPU
    to a Grace CPU), or None for a link any host may have (PCIe)."""
    return next((value for field, value in _rows("link", link, parts) if field == "host"), None)


def part_phrases(kind: str, parts: PartsFile = None) -> tuple[tuple[str, str], ...]:
    """``(phrase, part name)`` for every phrase that names a part of ``kind`` in free
    text (rule 1's ``names``, and the part's own name), longest phrase first."""
    _check_kind(kind)
    # a table of runs asks for every row: built once per version of the files
    return _phrases(kind, None if parts is None else os.fspath(parts), parts_file_key(parts))


@functools.lru_cache(maxsize=32)
def _phrases(kind: str, parts: Optional[str], _key: tuple[Any, ...]) -> tuple[tuple[str, str], ...]:
    table = _catalog(parts)
    found = {(name, name) for name in table.loc[table["kind"] == kind, "name"]}
    named = table[(table["kind"] == kind) & (table["field"] == "names")]
    for row in named.itertuples(index=False):
        found |= {(p.strip(), row.name) for p in row.value.split("|") if p.strip()}
    return tuple(sorted(found, key=lambda pair: (-len(pair[0]), pair)))

