"""Model families: the architecture facts a published run's row does not state.

``model_families()`` reads ``data/published/model_facts.json``: per family, the phrases
that name it in a run's model column, its layers, routed experts, top-k, one expert's
parameters, hidden size, KV-cache bytes per token, and GGUF files whose size a run's
format names without stating it — every family and file with its source.

Rules:

1. The file is JSON data, at most 1 MiB, read and checked on load, read again when it
   changes: ``families`` is a list of objects; each has every field, numbers whole and
   in range (1 <= layers <= 10,000; 0 <= first_dense < layers; 1 <= top_k <=
   num_experts <= 100,000; expert_params, hidden and kv_bytes_per_token > 0), ``names``
   non-empty literal phrases, a source for the family and each file. A file that breaks a
   rule is refused with an ``AnchorError`` naming the family and the field.
2. ``family_of(text)`` is the family one of whose phrases the text names
   (``run_text.find_name``), or None.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..file_reading import parse_json, read_regular_file
from .published_errors import AnchorError
from ..name_phrases import find_name

__all__ = ["ModelFamily", "family_of", "model_families", "model_facts_path"]

_LIMITS = {"layers": (1, 10_000), "first_dense": (0, 10_000), "num_experts": (1, 100_000), "top_k": (1, 100_000),
           "expert_params": (1, 1e13), "hidden": (1, 1e6), "kv_bytes_per_token": (0, 1e9)}  # fmt: skip


@dataclass(frozen=True)
class ModelFamily:
    """A model family's facts (rule 1)."""

    name: str
    names: str  # phrases naming it in a run's model column, "|"-separated
    layers: int
    first_dense: int
    num_experts: int
    top_k: int
    expert_params: int
    hidden: int
    kv_bytes_per_token: float
    files: tuple[tuple[str, float, float], ...]  # (format, bytes, params)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense


def model_facts_path() -> Path:
    """The shipped facts file: the repository's ``data/published/model_facts.json``."""
    return Path(__file__).resolve().parents[2] / "data" / "published" / "model_facts.json"


def model_families(path: Optional[Union[str, Path]] = None) -> tuple[ModelFamily, ...]:
    """The model families of the facts file (default: the shipped one), checked (rule 1)."""
    target = os.path.abspath(path if path is not None else model_facts_path())
    try:
        info = os.stat(target)
        key = (target, info.st_size, info.st_mtime_ns)
    except OSError:
        key = (target, -1, -1)
    return _families(key)


@functools.lru_cache(maxsize=4)
def _families(key: tuple[str, int, int]) -> tuple[ModelFamily, ...]:
    path = Path(key[0])
    data = parse_json(read_regular_file(path, "model facts file (JSON)", AnchorError, max_bytes=1 << 20),
                      f"model facts file {path}", AnchorError)
    shape = ("{'families': [{name, names, layers, first_dense, num_experts, top_k, expert_params, hidden, "
             "kv_bytes_per_token, files: [{format, bytes, params, source}], source}]}")  # fmt: skip
    if not isinstance(data, dict) or not isinstance(data.get("families"), list):
        raise AnchorError(f"{path} is not a model facts file: it holds {shape}")
    return tuple(_family(path, i, f, shape) for i, f in enumerate(data["families"]))


def _whole(path: Path, where: str, f: dict[str, Any], name: str) -> int:
    value = f.get(name)
    low, high = _LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or not low <= value <= high:  # fmt: skip
        raise AnchorError(f"{path}: {where}: {name} must be a whole number in [{low:g}, {high:g}], got {value!r}")
    return int(value)


def _family(path: Path, i: int, f: Any, shape: str) -> ModelFamily:
    if not isinstance(f, dict):
        raise AnchorError(f"{path}: family {i} is not an object; the file holds {shape}")
    where = f"family {str(f.get('name', i))[:60]!r}"
    name, names = f.get("name"), f.get("names")
    if not isinstance(name, str) or not name.strip():
        raise AnchorError(f"{path}: family {i} has no name")
    if not isinstance(names, str) or not all(p.strip() for p in names.split("|")):
        raise AnchorError(f"{path}: {where}: names must be phrases separated by '|'")
    if not str(f.get("source", "")).strip():
        raise AnchorError(f"{path}: {where} has no source")
    counts = {k: _whole(path, where, f, k) for k in ("layers", "first_dense", "num_experts", "top_k", "expert_params",
                                                       "hidden", "kv_bytes_per_token")}  # fmt: skip
    if counts["first_dense"] >= counts["layers"] or counts["top_k"] > counts["num_experts"]:
        raise AnchorError(f"{path}: {where}: needs first_dense < layers and top_k <= num_experts, got "
                          f"{counts['first_dense']} of {counts['layers']} layers, top-{counts['top_k']} of "
                          f"{counts['num_experts']} experts")
    files = f.get("files")
    if not isinstance(files, list):
        raise AnchorError(f"{path}: {where}: files must be a list of {{format, bytes, params, source}}")
    parsed = []
    for x in files:
        ok = isinstance(x, dict) and isinstance(x.get("format"), str) and str(x.get("source", "")).strip()
        sizes = [x.get(k) for k in ("bytes", "params")] if isinstance(x, dict) else []
        if not ok or not all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in sizes):
            raise AnchorError(f"{path}: {where}: a file needs a format, positive bytes and params, and a source")
        parsed.append((str(x["format"]), float(x["bytes"]), float(x["params"])))
    return ModelFamily(name, names, counts["layers"], counts["first_dense"], counts["num_experts"], counts["top_k"],
                       counts["expert_params"], counts["hidden"], float(counts["kv_bytes_per_token"]), tuple(parsed))


def family_of(text: object, families: Optional[tuple[ModelFamily, ...]] = None) -> Optional[ModelFamily]:
    """The family whose phrase ``text`` names (rule 2), or None."""
    table = families if families is not None else model_families()
    found = find_name(text, [(p.strip(), fam.name) for fam in table for p in fam.names.split("|")])
    return next((f for f in table if f.name == found), None)
