"""check_prediction: an unanswered prediction asks, a wrong one is described without
giving the answer away, a right one (within its tolerance) passes."""

import pytest

from workbench.app.exercises import check_prediction, mismatch


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
