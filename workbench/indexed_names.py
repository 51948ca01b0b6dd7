"""Qualified module and parameter names with list indices (``model.layers.17.mlp.experts.3``):
the one reading of the ``<list>.<index>`` pattern every stage uses.

Rules:

1. An index is a path segment of decimal digits: ``layers.3`` is entry 3 of the module
   list ``layers``.
2. ``indices(path)``: every index of ``path``, in order (``layers.3.experts.5`` → [3, 5]).
3. ``ends_with_index(path)``: the path names an entry of a list (``layers.3``).
4. ``wildcard(path)``: each index after the first segment written ``*`` (``layers.3.mlp`` →
   ``layers.*.mlp``); a leading index (a ``Sequential``'s own child ``0``) is kept.
5. ``last_entry(path)``: ``(list, index, rest)`` of the last index followed by a named
   segment (``layers.3.experts.5.w1`` → ``("layers.3.experts", 5, "w1")``), or None.
6. ``list_entries(path)``: ``(list prefix, index)`` for each index that follows a named
   segment and precedes another (``model.layers.17.mlp`` → [("model.layers.", 17)]): the
   prefix, its dot included, names the list wherever it sits in the path.
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["ends_with_index", "indices", "last_entry", "list_entries", "wildcard"]

_INDEX = re.compile(r"(?:^|\.)(\d+)(?=\.|$)")
_TRAILING_INDEX = re.compile(r"(^|\.)\d+$")
_INNER_INDEX = re.compile(r"\.\d+(?=\.|$)")
_LAST_ENTRY = re.compile(r"^(?P<list>.+)\.(?P<index>\d+)\.(?P<rest>[^\d].*)$")
_LIST_ENTRY = re.compile(r"(?:^|\.)([A-Za-z_][A-Za-z0-9_]*)\.(\d+)\.")


def indices(path: str) -> list[int]:
    """Rule 2."""
    return [int(i) for i in _INDEX.findall(path)]


def ends_with_index(path: str) -> bool:
    """Rule 3."""
    return _TRAILING_INDEX.search(path) is not None


def wildcard(path: str) -> str:
    """Rule 4: ``layers.3.mlp`` → ``layers.*.mlp``."""
    return _INNER_INDEX.sub(".*", path)


def last_entry(path: str) -> Optional[tuple[str, int, str]]:
    """Rule 5."""
    m = _LAST_ENTRY.match(path)
    return (m["list"], int(m["index"]), m["rest"]) if m is not None else None


def list_entries(path: str) -> list[tuple[str, int]]:
    """Rule 6."""
    return [(path[: m.start(2)], int(m.group(2))) for m in _LIST_ENTRY.finditer(path)]
