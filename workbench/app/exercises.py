"""The tutorial notebooks' exercises: a learner's prediction checked against the value
the notebook computes.

Each exercise of a notebook is two cells: a visible one where the learner writes
``prediction = ...`` (it ships as ``...``, unanswered), and a hidden one that computes
the true ``answer``, asserts what must hold of it, and ends with::

    mistake = check_prediction(prediction, answer, exercise=N)
    assert mistake is None, mistake

so a wrong prediction fails the cell with an ``AssertionError`` raised by the notebook's
own ``assert`` (the package itself raises no ``AssertionError``).

Rules:
  1. An unanswered prediction (``...``) prints one line that asks for it and returns
     None: the notebook still runs top to bottom.
  2. An answered prediction must match the answer's shape and values: a mapping the same
     keys, a list or tuple the same length, each number within ``rel_tol``/``abs_tol``
     (``math.isclose``), a bool the same bool, a string the same words (case and outer
     spaces aside). A mismatch returns a message that says where it is off, but not the
     answer: the learner may try again, or open the hidden cell to read it.
  3. A right prediction prints one line saying so and returns None.
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["check_prediction", "mismatch"]


def mismatch(prediction: Any, answer: Any, *, rel_tol: float = 0.0, abs_tol: float = 0.0, where: str = "") -> Optional[str]:
    """Where ``prediction`` differs from ``answer`` (rule 2), or None when it matches."""
    at = f" at {where}" if where else ""
    if isinstance(answer, bool) or isinstance(prediction, bool):
        return None if isinstance(prediction, bool) and prediction == answer else f"a different yes/no{at}"
    if isinstance(answer, (int, float)):
        if not isinstance(prediction, (int, float)):
            return f"a number is wanted{at}, not {type(prediction).__name__}"
        close = math.isclose(float(prediction), float(answer), rel_tol=rel_tol, abs_tol=abs_tol)
        return None if close else f"a different number{at}"
    if isinstance(answer, str):
        if not isinstance(prediction, str):
            return f"a word is wanted{at}, not {type(prediction).__name__}"
        return None if prediction.strip().casefold() == answer.strip().casefold() else f"a different word{at}"
    if isinstance(answer, dict):
        if not isinstance(prediction, dict) or set(prediction) != set(answer):
            return f"a dict with the keys {sorted(map(str, answer))} is wanted{at}"
        for key in answer:
            off = mismatch(prediction[key], answer[key], rel_tol=rel_tol, abs_tol=abs_tol, where=f"{where}[{key!r}]")
            if off:
                return off
        return None
    if isinstance(answer, (list, tuple)):
        if not isinstance(prediction, (list, tuple)) or len(prediction) != len(answer):
            return f"a list of {len(answer)} values is wanted{at}"
        for i, (p, a) in enumerate(zip(prediction, answer)):
            off = mismatch(p, a, rel_tol=rel_tol, abs_tol=abs_tol, where=f"{where}[{i}]")
            if off:
                return off
        return None
    return None if prediction == answer else f"a different value{at}"


def check_prediction(
    prediction: Any, answer: Any, *, exercise: int, rel_tol: float = 0.0, abs_tol: float = 0.0
) -> Optional[str]:
    """Rules 1-3: None (after a one-line request when unanswered, a one-line confirmation
    when right), or what is wrong with the prediction."""
    if prediction is Ellipsis:
        print(f"Exercise {exercise}: write your prediction in the cell above (prediction = ...), then run this cell again.")
        return None
    off = mismatch(prediction, answer, rel_tol=rel_tol, abs_tol=abs_tol)
    if off is not None:
        return (
            f"Exercise {exercise}: prediction = {prediction!r} is not what the notebook computes ({off}). "
            "Think again, or open this hidden cell to read the answer."
        )
    print(f"Exercise {exercise}: right.")
    return None
