"""The table of published batch-1 decode runs, read once into structured parts.

``published_decode_runs`` reads ``data/published/decode_anchors.csv`` (every regime — all
on the GPU, experts computed on the host, experts copied in, partial offload — each row
with its source and the phrase quoted from it) and checks it; sources held back for
validation are refused. ``published_runs`` turns every row into a ``PublishedRun``: the
model's sizes (``ModelFacts``), its weight bits (``WeightBits``), where its experts live
(``ExpertPlacement``), the named GPU, host and link parts, the runtime profile and the threads
it states — the free text read once, here (``run_text``), so that the decode model takes
parts and never prose. A row it cannot express keeps why.

Rules:

1. The table's columns are exactly ``PUBLISHED_COLUMNS``; ids are unique; ``regime`` is
   one of ``PUBLISHED_REGIMES``; ``decode_tok_s`` is a number in [``MIN_TOK_S``,
   ``MAX_TOK_S``]; a size column,
   when given, is a finite number > 0 and active <= total; ``gpu_count`` a whole number
   >= 1; every row names an https source and quotes it (at most 200 characters); no cell
   is longer than 2,000 characters, no file larger than 16 MiB; no row comes from a
   source in ``RESERVED_SOURCES``, however its URL is spelled (``reserved_source``). A
   file that breaks a rule is refused with an ``AnchorError`` naming the rows and what
   is valid. Rows from any origin pass the same checks: a table built in memory
   (``checked_published_table``), and one row read on its own (``read_run``).
2. Parts are found by the phrases the parts table names them by, a part's own name
   included (``H200``, ``x86_server``); a parts file of your own (``parts=``) adds parts.
3. Bits per weight: a file size the run states (all weights alike); else the run's expert
   bits with the non-expert bits left over from a family file of that format; else the
   run's bits; else a family file; else the format the text names (its nominal bits).
   The experts' format (for the host's matvec rate) is the first format the text names.
4. A run's ``source`` is its publication: ``owner/repo#N`` for a GitHub issue, pull
   request or discussion, else the page's host and path — what leave-one-source-out
   holds out together. URLs are normalised once (``source_key``: host case, ``www.``,
   default ports, ``//``, percent-encoding, query and fragment), and two sources are
   the same when their keys are, case aside (``same_source``).
5. A table is read in time linear in its rows: a row's parts are read from its free text
   once per distinct text (and parts and profiles read with), so rows that agree on those
   columns share the reading; every row's own id, speed and source are its own.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Union
from urllib.parse import unquote, urlsplit

import numpy as np
import pandas as pd

from ..file_reading import file_version_key, read_regular_file
from ..moe.locality import locality_models, locality_path, locality_trace, lru_hit_rate
from ..moe.routing import RoutingTrace
from .layout import PLACEMENT_REGIMES, CacheRouting, LayoutError, ModelFacts, ExpertPlacement, UniformRouting, WeightBits
from ..machine.parts import PartsFile, part_phrases, parts_file_key
from ..weight_formats import weight_formats
from . import run_text
from .model_families import ModelFamily, family_of, model_families
from .published_errors import AnchorError
from ..machine.runtime_profiles import RuntimeProfile, profile_for, runtime_profiles

__all__ = ["AnchorError", "FittedTerm", "MAX_TOK_S", "MIN_TOK_S", "PUBLISHED_COLUMNS", "PUBLISHED_REGIMES", "RESERVED_SOURCES",
           "PublishedRun", "checked_published_table", "read_runs", "reserved_source", "same_source",
           "StatedHitRate", "TraceRouting", "gpu_part", "published_decode_runs", "published_dir", "published_runs", "read_run",
           "routing_for", "source_key"]  # fmt: skip

PUBLISHED_REGIMES = PLACEMENT_REGIMES
PUBLISHED_COLUMNS = (
    "id", "regime", "model", "total_params_b", "active_params_b", "weight_format", "bits_per_weight", "runtime",
    "runtime_version", "gpu", "gpu_count", "cpu", "host_memory", "link", "offload_detail", "context_tokens",
    "decode_tok_s", "source_url", "source_kind", "source_date", "quote",
)  # fmt: skip
# Sources held back to validate predictions independently: no row may come from them.
RESERVED_SOURCES = (
    "arxiv.org/abs/2312.17238", "arxiv.org/pdf/2312.17238",  # Eliseev & Mazur, Table 2
    "efeslab/fiddler",  # the Fiddler README's results figure
    "llmfit/pull/755", "llmfit/pull/775",
    "DeepSeek-R1_V3_tutorial",  # the ktransformers tutorial's V0.2 table
    "tt-inference-server/issues/340",
)  # fmt: skip
_MAX_QUOTE_CHARS = 200
#: A batch-1 decode speed some machine can reach, tokens/s (rule 1): from a model read off
#: storage at a token every thousand seconds to ten times the fastest published
#: batch-1 figures (wafer-scale engines at a few thousand tokens/s).
MIN_TOK_S, MAX_TOK_S = 1e-3, 1e5
#: Numeric columns: (low, low end open, high) when a cell is given.
_RANGES = {"total_params_b": (0.0, True, 1e6), "active_params_b": (0.0, True, 1e6), "bits_per_weight": (0.0, True, 64.0),
           "gpu_count": (1.0, False, 1024.0), "context_tokens": (0.0, False, 1e8)}  # fmt: skip
_MAX_TABLE_BYTES = 16 << 20
#: Tokens of the trace generated to match a family's published routing statistics.
ROUTING_TOKENS = 2048


def published_dir() -> Path:
    """The folder of published measurements: the repository's ``data/published``."""
    return Path(__file__).resolve().parents[2] / "data" / "published"


def published_decode_runs(path: Optional[Union[str, Path]] = None) -> pd.DataFrame:
    """Published batch-1 MoE decode runs, one row per published figure, checked (rule 1);
    ``path`` defaults to ``data/published/decode_anchors.csv``."""
    path = Path(path) if path is not None else published_dir() / "decode_anchors.csv"
    data = read_regular_file(path, "published decode table (a CSV file)", AnchorError, max_bytes=_MAX_TABLE_BYTES)
    try:
        table = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise AnchorError(f"{path} is not a readable CSV table: {exc}") from None
    return checked_published_table(table, str(path))


def _cell_text(value: Any) -> str:
    """A cell of a table given in memory, as the file loader reads it: text, "" for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def checked_published_table(table: pd.DataFrame, where: str = "the published runs") -> pd.DataFrame:
    """Rule 1 for a table from any origin — the shipped file, a file of your own, or a
    ``DataFrame`` built in memory: its cells read as text (a boolean speed or an id of
    None is not a number or an id), checked, and the numeric columns parsed. A table that
    breaks a rule is an ``AnchorError`` naming ``where``, the rows and what is valid."""
    if not isinstance(table, pd.DataFrame):
        raise AnchorError(f"{where}: published runs are a table (a pandas DataFrame) of the columns "
                          f"{', '.join(PUBLISHED_COLUMNS)}, got {type(table).__name__}")
    if tuple(table.columns) != PUBLISHED_COLUMNS:
        missing = [c for c in PUBLISHED_COLUMNS if c not in table.columns]
        extra = [str(c)[:40] for c in table.columns if c not in PUBLISHED_COLUMNS]
        raise AnchorError(f"{where}: columns differ from the published table's (missing {missing}, unexpected {extra}); "
                          f"valid columns, in order: {', '.join(PUBLISHED_COLUMNS)}")
    flags = pd.Series([any(isinstance(v, (bool, np.bool_)) for v in row) for row in table.itertuples(index=False)],
                      dtype=bool)
    table = pd.DataFrame({c: [_cell_text(v) for v in table[c]] for c in PUBLISHED_COLUMNS}, columns=list(PUBLISHED_COLUMNS),
                         dtype=str)
    problems = _problems(table)
    if flags.any():
        problems.append(f"rows {_ids(table, flags.to_numpy())} hold a true/false value where a number or text belongs")
    if problems:
        raise AnchorError(f"{where}: " + "; ".join(problems))
    numbers = {c: pd.to_numeric(table[c].where(table[c] != ""), errors="coerce")
               for c in ("total_params_b", "active_params_b", "bits_per_weight", "gpu_count", "context_tokens", "decode_tok_s")}  # fmt: skip
    return table.assign(**numbers)


def _ids(table: pd.DataFrame, mask: Any) -> list[str]:
    found = [str(i)[:40] for i in table.loc[mask, "id"]]
    return found[:10] + ([f"and {len(found) - 10} more"] if len(found) > 10 else [])


def _problems(table: pd.DataFrame) -> list[str]:
    """What breaks rule 1, by row id."""
    problems: list[str] = []
    long = table.apply(lambda col: col.str.len() > run_text.MAX_CELL_CHARS).any(axis=1)
    if long.any():
        problems.append(f"rows {_ids(table, long)} have a cell longer than {run_text.MAX_CELL_CHARS} characters")
    dup = table["id"].duplicated() | (table["id"].str.strip() == "")
    if dup.any():
        problems.append(f"ids {_ids(table, dup)} are empty or duplicated")
    bad = ~table["regime"].isin(PUBLISHED_REGIMES)
    if bad.any():
        problems.append(f"rows {_ids(table, bad)} have a regime outside {', '.join(PUBLISHED_REGIMES)}")
    speed = pd.to_numeric(table["decode_tok_s"], errors="coerce")
    bad = ~(np.isfinite(speed) & (speed >= MIN_TOK_S) & (speed <= MAX_TOK_S))
    if bad.any():
        problems.append(f"rows {_ids(table, bad)} have no decode_tok_s in [{MIN_TOK_S:g}, {MAX_TOK_S:g}] (a batch-1 "
                        "decode speed some machine can reach)")
    for column, (low, low_open, high) in _RANGES.items():
        given = table[column].str.strip() != ""
        value = pd.to_numeric(table[column], errors="coerce")
        inside = np.isfinite(value) & ((value > low) if low_open else (value >= low)) & (value <= high)
        bad = given & ~inside
        if bad.any():
            problems.append(f"rows {_ids(table, bad)}: {column} is not a number in {'(' if low_open else '['}{low:g}, {high:g}]")
    total = pd.to_numeric(table["total_params_b"], errors="coerce")
    active = pd.to_numeric(table["active_params_b"], errors="coerce")
    bad = active > total
    if bad.any():
        problems.append(f"rows {_ids(table, bad)}: active_params_b exceeds total_params_b")
    url, quote = table["source_url"], table["quote"]
    bad = ~url.str.startswith("https://") | (quote.str.strip() == "")
    if bad.any():
        problems.append(f"rows {_ids(table, bad)} lack an https source_url or a quote")
    bad = quote.str.len() > _MAX_QUOTE_CHARS
    if bad.any():
        problems.append(f"rows {_ids(table, bad)} quote more than {_MAX_QUOTE_CHARS} characters")
    bad = url.map(reserved_source)
    if bad.any():
        problems.append(f"rows {_ids(table, bad)} come from a source reserved for validation ({', '.join(RESERVED_SOURCES)})")
    return problems


def _normal_url(url: str) -> tuple[str, list[str]]:
    """Rule 4: a URL's host and path segments, spelled one way: the host lower-cased
    without ``www.``, a user or a default port; each segment percent-decoded; empty
    segments (``//``), the query and the fragment dropped."""
    try:
        parts = urlsplit(str(url).strip())
        port = parts.port
    except ValueError:  # a port that is not a number: the URL is kept as text
        return str(url).strip().lower(), []
    host = (parts.hostname or "").lower().rstrip(".")
    host = host[4:] if host.startswith("www.") else host
    if port is not None and port not in (80, 443):
        host = f"{host}:{port}"
    path = [unquote(p) for p in parts.path.split("/")]
    return host, [p for p in path if p]


def source_key(url: str) -> str:
    """Rule 4: the publication ``url`` belongs to, however the URL is spelled."""
    host, path = _normal_url(url)
    if host == "github.com" and len(path) >= 4 and path[2] in ("issues", "pull", "discussions"):
        return f"{path[0]}/{path[1]}#{path[3]}"
    if host == "github.com" and len(path) >= 2:
        return f"{path[0]}/{path[1]}"
    return host + "/" + "/".join(path)


def same_source(source: str) -> str:
    """Rule 4: what two sources are compared by — their keys, case aside (hosts and
    GitHub owners and repositories are case-insensitive)."""
    return source.casefold()


def reserved_source(url: object) -> bool:
    """Rule 1: whether ``url`` is a source reserved for validation, however it is spelled
    (case, ``//``, an explicit port, percent-encoding, ``www.``)."""
    host, path = _normal_url(str(url))
    text = same_source("/".join([host, *path]))
    return any(same_source(r) in text for r in RESERVED_SOURCES)


@dataclass(frozen=True)
class TraceRouting:
    """An expert cache's routing as a trace: the hit rate of an LRU cache holding a share
    of each layer's experts, replayed over it (``moe.locality.lru_hit_rate``)."""

    trace: RoutingTrace
    label: str

    def hit_rate(self, share: float) -> float:
        return float(lru_hit_rate(self.trace, share * self.trace.num_experts))


@dataclass(frozen=True)
class StatedHitRate:
    """An expert cache's hit rate as the run states it measured (whatever share it holds)."""

    hit: float

    @property
    def label(self) -> str:
        return f"the run's stated hit rate {self.hit:.3f}"

    def hit_rate(self, share: float) -> float:
        return self.hit if share > 0 else 0.0


def routing_for(family: str) -> CacheRouting:
    """The routing a copying run's cache sees: a trace matching the family's published
    routing statistics (``data/routing/locality.csv``), else uniform routing; made once
    per family and version of the statistics (a table of runs asks for every row)."""
    return _routing_for(family, file_version_key(locality_path()))


@functools.lru_cache(maxsize=64)
def _routing_for(family: str, _key: Any) -> CacheRouting:
    if family not in locality_models():
        return UniformRouting(f"uniform routing (no published routing statistics for {family})")
    fit = locality_trace(family, ROUTING_TOKENS, seed=0)
    return TraceRouting(fit.trace, f"LRU over a trace matching {family}'s published routing statistics "
                                   f"(largest gap {fit.max_abs_error:.3f})")


@dataclass(frozen=True)
class PublishedRun:
    """One published run as structured parts (module doc); ``why`` says what keeps it from
    being modeled ("" when nothing does)."""

    id: str
    regime: str
    tok_s: float  # the published decode speed
    source: str  # the publication (rule 4)
    source_url: str
    runtime: str  # the runtime profile's name, "" when none matches
    family: str  # the model family's name, "" when none matches
    model: Optional[ModelFacts] = None
    formats: Optional[WeightBits] = None
    placement: Optional[ExpertPlacement] = None
    gpu: Optional[str] = None
    host: Optional[str] = None
    link: Optional[str] = None
    threads: Optional[int] = None  # host threads the run states
    sockets: Optional[int] = None  # sockets whose memory its host threads use, when stated
    numa: Optional[str] = None  # how it places host weights over NUMA nodes, when stated (machine.numa)
    pageable: Optional[bool] = None  # its copies from pageable (True) or pinned (False) memory, when stated
    copy_rate: Optional[float] = None  # the host-to-device bytes/s it measured, when stated
    why: str = ""
    parts: Optional[str] = None  # the parts file of your own its parts were found in (None: the shipped table)


def gpu_part(text: object, parts: PartsFile = None) -> Optional[str]:
    """The GPU part a run's ``gpu`` text names (rule 2), or None."""
    return run_text.find_name(text, part_phrases("gpu", parts))


def _bits(row: Mapping[str, Any], family: ModelFamily, model: ModelFacts) -> Optional[WeightBits]:
    """Rule 3."""
    text = row.get("weight_format", "")
    formats = weight_formats()
    by_word = {w: f for f in formats.values() for w in (f.name, *f.aliases)}
    named = next((by_word[w] for w in run_text.words(text) if w in by_word), None)
    fmt, ops = (named.name, named.dequant_ops) if named is not None else ("", 0.0)
    expert, other = model.expert_total, model.other_total
    stated = run_text.stated_file_bytes(text)
    if stated is not None:
        per = stated[0] * 8 / (expert + other)
        return WeightBits(per, per, fmt, ops, f"file size stated ({stated[1]})")
    bits = _finite(row.get("bits_per_weight"))
    file = next(((f, b, p) for f, b, p in family.files if f.lower() in run_text.words(text)), None)
    if bits is not None and file is not None:
        scale = file[2] / (expert + other)
        rest = (file[1] * 8 - bits * expert * scale) / (other * scale)
        if 0 < rest <= 64:
            return WeightBits(bits, rest, fmt, ops, f"{bits:g}-bit experts, the rest of the {file[0]} file")
    if bits is not None:
        return WeightBits(bits, bits, fmt, ops, f"{bits:g} bits per weight stated")
    if file is not None:
        per = file[1] * 8 / file[2]
        return WeightBits(per, per, fmt, ops, f"family {file[0]} file ({file[1] / 2**30:.2f} GiB)")
    if named is not None:
        return WeightBits(named.bits_per_weight, named.bits_per_weight, fmt, ops, f"format {named.name}")
    return None


def _finite(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _placement(row: Mapping[str, Any], family: ModelFamily, context: int) -> tuple[Optional[ExpertPlacement], str]:
    detail = str(row.get("offload_detail", ""))
    regime = str(row.get("regime", ""))
    if regime == "partial_offload":
        layers, why = run_text.host_layers_text(detail)
        if layers is None:
            return None, why
        return ExpertPlacement(regime, host_layers=layers, context_tokens=context), ""
    if regime == "experts_on_host_compute":
        kept = run_text.gpu_experts_text(detail)
        if kept > family.num_experts:  # never clamped: a figure no such model has
            return None, (f"{kept} experts per layer kept on the GPU, of the {family.num_experts} a {family.name} layer "
                          "has: not a placement this model has")
        return ExpertPlacement(regime, gpu_experts=kept, context_tokens=context), ""
    if regime == "experts_copied":
        if run_text.storage_text(f"{detail} {row.get('runtime', '')}"):
            return None, "experts read from storage: the model has no storage tier"
        cache, resident = run_text.cache_text(f"{detail} {row.get('runtime', '')}")
        stated = run_text.hit_rate_text(detail)
        routing: CacheRouting = StatedHitRate(stated) if stated is not None else routing_for(family.name)
        return ExpertPlacement(regime, resident_expert_bytes=resident, cache=cache, routing=routing, context_tokens=context), ""
    return ExpertPlacement("all_on_gpu", context_tokens=context), ""


def read_run(row: Mapping[str, Any], parts: PartsFile = None,
             profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> PublishedRun:
    """One row of the published table (its cells by column) as structured parts (module
    doc); a row that names a column the table does not have, or lacks one, is refused."""
    return _read_row(row, parts, profiles, parts_file_key(parts))


def read_runs(table: pd.DataFrame, parts: PartsFile = None,
              profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> tuple[PublishedRun, ...]:
    """Every row of a table of published runs from any origin, checked as the shipped file
    is (``checked_published_table``), as ``PublishedRun``s (rule 5: the parts files are
    looked at once for the whole table)."""
    checked = checked_published_table(table, "the runs given")
    return _read_rows(checked, parts, profiles)


def _read_rows(table: pd.DataFrame, parts: PartsFile, profiles: Optional[tuple[RuntimeProfile, ...]]) -> tuple[PublishedRun, ...]:
    profiles = profiles if profiles is not None else runtime_profiles()
    files = parts_file_key(parts)
    return tuple(_read_row(row, parts, profiles, files) for row in table.to_dict("records"))


def _read_row(row: Mapping[str, Any], parts: PartsFile, profiles: Optional[tuple[RuntimeProfile, ...]],
              files: tuple[Any, ...]) -> PublishedRun:
    """``read_run``, the parts files' identity ``files`` given (rule 5)."""
    if not isinstance(row, Mapping):
        raise AnchorError(f"a published run is a mapping of the table's columns, got {type(row).__name__}")
    missing = [c for c in ("id", "regime", "decode_tok_s", "source_url") if c not in row]
    if missing:
        raise AnchorError(f"run {str(row.get('id', '?'))[:40]!r} lacks {missing}; a run has the columns "
                          f"{', '.join(PUBLISHED_COLUMNS)}")
    cells = {c: ("" if row.get(c) is None or (isinstance(row.get(c), float) and math.isnan(row[c])) else row[c])
             for c in PUBLISHED_COLUMNS}  # fmt: skip
    for column, (low, low_open, high) in _RANGES.items():
        given = cells[column]
        value = _finite(given) if not isinstance(given, bool) else None
        if str(given).strip() != "" and (value is None or (value <= low if low_open else value < low) or value > high):
            raise AnchorError(f"run {str(cells['id'])[:40]!r}: {column} must be a number in {'(' if low_open else '['}"
                              f"{low:g}, {high:g}] or empty, got {str(given)[:40]!r}")
    if not isinstance(row["id"], str) or not row["id"].strip():
        raise AnchorError(f"a published run's id is non-empty text, got {str(row['id'])[:40]!r}")
    given = row["decode_tok_s"]
    tok_s = None if isinstance(given, (bool, np.bool_)) else _finite(given)
    if tok_s is None or not MIN_TOK_S <= tok_s <= MAX_TOK_S:
        raise AnchorError(f"run {str(cells['id'])[:40]!r}: decode_tok_s must be a number in [{MIN_TOK_S:g}, "
                          f"{MAX_TOK_S:g}] (a batch-1 decode speed some machine can reach), got {str(given)[:40]!r}")
    url_text = str(cells["source_url"])
    if not url_text.startswith("https://") or reserved_source(url_text):
        raise AnchorError(f"run {str(cells['id'])[:40]!r}: source_url must be an https source not reserved for "
                          f"validation ({', '.join(RESERVED_SOURCES)}), got {url_text[:80]!r}")
    if cells["regime"] not in PUBLISHED_REGIMES:
        raise AnchorError(f"run {str(cells['id'])[:40]!r}: regime {str(cells['regime'])[:40]!r} is none of {', '.join(PUBLISHED_REGIMES)}")
    run_id, url = str(cells["id"]), str(cells["source_url"])
    table = profiles if profiles is not None else runtime_profiles()
    key = (tuple(str(cells[c]) for c in _INTERPRETED), id(table), files, None if parts is None else os.fspath(parts))
    with _LOCK:
        kept = _INTERPRETED_RUNS.get(key)
    if kept is None or kept[0] is not table:
        try:
            kept = (table, _interpreted(cells, parts, table))
        except AnchorError as exc:
            raise AnchorError(f"run {run_id[:40]!r}: {exc}") from None
        with _LOCK:
            _INTERPRETED_RUNS[key] = kept  # holds the profiles it was read with: their id is not reused
            while len(_INTERPRETED_RUNS) > _KEPT_RUNS:
                _INTERPRETED_RUNS.popitem(last=False)
    return dataclasses.replace(kept[1], id=run_id, tok_s=tok_s, source=source_key(url), source_url=url)


#: The columns a run's parts are read from (rule 5): rows that agree on them read alike.
_INTERPRETED = tuple(c for c in PUBLISHED_COLUMNS if c not in ("id", "decode_tok_s", "source_url", "source_kind",
                                                                "source_date", "quote"))  # fmt: skip
_KEPT_RUNS = 4096
_INTERPRETED_RUNS: "OrderedDict[tuple, tuple[tuple[RuntimeProfile, ...], PublishedRun]]" = OrderedDict()
_LOCK = threading.Lock()


def _interpreted(cells: Mapping[str, Any], parts: PartsFile, profiles: tuple[RuntimeProfile, ...]) -> PublishedRun:
    """Rules 2, 3 and 5: what a row's free text says, as parts (its id, speed and source
    left for ``read_run`` to set)."""
    regime = str(cells["regime"])
    profile = profile_for(cells["runtime"], profiles)
    family = family_of(cells["model"], model_families())
    detail = f"{cells['offload_detail']} {cells['runtime']}"
    why, model, bits = _model_and_bits(cells, family)
    if profile is None:
        why = why or f"no runtime profile names {str(cells['runtime'])[:80]!r}"
    if (_finite(cells["gpu_count"]) or 1) > 1:
        why = why or "split over several GPUs: not modeled"
    gpu = gpu_part(cells["gpu"], parts)
    if gpu is None:
        why = why or f"no GPU part for {str(cells['gpu'])[:80]!r}"
    placement, placement_why = (None, "") if family is None else _placement(cells, family, int(_finite(cells["context_tokens"]) or 0))
    why = why or placement_why
    host = run_text.find_name(cells["cpu"], part_phrases("host", parts))
    if cells["regime"] in ("experts_on_host_compute", "partial_offload") and host is None:
        stated = str(cells["cpu"])
        why = why or f"host CPU {'not a part: ' + repr(stated[:80]) if stated else 'not stated'}"
    link = run_text.find_name(cells["link"], part_phrases("link", parts))
    return PublishedRun("", regime, 0.0, "", "", profile.name if profile is not None else "",
                        family.name if family is not None else "", model, bits, placement, gpu, host, link,
                        threads=run_text.threads_text(detail), sockets=run_text.sockets_text(detail), numa=run_text.numa_text(detail),
                        pageable=run_text.pageable_text(detail) if regime == "experts_copied" else None,
                        copy_rate=run_text.copy_rate_text(f"{cells['link']} {detail}"), why=why,
                        parts=None if parts is None else os.fspath(parts))  # fmt: skip


def _model_and_bits(cells: Mapping[str, Any], family: Optional[ModelFamily]) -> tuple[str, Optional[ModelFacts], Optional[WeightBits]]:
    total, active = _finite(cells["total_params_b"]), _finite(cells["active_params_b"])
    if total is None or active is None:
        return "model sizes (total and active parameters) not stated", None, None
    if family is None:
        return f"no architecture facts (layers, experts, top-k) for {str(cells['model'])[:80]!r}", None, None
    try:
        model = ModelFacts(family.name, family.layers, total * 1e9, active * 1e9, family.num_experts, family.top_k,
                           float(family.expert_params), family.first_dense, family.hidden, family.kv_bytes_per_token)  # fmt: skip
    except LayoutError as exc:
        raise AnchorError(str(exc)) from None
    bits = _bits(cells, family, model)
    if bits is None:
        return "bits per weight not stated (no file size, no known format)", model, None
    return "", model, bits


def published_runs(path: Optional[Union[str, Path]] = None, parts: PartsFile = None,
                   profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> tuple[PublishedRun, ...]:
    """Every row of the published table at ``path`` (default: the shipped one) as a
    ``PublishedRun`` (module doc); ``parts``: a parts file of your own."""
    return _read_rows(published_decode_runs(path), parts, profiles)


@dataclass(frozen=True)
class FittedTerm:
    """A term fitted to published runs, with its leave-one-out check."""

    name: str  # what the term is, in words
    value: float  # fitted on every given row
    rows: tuple[str, ...]  # the runs it was fitted to
    loo_errors: tuple[float, ...]  # per row: |prediction with the term fitted on the others / published - 1|
    prior: bool = False  # True: too few runs depend on it; its physical default is used

    @property
    def median_loo_error(self) -> float:
        return float(np.median(self.loo_errors)) if self.loo_errors else float("nan")

