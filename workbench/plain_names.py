"""Plain names: what names a part, a runtime profile, a fitted term, a measured preset or a
calibration — one rule for every table and file name of the machine.

Rules:

1. A plain name is lowercase letters, digits, ``_``, ``.`` and ``-``, starting with a letter
   or a digit: never a path (no separator, no leading dot), never empty, never a flag.
2. ``is_plain_name`` answers for any value (a non-string is not a name); ``PLAIN_NAME_RULE``
   is the rule in words, for error messages.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["PLAIN_NAME_RULE", "is_plain_name"]

_PLAIN_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
PLAIN_NAME_RULE = "lowercase letters, digits, '_', '.', '-', starting with a letter or digit (no path separator)"


def is_plain_name(value: Any) -> bool:
    """Rule 1."""
    return isinstance(value, str) and _PLAIN_NAME.fullmatch(value) is not None
