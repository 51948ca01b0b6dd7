"""Loading a saved program (``torch.export.save``'s archive) as data: nothing in it can run.

``torch.export.load`` trusts its input: it unpickles sample inputs (retrying with the
unrestricted unpickler when the restricted one refuses), pickled weights and constants,
and custom objects; it hands size expressions to ``sympy.sympify`` (``eval``); it
resolves a node's target to any attribute of ``torch``; it keeps guard code that
``ExportedProgram.module()`` later ``exec``s; and it loads compiled (AOTInductor)
libraries. A plan file comes from anywhere, so before the archive reaches
``torch.export.load`` it is read with the same reader torch uses and checked:

1. Members torch would execute are refused: compiled artefacts (``data/aotinductor/``),
   legacy pickled weight or constant files, any weight or constant stored by pickle,
   and custom-object constants. Workbench plans never hold any of them.
2. Sample inputs are loaded here with ``torch.load(weights_only=True)``; if that refuses
   them, the archive is refused, so torch's own restricted load of the same bytes
   succeeds and its unrestricted retry never happens.
3. Every size expression (``expr_str``) is tokenised and may hold only numbers,
   identifier-like string literals (symbol names), arithmetic and comparison operators
   and names from a fixed list of sympy constructors and assumptions: no attribute
   access, no subscripts, no other names. Guard code (``guards_code``, Python that
   ``module()`` would ``exec``) must be empty, as the workbench's captures leave it.
4. After loading, every ``call_function`` node's target must be an operator
   (``OpOverload``, a higher-order operator), a function of ``operator`` or ``math``, or a
   ``torch.sym_*`` function; anything else is refused before the graph could run.
5. Any refusal is a ``PlanFileError`` naming the member and what was wrong.
6. ``torch.export.save`` and ``torch.export.load`` keep process-wide state while they run
   (a pickling reducer for fake tensors, the current deserializer): threads saving or
   loading at once would clash (torch's "Refusing to stomp on existing FakeTensor
   reducer"), so every save (``program_bytes``) and load here takes one lock in turn.
"""

from __future__ import annotations

import io
import json
import operator
import re
import threading
import tokenize
from typing import Any, Iterator

import torch
from torch.export.pt2_archive import constants as pt2

from .archive import PlanFileError

__all__ = ["load_program", "program_bytes"]

#: Rule 6: one torch.export save or load at a time in this process.
_SERIALIZING = threading.Lock()

#: Names a size expression may use (rule 3): the sympy constructors ``srepr`` writes for
#: the expressions torch.export saves, and the assumptions a symbol carries.
_EXPR_NAMES = frozenset(
    """Symbol Integer Rational Float Mul Add Pow Max Min Mod Abs floor ceiling sqrt
    Eq Ne Lt Le Gt Ge Equality Unequality StrictLessThan StrictGreaterThan LessThan GreaterThan
    And Or Not true false True False None oo Infinity NegativeInfinity IntInfinity NegativeIntInfinity
    Zero One NegativeOne Half BooleanTrue BooleanFalse Piecewise ITE
    FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv LShift RShift
    PowByNatural FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat
    TruncToInt RoundToInt RoundDecimal ToFloat Identity
    positive negative nonnegative nonpositive nonzero zero integer real finite infinite
    even odd rational commutative precision""".split()
)
_EXPR_OPS = frozenset("( ) , = + - * / // % ** < > <= >= == != & | ~".split())
_SYMBOL_LITERAL = re.compile(r"""^(['"])[A-Za-z][A-Za-z0-9_]*\1$""")


def _refuse(what: str, problem: str) -> PlanFileError:
    return PlanFileError(f"{what} is refused: {problem}; a plan file holds data only")


def _expr_strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "expr_str":
                yield inner if isinstance(inner, str) else repr(inner)
            else:
                yield from _expr_strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _expr_strings(inner)


def _check_expression(text: str, what: str) -> None:
    """Rule 3."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError) as exc:
        raise _refuse(what, f"size expression {text[:80]!r} is not an expression ({exc})") from None
    for token in tokens:
        kind, value = token.type, token.string
        if kind in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER) or (kind == tokenize.OP and value in _EXPR_OPS):
            continue
        if kind == tokenize.NUMBER and re.fullmatch(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", value):
            continue
        if kind == tokenize.NAME and value in _EXPR_NAMES:
            continue
        if kind == tokenize.STRING and _SYMBOL_LITERAL.match(value):
            continue
        raise _refuse(what, f"size expression {text[:80]!r} holds {value[:40]!r}, which is not a number, symbol or size operator")


def _config(reader: Any, name: str, what: str) -> dict:
    try:
        document = json.loads(reader.get_record(name))
        entries = document["config"]
    except Exception as exc:  # a damaged config: torch would fail on it too
        raise PlanFileError(f"{what} is corrupt: {name} cannot be read ({type(exc).__name__})") from None
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        raise PlanFileError(f"{what} is corrupt: {name} is not a map of payload entries")
    return entries


def _check_archive(data: bytes, what: str) -> None:
    """Rules 1-3, on the records as torch's own reader sees them."""
    try:
        reader = torch._C.PyTorchFileReader(io.BytesIO(data))
        records = list(reader.get_all_records())
    except Exception as exc:  # the reader raises RuntimeError on anything not a zip of its form
        raise PlanFileError(f"{what} is corrupt: not a saved program ({type(exc).__name__})") from None
    for name in records:
        if name.startswith((pt2.AOTINDUCTOR_DIR, pt2.MTIA_DIR, pt2.XL_MODEL_WEIGHTS_DIR)):
            raise _refuse(what, f"it holds compiled code ({name})")
    prefix, suffix = pt2.MODELS_FILENAME_FORMAT.split("{}")
    models = [n[len(prefix) : -len(suffix)] for n in records if n.startswith(prefix) and n.endswith(suffix)]
    for model in models:
        for legacy in (f"{pt2.WEIGHTS_DIR}{model}.pt", f"{pt2.CONSTANTS_DIR}{model}.pt"):
            if legacy in records:
                raise _refuse(what, f"{legacy} is a pickled file (the legacy layout)")
        for config_format, directory in (
            (pt2.WEIGHTS_CONFIG_FILENAME_FORMAT, "weight"),
            (pt2.CONSTANTS_CONFIG_FILENAME_FORMAT, "constant"),
        ):
            config_name = config_format.format(model)
            if config_name not in records:
                continue  # torch refuses a missing config itself
            for fqn, entry in _config(reader, config_name, what).items():
                path_name = entry.get("path_name")
                if entry.get("use_pickle") is not False:
                    raise _refuse(what, f"{directory} {fqn!r} is stored by pickle")
                if directory == "constant" and not (
                    isinstance(path_name, str) and path_name.startswith(pt2.TENSOR_CONSTANT_FILENAME_PREFIX)
                ):
                    raise _refuse(what, f"constant {fqn!r} is not a tensor ({path_name!r})")
        samples = pt2.SAMPLE_INPUTS_FILENAME_FORMAT.format(model)
        if samples in records:
            payload = reader.get_record(samples)
            if payload:
                try:
                    torch.load(io.BytesIO(payload), weights_only=True)
                except Exception as exc:  # the restricted unpickler refuses with many types
                    raise _refuse(what, f"{samples} is not plain tensor data ({type(exc).__name__})") from None
        try:
            graph = json.loads(reader.get_record(f"{prefix}{model}{suffix}"))
        except Exception as exc:  # torch would fail on it too
            raise PlanFileError(f"{what} is corrupt: {prefix}{model}{suffix} is not JSON ({type(exc).__name__})") from None
        for text in _expr_strings(graph):
            _check_expression(text, what)
        if isinstance(graph, dict) and graph.get("guards_code"):
            raise _refuse(what, "it holds guard code, which torch would execute")


_ALLOWED_MODULES = frozenset({"_operator", "operator", "math"})


def _check_targets(ep: torch.export.ExportedProgram, what: str) -> None:
    """Rule 4."""
    for node in ep.graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
            continue
        module = getattr(target, "__module__", None)
        name = getattr(target, "__name__", "")
        if module in _ALLOWED_MODULES or (target is operator.getitem):
            continue
        if module == "torch" and name.startswith("sym_") and getattr(torch, name, None) is target:
            continue
        raise _refuse(what, f"node {node.name!r} calls {target!r}, which is not an operator")


def program_bytes(ep: torch.export.ExportedProgram) -> bytes:
    """``ep`` as ``torch.export.save`` writes it (rule 6: one thread at a time)."""
    buffer = io.BytesIO()
    with _SERIALIZING:
        torch.export.save(ep, buffer)
    return buffer.getvalue()


def load_program(data: bytes, what: str) -> torch.export.ExportedProgram:
    """The program saved in ``data`` (``torch.export.save``'s bytes), loaded only after the
    checks of the module rules; ``what`` names it in errors."""
    _check_archive(data, what)
    try:
        with _SERIALIZING:  # rule 6
            ep = torch.export.load(io.BytesIO(data))
    except Exception as exc:  # torch.export.load raises many types on a damaged program
        raise PlanFileError(f"{what} cannot be loaded: {type(exc).__name__}: {exc}") from None
    _check_targets(ep, what)
    return ep
