"""The shipped model's fitted terms and held-out predictions, kept as data: made once, read in a blink.

``regime_model()`` fits every term to the published runs and predicts every run twice held
out (without its source, without its engine): about a minute and a half of CPU, the same
answer every time for the same code and tables. ``data/runtimes/regime_evidence.json``
keeps that answer with a hash of what it was made from; ``regime_model()`` reads it when
the hash is the inputs' own and fits afresh when it is not — a stale file is never used.
``write_evidence_file(model)`` (``make evidence``) writes it again.

Rules:

1. The inputs (``evidence_inputs_hash``): every ``.py`` file of the package except the
   application, the views, the machine planner and ``__main__`` (which never feed a fit), and every
   file under ``data/`` except its READMEs, the prospective log, its runs and this file itself.
2. The file is JSON data, at most 8 MiB, read and never executed; every number is finite,
   every record has its fields. A file that breaks a rule, or whose hash is not the
   inputs', is not used (``read_evidence_file`` returns None and says why).
3. Writing is atomic (``atomic_files``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Optional

from ..atomic_files import write_text
from ..file_reading import parse_json, read_regular_file
from .evidence import OutOfSample
from .published_errors import AnchorError
from .published_runs import FittedTerm

__all__ = ["EvidenceFile", "evidence_file_path", "evidence_inputs_hash", "read_evidence_file", "write_evidence_file"]

_ROOT = Path(__file__).resolve().parents[2]
_SKIPPED_CODE = ("app", "views", "machine_plan")
_SKIPPED_DATA = ("published/prospective.csv", "published/prospective_runs.csv", "runtimes/regime_evidence.json")
_MAX_BYTES = 8 << 20


def evidence_file_path() -> Path:
    """The shipped file: ``data/runtimes/regime_evidence.json``."""
    return _ROOT / "data" / "runtimes" / "regime_evidence.json"


def evidence_inputs_hash() -> str:
    """Rule 1: a hash of the code and tables a fit reads (16 hex digits)."""
    code = [p for p in (_ROOT / "workbench").rglob("*.py")
            if p.relative_to(_ROOT / "workbench").parts[0] not in _SKIPPED_CODE and p.name != "__main__.py"]  # fmt: skip
    data = [p for p in (_ROOT / "data").rglob("*") if p.is_file() and p.suffix != ".md"
            and p.relative_to(_ROOT / "data").as_posix() not in _SKIPPED_DATA]  # fmt: skip
    digest = hashlib.sha256()
    for path in sorted(code + data):
        if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(_ROOT).parts):
            continue
        digest.update(path.relative_to(_ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class EvidenceFile:
    """What a fit and its held-out predictions produced (the parts of a ``RegimeModel``
    that are not the runtime profiles)."""

    inputs: str  # evidence_inputs_hash() of what made it
    fits: dict[str, float]
    terms: tuple[FittedTerm, ...]
    out_of_sample: tuple[OutOfSample, ...]
    out_of_runtime: tuple[OutOfSample, ...]


def _plain(record: Any) -> dict[str, Any]:
    return {k: (list(map(list, v)) if k == "settings" else list(v) if isinstance(v, tuple) else v)
            for k, v in dataclasses.asdict(record).items()}  # fmt: skip


def write_evidence_file(evidence: EvidenceFile, path: Optional[Path] = None) -> Path:
    """Rule 3: ``evidence`` written to ``path`` (default: the shipped file)."""
    path = path if path is not None else evidence_file_path()
    body = {"format": "workbench-regime-evidence/1", "inputs": evidence.inputs, "fits": dict(evidence.fits),
            "terms": [_plain(t) for t in evidence.terms], "out_of_sample": [_plain(o) for o in evidence.out_of_sample],
            "out_of_runtime": [_plain(o) for o in evidence.out_of_runtime]}  # fmt: skip
    write_text(path, json.dumps(body, indent=0, allow_nan=False) + "\n", "the evidence file")
    return path


def _number(value: Any, where: str, optional: bool = False) -> Optional[float]:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AnchorError(f"{where} is {str(value)[:40]!r}, not a finite number")
    return float(value)


def _texts(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AnchorError(f"{where} is not a list of texts")
    return tuple(value)


def _out_of_sample(item: Any, where: str) -> OutOfSample:
    if not isinstance(item, dict):
        raise AnchorError(f"{where} is not an object")
    text = {f: item.get(f, "") for f in ("id", "regime", "source", "why", "runtime", "gpu", "host", "family",
                                          "placement", "engine")}  # fmt: skip
    if not all(isinstance(v, str) for v in text.values()):
        raise AnchorError(f"{where}: a text field is not text")
    settings = item.get("settings", [])
    if not isinstance(settings, list) or not all(isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s)
                                                  for s in settings):  # fmt: skip
        raise AnchorError(f"{where}: settings are [name, value] pairs of texts")
    published = _number(item.get("published"), f"{where} published")
    assert published is not None
    return OutOfSample(published=published, predicted=_number(item.get("predicted"), f"{where} predicted", True),
                       settings=tuple((a, b) for a, b in settings), **text)  # fmt: skip


def _term(item: Any, where: str) -> FittedTerm:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("prior"), bool):
        raise AnchorError(f"{where}: a term has a name (text) and prior (true or false)")
    errors = item.get("loo_errors")
    if not isinstance(errors, list):
        raise AnchorError(f"{where}: loo_errors is a list of numbers")
    value = _number(item.get("value"), f"{where} value")
    assert value is not None
    return FittedTerm(item["name"], value, _texts(item.get("rows"), f"{where} rows"),
                      tuple(float(_number(e, f"{where} loo_errors") or 0.0) for e in errors), item["prior"])  # fmt: skip


def read_evidence_file(path: Optional[Path] = None) -> tuple[Optional[EvidenceFile], str]:
    """Rule 2: the file at ``path`` (default: the shipped one) when it is whole and its
    hash is the inputs' own; else (None, why not)."""
    path = path if path is not None else evidence_file_path()
    if not path.exists():
        return None, f"no evidence file at {path.name}"
    try:
        body = parse_json(read_regular_file(path, "evidence file", AnchorError, _MAX_BYTES), "evidence file", AnchorError)
        if not isinstance(body, dict) or body.get("format") != "workbench-regime-evidence/1":
            raise AnchorError("not a workbench-regime-evidence/1 object")
        inputs = evidence_inputs_hash()
        if body.get("inputs") != inputs:
            return None, f"{path.name} was made from other code or tables ({body.get('inputs')!r}, now {inputs!r})"
        fits = body.get("fits")
        if not isinstance(fits, dict):
            raise AnchorError("fits is not an object")
        return EvidenceFile(
            inputs, {str(k): float(_number(v, f"fit {k}") or 0.0) for k, v in fits.items()},
            tuple(_term(t, f"term {i}") for i, t in enumerate(_list(body, "terms"))),
            tuple(_out_of_sample(o, f"out_of_sample {i}") for i, o in enumerate(_list(body, "out_of_sample"))),
            tuple(_out_of_sample(o, f"out_of_runtime {i}") for i, o in enumerate(_list(body, "out_of_runtime"))),
        ), ""
    except AnchorError as exc:
        return None, f"{path.name} is not used: {exc}"


def _list(body: dict[str, Any], key: str) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list):
        raise AnchorError(f"{key} is not a list")
    return value
