"""The error base: every error the workbench raises on purpose derives from ``WorkbenchError``.

Each stage's errors also derive from the built-in exception that fits them
(``ValueError`` for a bad value, ``TypeError`` for a wrong type, ``RuntimeError`` for a
state the runtime cannot be in), so ``except ValueError`` keeps working, and
``except WorkbenchError`` catches everything the workbench raised deliberately — and
nothing else: an exception that is not a ``WorkbenchError`` is a bug, or came from a
library underneath.
"""

from __future__ import annotations

__all__ = ["ArgumentTypeError", "ArgumentValueError", "WorkbenchError", "WorkbenchWarning"]


class WorkbenchError(Exception):
    """Base of every error the workbench raises on purpose."""


class WorkbenchWarning(UserWarning):
    """Base of every warning the workbench issues."""


class ArgumentTypeError(WorkbenchError, TypeError):
    """A public function was given an argument of the wrong type; the message names the
    argument, what it got and what it takes."""


class ArgumentValueError(WorkbenchError, ValueError):
    """A public function was given an argument of the right type but an invalid value;
    the message names the argument and the valid values."""
