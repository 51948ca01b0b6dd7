"""check_prediction and check_exercise: an unanswered prediction asks, a wrong one is
described without giving the answer away (and points to the worked solution), a right one
(within its tolerance) passes; an unknown exercise or the wrong objects are refused."""

from pathlib import Path

import pytest

from workbench.app.exercise_answers import EXERCISES, SOLUTION_NOTEBOOKS, Exercise
from workbench.app.exercises import ExerciseError, check_exercise, check_prediction, exercise_answer, mismatch


def test_an_unanswered_prediction_asks_for_one(capsys):
    assert check_prediction(..., {"h2d": 2}, exercise=3) is None
    assert capsys.readouterr().out.strip() == (
        "Exercise 3: write your prediction in the cell above (prediction = ...), then run this cell again.")


def test_a_right_prediction_passes(capsys):
    assert check_prediction({"d2d": 0, "h2d": 2}, {"h2d": 2, "d2d": 0}, exercise=1) is None
    assert check_prediction(4.1, 4.03, exercise=2, rel_tol=0.05) is None
    assert check_prediction(" Static_Hot ", "static_hot", exercise=2) is None
    assert check_prediction([6, True], (6, True), exercise=2) is None
    assert capsys.readouterr().out.count("right.") == 4


@pytest.mark.parametrize(
    "prediction, answer, where",
    [
        ({"d2d": 1, "h2d": 2}, {"d2d": 0, "h2d": 2}, "['d2d']"),
        ({"h2d": 2}, {"d2d": 0, "h2d": 2}, "keys"),
        (4.5, 4.03, "number"),
        ("lru", "static_hot", "word"),
        (1, True, "yes/no"),
        ([6], [6, 5], "2 values"),
        ("6", 6, "number is wanted"),
    ],
)
def test_a_wrong_prediction_is_described_without_the_answer(prediction, answer, where, capsys):
    message = check_prediction(prediction, answer, exercise=2, rel_tol=0.05)
    assert message is not None and where in message and message.startswith("Exercise 2: prediction = ")
    assert repr(answer) not in message.replace(f"prediction = {prediction!r}", "")
    assert capsys.readouterr().out == ""  # nothing printed: the notebook's assert shows the message


def test_tolerances_are_those_given():
    assert mismatch(105, 100, rel_tol=0.05) is None
    assert mismatch(106, 100, rel_tol=0.05) is not None
    assert mismatch(0.52, 0.5, abs_tol=0.03) is None
    assert mismatch(2, 2.0) is None and mismatch(3, 2) is not None


def test_check_exercise_asks_without_computing_the_answer(monkeypatch, capsys):
    """An unanswered prediction is asked for; the answer, which may take seconds, is not computed."""
    def never(**objects):
        raise RuntimeError("the answer was computed for an unanswered prediction")
    monkeypatch.setitem(EXERCISES, ("01", 1), Exercise("01", 1, never, ("prog",)))
    assert check_exercise("01", 1, ..., prog=None) is None
    assert capsys.readouterr().out.startswith("Exercise 1: write your prediction")


def test_check_exercise_names_the_solution_never_the_answer(monkeypatch, capsys):
    """A wrong prediction's message points to the worked solution and does not contain the
    answer; a prediction within the exercise's tolerance is right."""
    monkeypatch.setitem(EXERCISES, ("03", 2), Exercise("03", 2, lambda: {"c_us": 0.7031, "ratio_256KiB": 1.1062}, rel_tol=0.05))
    message = check_exercise("03", 2, {"c_us": 0.9, "ratio_256KiB": 1.1})
    assert message is not None and "notebooks/solutions/03_copy_kernels.ipynb" in message
    assert "0.7031" not in message and "1.1062" not in message
    assert check_exercise("03", 2, {"c_us": 0.72, "ratio_256KiB": 1.08}) is None
    assert capsys.readouterr().out.strip() == "Exercise 2: right."


@pytest.mark.parametrize(
    "notebook, number, objects, match",
    [
        ("08", 1, {}, r"no exercise \('08', 1\); the exercises are \('01', 1\)"),
        ("3", 1, {}, r"no exercise \('3', 1\)"),
        ("03", "1", {}, r"no exercise \('03', '1'\)"),
        ("03", 1, {"weight_bytes": 1}, "takes weight_bytes, compute_us .by keyword., not weight_bytes"),
        ("04", 1, {"full": 1}, "takes no objects"),
    ],
)
def test_an_unknown_exercise_or_wrong_objects_are_refused(notebook, number, objects, match):
    """An exercise that does not exist, or objects other than the ones its answer takes,
    is an ExerciseError naming what is valid — before anything is computed or printed."""
    with pytest.raises(ExerciseError, match=match):
        check_exercise(notebook, number, ..., **objects)
    with pytest.raises(ExerciseError, match=match):
        exercise_answer(notebook, number, **objects)


def test_every_notebook_has_a_solution_notebook_for_its_exercises():
    """Each notebook with exercises names a solution notebook that exists beside it."""
    root = Path(__file__).resolve().parent.parent / "notebooks"
    for notebook in {n for n, _ in EXERCISES}:
        name = SOLUTION_NOTEBOOKS[notebook]
        assert name.startswith(notebook) and (root / f"{name}.ipynb").is_file()
        assert (root / "solutions" / f"{name}.ipynb").is_file()
