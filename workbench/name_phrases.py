"""Names found in free text by their phrases, literally: the one matcher every table of
named things (parts, runtime profiles, model families) uses on a published run's words.

Rules:

1. A name is found by its phrases, literally (never as a pattern): case-insensitive, not
   inside a longer word (the characters around it are not letters or digits), longest
   match first (a phrase may join several with ``+``, all to be found), and not when
   the next word names a variant of it (``Ti``, ``Super``,
   ``D``, ``Mobile``, ``Laptop``, ``Max-Q``: another part).
2. Every text read is at most ``MAX_CELL_CHARS`` characters; matching is linear in the
   text's length times the phrases tried.
3. The order the phrases are given in never decides: when two names match equally many
   characters and none matches more, the text names neither (None: it is ambiguous).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

__all__ = ["MAX_CELL_CHARS", "find_name", "words"]

#: The longest cell a published run may have (a quote is at most 200 characters).
MAX_CELL_CHARS = 2000
_VARIANT_WORDS = frozenset({"ti", "super", "d", "mobile", "laptop", "max-q"})
_LETTER = re.compile(r"[A-Za-z0-9]")


def _text(value: object) -> str:
    return value[:MAX_CELL_CHARS] if isinstance(value, str) else ""


def _free_at(text: str, start: int, end: int) -> bool:
    """Rule 1: the phrase at ``text[start:end]`` is not inside a longer word and not
    followed by a variant word."""
    if start > 0 and _LETTER.match(text[start - 1]):
        return False
    if end < len(text) and _LETTER.match(text[end]):
        return False
    rest = text[end:end + 12].lstrip(" ")
    next_word = rest.split(" ", 1)[0].rstrip(",;:)").lower() if rest and text[end:end + 1] == " " else ""
    return next_word not in _VARIANT_WORDS


def _found(text: str, lowered: str, phrase: str) -> bool:
    key = phrase.strip().lower()
    if not key:
        return False
    start = lowered.find(key)
    while start >= 0:
        if _free_at(text, start, start + len(key)):
            return True
        start = lowered.find(key, start + 1)
    return False


def find_name(value: object, phrases: Iterable[tuple[str, str]]) -> Optional[str]:
    """The name whose phrase is found in ``value`` (rule 1), or None; ``phrases``:
    ``(phrase, name)`` pairs, a phrase being words or several joined by ``+``, all of
    which must be found (``ExecuTorch+per-kernel``); the most characters matched wins."""
    text = _text(value)
    lowered = text.lower()
    best: tuple[int, str] = (0, "")
    tied = False
    for phrase, name in phrases:
        parts = phrase.split("+")
        if all(_found(text, lowered, p) for p in parts):
            score = sum(len(p.strip()) for p in parts)
            if score > best[0]:
                best, tied = (score, name), False
            elif score == best[0] and name != best[1]:
                tied = True  # rule 3
    return None if tied else (best[1] or None)


def words(value: object) -> list[str]:
    """The words of ``value``: letters, digits and ``_``, lower-cased."""
    return re.findall(r"[a-z0-9_]+", _text(value).lower())
