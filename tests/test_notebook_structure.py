"""The tutorial notebooks keep the shape a learner relies on, read from their stored outputs
(nothing is executed here; nbval runs them):

1. the first cell states the one question the notebook answers;
2. every code cell has prose right before it, except the exercises' hidden answer cells;
3. the notebook ends with a verdict, "What you learned", and at least two exercises;
4. no stored output is an error or stderr noise (warnings), and no line of printed text
   is wider than a notebook shows (tables render as HTML; widgets and figures as pictures);
5. each exercise is a prediction the learner writes and a hidden check: a visible cell
   ``prediction = ...`` (stored unanswered), then the check cell — source and outputs
   hidden — that computes the answer, asserts what must hold of it and ends with
   ``mistake = check_prediction(prediction, answer, exercise=N)`` and
   ``assert mistake is None, mistake``; its stored output is only the
   line asking for the prediction, and no output before the exercise shows its answer
   (the check cell's ``exercise.reveals``: renderings of the answer, which
   ``test_notebook_exercises`` checks against the computed answer).
"""

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_TEXT_WIDTH = 120  # characters of one printed line


def _is_answer(cell) -> bool:
    return "exercise-answer" in cell.metadata.get("tags", [])


def _is_prediction(cell) -> bool:
    return "exercise-prediction" in cell.metadata.get("tags", [])


def _all_text(cell) -> str:
    """Every output a reader could see as text: streams, plain text and HTML."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts += [output.data.get("text/plain", ""), output.data.get("text/html", "")]
    return "\n".join(parts)


def _printed_text(cell):
    """The text outputs a reader sees as text: streams, and plain-text results that have no
    richer form (a DataFrame's HTML, a figure, a widget)."""
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            yield output.text
        elif output.output_type in ("execute_result", "display_data"):
            data = output.data
            if not {"text/html", "image/png", "application/vnd.jupyter.widget-view+json"} & set(data):
                yield data.get("text/plain", "")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_question_first_and_answer_last(path):
    """Rules 1 and 3: a question in the first cell; a verdict, what was learned, and at least
    two hidden answer cells that assert something."""
    nb = nbformat.read(path, as_version=4)
    assert "question" in nb.cells[0].source.lower(), f"{path.name}: the first cell states no question"
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for heading in ("**Verdict:**", "### What you learned", "### Exercises"):
        assert heading in prose, f"{path.name}: no {heading!r}"
    answers = [c for c in nb.cells if c.cell_type == "code" and _is_answer(c)]
    assert len(answers) >= 2, f"{path.name}: {len(answers)} exercise answer cells"
    for cell in answers:
        assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, f"{path.name}: answer {cell.id} not hidden"
        assert "assert " in cell.source, f"{path.name}: answer {cell.id} checks nothing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_is_a_prediction_and_a_hidden_check(path):
    """Rule 5: per exercise, a visible ``prediction = ...`` cell (stored unanswered) right
    before its check cell; the check's source and outputs hidden, numbered in order,
    ending in the assert on ``check_prediction(prediction, answer, exercise=N)``, its stored output only
    the request for a prediction."""
    nb = nbformat.read(path, as_version=4)
    checks = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _is_answer(c)]
    for number, i in enumerate(checks, start=1):
        cell, before = nb.cells[i], nb.cells[i - 1]
        assert _is_prediction(before), f"{path.name}: exercise {number} has no prediction cell before its check"
        assert re.search(r"^prediction = \.\.\.(\s|$)", before.source, re.M), (
            f"{path.name}: exercise {number}'s prediction cell is not stored unanswered (prediction = ...)")
        hidden = cell.metadata.get("jupyter", {})
        assert hidden.get("source_hidden") is True and hidden.get("outputs_hidden") is True, (
            f"{path.name}: exercise {number}'s check does not hide its source and outputs")
        assert cell.metadata.get("exercise", {}).get("number") == number, f"{path.name}: check {cell.id} misnumbered"
        assert f"mistake = check_prediction(prediction, answer, exercise={number}" in cell.source, (
            f"{path.name}: exercise {number}'s check does not check the prediction against the answer")
        assert cell.source.rstrip().endswith("assert mistake is None, mistake"), (
            f"{path.name}: exercise {number}'s check does not fail on a wrong prediction")
        stored = _all_text(cell).strip()
        assert stored == "" or stored.startswith(f"Exercise {number}: write your prediction"), (
            f"{path.name}: exercise {number}'s check stores an output other than the request: {stored[:120]!r}")
    predictions = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _is_prediction(c)]
    assert [i + 1 for i in predictions] == checks, f"{path.name}: a prediction cell without its check"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_answer_is_printed_before_its_exercise(path):
    """Rule 5: no output above an exercise shows what its check cell's ``reveals`` lists
    (renderings of the answer, matched as whole tokens)."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not _is_answer(cell):
            continue
        exercise = cell.metadata.get("exercise", {})
        earlier = "\n".join(_all_text(c) for c in nb.cells[: i - 1] if c.cell_type == "code")
        for shown in exercise.get("reveals", []):
            pattern = r"(?<![\w.])" + re.escape(shown) + r"(?![\w.]|\.\d)"
            found = re.search(pattern, earlier)
            assert found is None, (
                f"{path.name}: exercise {exercise.get('number')}'s answer {shown!r} is printed before it: "
                f"...{earlier[max(0, found.start() - 80):found.end() + 40]!r}...")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_code_cell_is_led_in(path):
    """Rule 2: each code cell follows a markdown cell (the answer cells follow the exercises)."""
    nb = nbformat.read(path, as_version=4)
    bare = [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and not _is_answer(c) and i > 0 and nb.cells[i - 1].cell_type != "markdown"]
    assert not bare, f"{path.name}: code cells {bare} have no prose before them"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_fit_and_carry_no_noise(path):
    """Rule 4: no error or stderr output is stored, and no printed line is wider than
    MAX_TEXT_WIDTH."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{path.name} cell {i}: an error is stored"
            assert not (output.output_type == "stream" and output.name == "stderr"), (
                f"{path.name} cell {i}: stderr output: {output.text[:200]!r}")
        for text in _printed_text(cell):
            wide = [line for line in text.splitlines() if len(line) > MAX_TEXT_WIDTH]
            assert not wide, f"{path.name} cell {i}: a line of {len(wide[0])} characters: {wide[0][:80]!r}..."
