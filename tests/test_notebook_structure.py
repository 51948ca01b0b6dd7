"""The tutorial notebooks keep the shape a learner relies on, read from their stored outputs
(nothing is executed here; nbval runs them):

1. the first cell states the one question the notebook answers;
2. every code cell has prose right before it, except the exercises' check cells;
3. the notebook ends with a verdict, "What you learned", and at least two exercises;
4. no stored output is an error or stderr noise (warnings), and no line of printed text
   is wider than a notebook shows (tables render as HTML; widgets and figures as pictures);
5. each exercise is a prediction the learner writes and a check that never shows the
   answer: a cell ``prediction = ...`` (stored unanswered), then the check cell, which
   computes nothing itself — it is ``mistake = check_exercise("NN", N, prediction, ...)``
   and ``assert mistake is None, mistake`` — and stores only the line asking for the
   prediction; the exercise's text names its worked solution; no output before the
   exercise shows its answer (the check cell's ``exercise.reveals``: renderings of the
   answer, which ``test_notebook_exercises`` checks against the computed answer).
"""

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_TEXT_WIDTH = 120  # characters of one printed line


def _is_check(cell) -> bool:
    return "exercise-check" in cell.metadata.get("tags", [])


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
    two exercise checks."""
    nb = nbformat.read(path, as_version=4)
    assert "question" in nb.cells[0].source.lower(), f"{path.name}: the first cell states no question"
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for heading in ("**Verdict:**", "### What you learned", "### Exercises"):
        assert heading in prose, f"{path.name}: no {heading!r}"
    checks = [c for c in nb.cells if c.cell_type == "code" and _is_check(c)]
    assert len(checks) >= 2, f"{path.name}: {len(checks)} exercise check cells"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_is_a_prediction_and_a_check_that_shows_no_answer(path):
    """Rule 5: per exercise, a ``prediction = ...`` cell (stored unanswered) right before its
    check cell; the check numbered in order, nothing in it but the call of
    ``check_exercise`` with this notebook's number and the assert that fails on a wrong
    prediction, its stored output only the request for a prediction; the exercise's text
    names its solution notebook, which exists."""
    nb = nbformat.read(path, as_version=4)
    checks = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _is_check(c)]
    for number, i in enumerate(checks, start=1):
        cell, before, text = nb.cells[i], nb.cells[i - 1], nb.cells[i - 2]
        assert _is_prediction(before), f"{path.name}: exercise {number} has no prediction cell before its check"
        assert re.search(r"^prediction = \.\.\.(\s|$)", before.source, re.M), (
            f"{path.name}: exercise {number}'s prediction cell is not stored unanswered (prediction = ...)")
        assert cell.metadata.get("exercise", {}).get("number") == number, f"{path.name}: check {cell.id} misnumbered"
        code = [line for line in cell.source.splitlines() if line.strip() and not line.startswith("#")]
        call = f'mistake = check_exercise("{path.name[:2]}", {number}, prediction'
        assert code[0] == "from workbench.app.exercises import check_exercise" and len(code) == 3, (
            f"{path.name}: exercise {number}'s check does more than call check_exercise: {code}")
        assert code[1].startswith(call) and code[2] == "assert mistake is None, mistake", (
            f"{path.name}: exercise {number}'s check is not {call}, ...) and the assert on it")
        solution = re.search(r"solutions/([0-9][0-9]_\w+\.ipynb)", text.source)
        assert text.cell_type == "markdown" and solution and (path.parent / "solutions" / solution[1]).is_file(), (
            f"{path.name}: exercise {number}'s text names no solution notebook that exists")
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
        if cell.cell_type != "code" or not _is_check(cell):
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
            if c.cell_type == "code" and not _is_check(c) and i > 0 and nb.cells[i - 1].cell_type != "markdown"]
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
