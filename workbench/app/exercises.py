"""The tutorial notebooks' exercises: a learner's prediction checked against an answer the
notebook never shows.

Each exercise of a notebook is two cells: one where the learner writes
``prediction = ...`` (it ships as ``...``, unanswered), and a check::

    mistake = check_exercise("03", 1, prediction, weight_bytes=weight_bytes, compute_us=compute_us)
    assert mistake is None, mistake

The answer is computed by ``exercise_answers`` from the notebook's objects passed by
keyword; the check says only whether the prediction matches, so no rendering of the
notebook — static or live — shows the answer. A wrong prediction fails the cell with an
``AssertionError`` raised by the notebook's own ``assert`` (the package raises none). The
worked solutions are the solution notebooks, ``notebooks/solutions/NN_*.ipynb``.

Rules:
  1. An unanswered prediction (``...``) prints one line that asks for it and returns
     None, without computing the answer: the notebook still runs top to bottom, quickly.
  2. An answered prediction must match the answer's shape and values: a mapping the same
     keys, a list or tuple the same length, each number within ``rel_tol``/``abs_tol``
     (``math.isclose``), a bool the same bool, a string the same words (case and outer
     spaces aside). A mismatch returns a message that says where it is off, but not the
     answer, and where the worked solution is.
  3. A right prediction prints one line saying so and returns None.
  4. An unknown exercise, or objects other than the ones its answer takes, is refused
     with an ``ExerciseError`` naming what is valid.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from .exercise_answers import EXERCISES, SOLUTION_NOTEBOOKS, Exercise, ExerciseError

__all__ = ["ExerciseError", "check_exercise", "check_prediction", "exercise_answer", "mismatch"]


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


def _exercise(notebook: str, number: int, objects: dict[str, Any]) -> Exercise:
    """Rule 4: the exercise, once ``objects`` are exactly the ones its answer takes."""
    found = EXERCISES.get((notebook, number)) if isinstance(notebook, str) and isinstance(number, int) else None
    if found is None:
        valid = ", ".join(f"({n!r}, {k})" for n, k in EXERCISES)
        raise ExerciseError(f"no exercise ({notebook!r}, {number!r}); the exercises are {valid}")
    if set(objects) != set(found.takes):
        wanted = ", ".join(found.takes) or "no objects"
        raise ExerciseError(f"exercise {number} of notebook {notebook} takes {wanted} (by keyword), "
                            f"not {', '.join(sorted(objects)) or 'none'}")  # fmt: skip
    return found


def exercise_answer(notebook: str, number: int, **objects: Any) -> Any:
    """The answer to exercise ``number`` of notebook ``notebook`` ("03"), computed from the
    notebook's ``objects`` (for tests and the solution notebooks; the notebooks never print it)."""
    found = _exercise(notebook, number, objects)
    return found.answer(**objects)


def check_exercise(notebook: str, number: int, prediction: Any, **objects: Any) -> Optional[str]:
    """Rules 1-4: None (after a one-line request when unanswered, a one-line confirmation
    when right), or what is wrong with the prediction — never the answer."""
    found = _exercise(notebook, number, objects)
    if prediction is Ellipsis:  # asked for by check_prediction, before the answer is computed
        return check_prediction(prediction, None, exercise=number)
    return check_prediction(prediction, found.answer(**objects), exercise=number, rel_tol=found.rel_tol,
                            abs_tol=found.abs_tol, solutions=f"notebooks/solutions/{SOLUTION_NOTEBOOKS[notebook]}.ipynb")


def check_prediction(
    prediction: Any, answer: Any, *, exercise: int, rel_tol: float = 0.0, abs_tol: float = 0.0, solutions: str = ""
) -> Optional[str]:
    """Rules 1-3 for an answer already computed: None (after a one-line request when
    unanswered, a one-line confirmation when right), or what is wrong with the prediction."""
    if prediction is Ellipsis:
        print(f"Exercise {exercise}: write your prediction in the cell above (prediction = ...), then run this cell again.")
        return None
    off = mismatch(prediction, answer, rel_tol=rel_tol, abs_tol=abs_tol)
    if off is not None:
        where = f"; the worked solution is in {solutions}" if solutions else ""
        return f"Exercise {exercise}: prediction = {prediction!r} is not what the notebook computes ({off}). Think again{where}."
    print(f"Exercise {exercise}: right.")
    return None
