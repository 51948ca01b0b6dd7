"""Argument checks shared by the public entry points.

Every public function checks its arguments before it does any work, with these helpers,
so a wrong argument is an error at the boundary that names the parameter, says what it
got and what is valid — never a ``TypeError`` from deep inside.

Rules:
1. A flag is a ``bool``: ``"False"``, ``"no"``, ``0`` and ``None`` are refused, never
   read by their truthiness.
2. A choice is one of a listed set of strings; anything else (another string, a list, a
   number) is refused with the valid ones listed.
3. A count is an ``int`` that is not a ``bool``, within a stated range.
4. Wrong types raise ``ArgumentTypeError``, wrong values ``ArgumentValueError``; both
   are ``WorkbenchError`` and also ``TypeError`` / ``ValueError``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from .errors import ArgumentTypeError, ArgumentValueError

__all__ = ["check_callable", "check_choice", "check_flag", "check_int", "check_optional_flag", "describe", "power_of_two"]


def describe(value: Any, limit: int = 60) -> str:
    """``value`` as an error message shows it: its type and a shortened repr."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(value).__name__} {text}"


def check_flag(value: Any, name: str) -> bool:
    """``value`` if it is a ``bool`` (rule 1)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True or False, got {describe(value)}")
    return value


def check_optional_flag(value: Any, name: str) -> Optional[bool]:
    """``value`` if it is a ``bool`` or None (None: the documented default)."""
    if value is not None and not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True, False or None, got {describe(value)}")
    return value


def check_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices`` (rule 2)."""
    valid = tuple(choices)
    listed = ", ".join(repr(c) for c in valid)
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a string, one of {listed}; got {describe(value)}")
    if value not in valid:
        raise ArgumentValueError(f"unknown {name} {value!r}; valid values are {listed}")
    return value


def check_int(value: Any, name: str, low: int, high: Optional[int] = None) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]`` (rule 3)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an integer, got {describe(value)}")
    if value < low or (high is not None and value > high):
        valid = f"{low}..{high}" if high is not None else f">= {low}"
        raise ArgumentValueError(f"{name} must be in {valid}, got {value}")
    return value


def power_of_two(value: Any, name: str, low: int, high: int) -> int:
    """``value`` if it is a power of two in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be a power of two in {low}..{high} (an integer), got {describe(value)}")
    if not low <= value <= high or value & (value - 1):
        raise ArgumentValueError(f"{name} must be a power of two in {low}..{high} (1, 2, 4, 8, ...), got {value}")
    return value


def check_callable(value: Any, name: str, what: str) -> Callable[..., Any]:
    """``value`` if it can be called; ``what`` says what it is called with."""
    if not callable(value):
        raise ArgumentTypeError(f"{name} must be a callable {what}, got {describe(value)}")
    return value
