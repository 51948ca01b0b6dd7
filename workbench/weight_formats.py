"""Weight formats: how many bytes a constant takes when it is stored quantized, and ``quantize``.

``weight_formats()`` reads the shipped table (``data/formats/weight_formats.csv``): one
row per format with its bits per weight *including block scales*, its block layout, the
work to dequantize one weight, and where those figures come from. ``quantize(program,
rules)`` records a format on the program's constants, the rules written as ``place``
writes them (``{format: [pattern, ...]}``), so every later stage counts the stored bytes.

Rules:

1. A constant is ranked against each pattern as ``place`` ranks an op (``place.pattern_rank``):
   ``node:`` matches its placeholder name, ``module:`` the modules of its qualified name
   (``layers.0.mlp.experts`` for ``layers.0.mlp.experts.w1``), an op pattern the ops that
   read it. The most specific match decides its format; two equally specific patterns
   for different formats are an error; a pattern that decides no constant is reported
   (a warning, or an error with ``strict=True``). Only floating-point parameters,
   buffers and constants that the program never writes are quantized.
2. The result is a new ``Program`` sharing the captured graph and weights; the format of
   each chosen constant is in ``Program.stored_formats`` (quantizing again replaces a
   constant's format). Propagation records it as a ``node_facts.StoredFormat`` on the
   constant and on every value that holds the same elements stored the same way —
   views, copies (whole or rows) and row picks of it — so constant bytes, copy bytes,
   resident and arena sizes, sweep budgets and the cost model's bytes and dequantization
   work all follow (``graph_values.node_nbytes``, ``CostModel`` rule 3d).
3. A format the sim executor can run (``executes_as``: a cast to bf16 or fp16, fp8 E4M3
   with a per-tensor scale, Q8_0 int8 blocks of 32 with an fp16 scale) gives a real
   program the constant's quantized-then-dequantized values: a run computes with what a
   weight-only kernel of that format would, equal to the eager model given the same
   values (``dequantized``). Any other format is shape-only: it is planned and estimated,
   and a run says so (``ExecutorError``).
4. The table is data: it is read, never executed, and checked on load (columns, unique
   names and aliases, bits finite and in (0, 64], block sizes whole and >= 0, dequant
   ops finite and >= 0, a source for every row, ``executes_as`` among the runnable
   kinds). A ``WeightFormat`` made by hand is checked the same way when it is made.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd
import torch

from .arguments import check_flag, describe
from .capture import Program
from .copy_ops import SELECT_ROWS
from .copy_variants import is_copy_target
from .errors import WorkbenchError
from .file_reading import cached_by_file, finite_number, read_csv_table
from .graph_values import aliased_input, is_view_op, op_name, packet_name, value_of
from .node_facts import StoredFormat, mark_stored_format, stored_format
from .place import PlacementError, most_specific, parse_patterns, pattern_rank, report_no_claim

__all__ = [
    "BITS_RANGE",
    "EXECUTABLE_KINDS",
    "FORMAT_COLUMNS",
    "WeightFormat",
    "WeightFormatError",
    "check_quantize_rules",
    "dequantized",
    "mark_stored_values",
    "quantize",
    "stored_source",
    "weight_format",
    "weight_formats",
    "weight_formats_table",
]

FORMAT_COLUMNS = ("name", "aliases", "bits_per_weight", "block_size", "layout", "dequant_ops", "executes_as", "source")
#: How the sim executor runs a format (rule 3); "" is shape-only.
EXECUTABLE_KINDS = ("bf16", "fp16", "fp8", "int8")
#: Rule 4: bits per weight lie in (BITS_RANGE[0], BITS_RANGE[1]] (block scales included).
BITS_RANGE = (0, 64)
_Q8_BLOCK = 32
_FP8_MAX = 448.0  # the largest finite float8_e4m3fn


class WeightFormatError(WorkbenchError, ValueError):
    """An unknown weight format, a malformed format table or quantize rule, or a constant
    that cannot be quantized as asked (the message says what is valid)."""


@dataclass(frozen=True)
class WeightFormat:
    """One row of the table (rule 4)."""

    name: str
    aliases: tuple[str, ...]
    bits_per_weight: float  # block scales included
    block_size: int  # weights sharing one scale; 0: none or one per tensor
    layout: str  # what a block stores
    dequant_ops: float  # operations per weight to dequantize it (an estimate)
    executes_as: str  # rule 3: one of EXECUTABLE_KINDS, or "" (shape-only)
    source: str

    def __post_init__(self) -> None:
        """Rule 4 for a format made by hand: the figures a table row must have."""
        numbers = {"bits_per_weight": self.bits_per_weight, "block_size": self.block_size, "dequant_ops": self.dequant_ops}
        problems = [f"{k} must be a number, got {type(v).__name__}" for k, v in numbers.items()
                    if isinstance(v, bool) or not isinstance(v, (int, float))]
        if not problems:
            problems = _value_problems(self.bits_per_weight, self.block_size, self.dequant_ops, self.executes_as)
        if problems:
            raise WeightFormatError(f"weight format {self.name!r}: " + "; ".join(problems))

    @property
    def executable(self) -> bool:
        return bool(self.executes_as)

    def nbytes(self, numel: int) -> int:
        """Bytes ``numel`` weights take in this format."""
        return self.stored().nbytes(numel)

    def stored(self) -> StoredFormat:
        """The node fact that records this format on a value."""
        return StoredFormat(self.name, self.bits_per_weight, self.dequant_ops)

    def round_trip(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` quantized to this format and dequantized back to its dtype (rule 3):
        the values a weight-only kernel of this format computes with."""
        if not self.executable:
            raise WeightFormatError(
                f"weight format {self.name!r} is shape-only: the workbench plans and estimates it but cannot "
                f"compute with it; formats it runs: {', '.join(_executable_names())}"
            )
        w = weight.detach()
        if self.executes_as in ("bf16", "fp16"):
            return w.to(torch.bfloat16 if self.executes_as == "bf16" else torch.float16).to(w.dtype)
        if self.executes_as == "fp8":
            scale = w.abs().amax().float().clamp_min(torch.finfo(torch.float32).tiny) / _FP8_MAX
            return ((w.float() / scale).to(torch.float8_e4m3fn).float() * scale).to(w.dtype)
        return _q8_0_round_trip(w)


def _q8_0_round_trip(w: torch.Tensor) -> torch.Tensor:
    """Q8_0: blocks of 32 along the last dimension, d = absmax / 127 stored as fp16,
    codes round(w / d) in [-127, 127] (a last block shorter than 32 is padded with zeros)."""
    flat = w.float().reshape(-1, w.shape[-1]) if w.dim() else w.float().reshape(1, 1)
    width = flat.shape[-1]
    padded = torch.nn.functional.pad(flat, (0, (-width) % _Q8_BLOCK))
    blocks = padded.reshape(padded.shape[0], -1, _Q8_BLOCK)
    d = (blocks.abs().amax(dim=-1, keepdim=True) / 127).to(torch.float16).float()
    codes = torch.where(d > 0, torch.round(blocks / torch.where(d > 0, d, torch.ones_like(d))), torch.zeros_like(blocks))
    out = (codes.clamp(-127, 127) * d).reshape(padded.shape)[:, :width]
    return out.reshape(w.shape).to(w.dtype)


def formats_path() -> Path:
    """The shipped table: the repository's ``data/formats/weight_formats.csv``."""
    return Path(__file__).resolve().parents[1] / "data" / "formats" / "weight_formats.csv"


def weight_formats_table(path: Optional[Path] = None) -> pd.DataFrame:
    """The table of weight formats as a data frame, checked (rule 4)."""
    path = Path(path) if path is not None else formats_path()
    table = read_csv_table(path, "weight format table", WeightFormatError, FORMAT_COLUMNS)
    problems: list[str] = []
    seen: set[str] = set()
    for row in table.itertuples(index=False):
        names = [row.name.strip().lower()] + [a.strip().lower() for a in row.aliases.split(";") if a.strip()]
        if not names[0]:
            problems.append("a row without a name")
        for n in names:
            if n in seen:
                problems.append(f"name {n!r} is given twice")
            seen.add(n)
        problems += [f"{row.name}: {p}" for p in _value_problems(row.bits_per_weight, row.block_size, row.dequant_ops, row.executes_as)]
        if not row.source.strip():
            problems.append(f"{row.name}: no source")
    if problems:
        raise WeightFormatError(f"{path}: " + "; ".join(problems))
    return table


def _value_problems(bits: Any, block: Any, ops: Any, executes_as: Any) -> list[str]:
    """Rule 4 for one format's figures (a table's cells or a ``WeightFormat``'s fields):
    what is wrong with each, in words naming the valid range."""
    problems: list[str] = []
    b, k, o = finite_number(bits), finite_number(block), finite_number(ops)
    if b is None or not BITS_RANGE[0] < b <= BITS_RANGE[1]:
        problems.append(f"bits_per_weight {bits!r} is not a finite number in ({BITS_RANGE[0]}, {BITS_RANGE[1]}]")
    if k is None or k < 0 or not k.is_integer():
        problems.append(f"block_size {block!r} is not a whole number >= 0")
    if o is None or o < 0:
        problems.append(f"dequant_ops {ops!r} is not a finite number >= 0")
    if executes_as not in ("", *EXECUTABLE_KINDS):
        problems.append(f"executes_as {executes_as!r} is none of {', '.join(EXECUTABLE_KINDS)} (or empty)")
    return problems


def _formats() -> dict[str, WeightFormat]:
    return _formats_at(formats_path())


@cached_by_file
def _formats_at(path: Path) -> dict[str, WeightFormat]:
    table = weight_formats_table(path)
    out: dict[str, WeightFormat] = {}
    for row in table.itertuples(index=False):
        fmt = WeightFormat(
            name=row.name.strip().lower(),
            aliases=tuple(a.strip().lower() for a in row.aliases.split(";") if a.strip()),
            bits_per_weight=float(row.bits_per_weight),
            block_size=int(float(row.block_size)),
            layout=row.layout,
            dequant_ops=float(row.dequant_ops),
            executes_as=row.executes_as,
            source=row.source,
        )
        out[fmt.name] = fmt
    return out


def weight_formats() -> dict[str, WeightFormat]:
    """Every shipped format by name."""
    return dict(_formats())


def _executable_names() -> list[str]:
    return [n for n, f in _formats().items() if f.executable]


def weight_format(name: Any) -> WeightFormat:
    """The format named ``name`` (or one of its aliases), case-insensitively."""
    if isinstance(name, WeightFormat):
        return name
    formats = _formats()
    if isinstance(name, str):
        key = name.strip().lower()
        for fmt in formats.values():
            if key == fmt.name or key in fmt.aliases:
                return fmt
    raise WeightFormatError(f"unknown weight format {name!r}; valid: {', '.join(formats)} "
                            f"(aliases: {', '.join(a for f in formats.values() for a in f.aliases)})")


def _module_prefixes(fqn: str) -> list[str]:
    """``layers.0.mlp.experts.w1`` → ``[layers, layers.0, layers.0.mlp, layers.0.mlp.experts]``."""
    parts = fqn.split(".")[:-1]
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _quantizable(program: Program, name: str) -> bool:
    val = next((n.meta.get("val") for n in program.graph.nodes if n.name == name), None)
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point and name not in set(program.buffer_mutations.values())


def check_quantize_rules(rules: Any) -> list[tuple[WeightFormat, str, str, str]]:
    """``quantize``'s rules parsed (rule 1): ``(format, kind, glob, pattern)`` tuples; a
    malformed mapping, an unknown format or a bad pattern is a ``WeightFormatError``."""
    if not isinstance(rules, Mapping) or not rules:
        raise WeightFormatError(
            f"rules must be a non-empty mapping {{format: [patterns]}} such as "
            f"{{'q4_k': ['module:layers.*.mlp.experts']}}, got {describe(rules)}"
        )
    try:
        return parse_patterns(rules, weight_format)
    except PlacementError as exc:
        raise WeightFormatError(f"bad quantize rules: {exc}") from None


def quantize(program: Program, rules: Mapping[str, Any], *, strict: bool = False) -> Program:
    """``program`` with its constants stored in the formats ``rules`` choose (module rules).

    Args:
        program: from ``capture`` (real or shape-only).
        rules: ``{format: [pattern, ...]}``, e.g. ``{"q4_k": ["module:layers.*.mlp.experts"],
            "q8_0": ["aten.linear"]}``; patterns as ``place`` takes them (rule 1).
        strict: raise instead of warning when a pattern decides no constant.
    """
    if not isinstance(program, Program):
        raise WeightFormatError(f"program must be a Program from workbench.capture, got {describe(program)}")
    check_flag(strict, "strict")
    parsed = check_quantize_rules(rules)
    users = {n.name: n.users for n in program.graph.nodes if n.op == "placeholder"}
    chosen: dict[str, WeightFormat] = {}
    used: set[str] = set()
    for name, fqn in program.constants.items():
        if not _quantizable(program, name):
            continue
        ops = [(op_name(u), packet_name(u)) for u in users.get(name, ()) if u.op == "call_function"]
        paths = _module_prefixes(fqn)
        decision = most_specific(parsed, lambda kind, glob: pattern_rank(kind, glob, name=name, paths=paths, ops=ops))
        if decision is None:
            continue
        fmt, original = decision.key, decision.pattern
        if decision.conflict is not None:
            raise WeightFormatError(decision.conflict_message(f"constant {fqn!r} ({name})", lambda f: f.name))
        chosen[name] = fmt
        used.add(original)
    missed = list(dict.fromkeys(o for _f, _k, _g, o in parsed if o not in used))
    if missed:
        report_no_claim(
            f"quantize rule pattern(s) {', '.join(map(repr, missed))} decided the format of no floating-point "
            f"constant of {len(program.constants)}",
            strict,
            stacklevel=2,
        )
    stored = {**program.stored_formats, **{n: f.stored() for n, f in chosen.items()}}
    values = {n: t for n, t in program.dequantized.items() if n not in chosen}
    if not program.shape_only:
        for name, fmt in chosen.items():
            if fmt.executable:
                values[name] = fmt.round_trip(program.constant_tensor_as_captured(name))
    return replace(program, stored_formats=stored, dequantized=values)


def dequantized(program: Program) -> dict[str, torch.Tensor]:
    """Constant FQN → the values a run of ``program`` computes with for each quantized
    constant the sim executor can run (rule 3); load them into the model for its eager
    reference (``model.load_state_dict(..., strict=False)``)."""
    return {program.constants[n]: t for n, t in program.dequantized.items()}


@functools.lru_cache(maxsize=1)
def _row_pickers() -> frozenset:
    """Ops whose result is rows of their first argument, stored as it is (a weight's
    experts picked by id stay in the weight's format)."""
    aten = torch.ops.aten
    return frozenset({aten.index_select.default, aten.index.Tensor, aten.gather.default, aten.clone.default,
                      aten.contiguous.default, aten.alias.default, SELECT_ROWS})  # fmt: skip


def stored_source(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The value whose elements ``node``'s result holds stored the same way (rule 2):
    the source of a view, a copy or a row pick with the same dtype; else None."""
    if node.op != "call_function":
        return None
    if is_view_op(node.target):
        source = aliased_input(node)
    elif is_copy_target(node.target) or node.target in _row_pickers():
        source = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
    else:
        return None
    if source is None:
        return None
    out, src = value_of(node), value_of(source)
    same = isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor) and out.dtype == src.dtype
    return source if same else None


def mark_stored_values(graph: torch.fx.Graph, stored: Mapping[str, StoredFormat]) -> int:
    """Rule 2, for propagation: record each constant placeholder's format from ``stored``
    (placeholder name → format) and follow it, in graph order, to every view, copy and row
    pick of a stored value. Returns how many nodes carry a format."""
    if not stored:
        return 0
    marked = 0
    for node in graph.nodes:
        fact = stored.get(node.name) if node.op == "placeholder" else None
        if fact is None:
            source = stored_source(node)
            fact = stored_format(source) if source is not None else None
        if fact is not None:
            mark_stored_format(node, fact)
            marked += 1
    return marked
