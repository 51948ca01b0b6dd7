"""The tutorial notebooks keep the shape a learner relies on, read from their stored outputs
(nothing is executed here; nbval runs them):

1. the first cell states the one question the notebook answers;
2. every code cell has prose right before it, except the exercises' hidden answer cells;
3. the notebook ends with a verdict, "What you learned", and exercises whose answers are
   code cells hidden in the notebook (``jupyter.source_hidden``) that assert them — at
   least two;
4. no stored output is an error or stderr noise (warnings), and no line of printed text
   is wider than a notebook shows (tables render as HTML; widgets and figures as pictures).
"""

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_TEXT_WIDTH = 120  # characters of one printed line


def _is_answer(cell) -> bool:
    return "exercise-answer" in cell.metadata.get("tags", [])


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
