"""The solution notebooks work each exercise out and pass it through the exercise's own check,
read from their stored outputs (nbval executes them, as it does every notebook):

1. every registered exercise is checked in its notebook and solved in its solution
   notebook, and nothing else is;
2. a solution derives its answer: it never calls the answer functions, and its check cell
   hands ``derived`` (computed above it) to ``check_exercise``, its output compared by nbval
   and stored as "Exercise N: right.";
3. a solution notebook reads as the tutorials do: prose before every code cell, no error or
   stderr output, no printed line wider than 120 characters.
"""

import re
from pathlib import Path

import nbformat
import pytest

from workbench.app.exercise_answers import EXERCISES, SOLUTION_NOTEBOOKS

ROOT = Path(__file__).resolve().parent.parent / "notebooks"
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
CHECK = re.compile(r'^mistake = check_exercise\("(\d\d)", (\d+), derived[,)]', re.M)


def _text(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))


def _checked(path: Path, tag: str, pattern: re.Pattern) -> set[tuple[str, int]]:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and (tag in c.metadata.get("tags", []) or not tag)]
    return {(m[1], int(m[2])) for c in cells for m in pattern.finditer(c.source)}


def test_every_exercise_is_checked_and_solved():
    """Rule 1: the exercises the notebooks check, the ones the solutions solve, and the
    registered ones are the same set."""
    in_notebooks, in_solutions = set(), set()
    for notebook, name in SOLUTION_NOTEBOOKS.items():
        in_notebooks |= _checked(ROOT / f"{name}.ipynb", "exercise-check",
                                 re.compile(r'check_exercise\("(\d\d)", (\d+), prediction'))
        in_solutions |= _checked(ROOT / "solutions" / f"{name}.ipynb", "", CHECK)
    assert in_notebooks == set(EXERCISES) == in_solutions
    assert [p.stem for p in SOLUTIONS] == sorted(SOLUTION_NOTEBOOKS.values())


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_each_solution_is_derived_and_checked_right(path):
    """Rule 2: no answer function is called; each exercise has its heading, a ``derived``
    computed before its check, and the check's stored output says it is right."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not any("exercise_answer" in c.source or "exercise_answers" in c.source for c in code), (
        f"{path.name}: a solution reads the answer instead of deriving it")
    headings = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for i, cell in enumerate(code):
        found = CHECK.search(cell.source)
        if not found:
            continue
        number = int(found[2])
        assert found[1] == path.name[:2] and f"## Exercise {number}" in headings, f"{path.name}: exercise {number}"
        assert cell.source.startswith("# NBVAL_CHECK_OUTPUT"), f"{path.name}: exercise {number}'s check is not compared"
        assert any(re.search(r"^derived = ", c.source, re.M) for c in code[:i]), (
            f"{path.name}: exercise {number} is checked before anything is derived")
        assert _text(cell).strip() == f"Exercise {number}: right.", (
            f"{path.name}: exercise {number}'s stored check says {_text(cell).strip()!r}")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_each_solution_reads_as_a_tutorial(path):
    """Rule 3: prose before each code cell; no error or stderr output; lines of at most 120."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert i > 0 and nb.cells[i - 1].cell_type == "markdown", f"{path.name}: code cell {i} has no prose before it"
        for output in cell.outputs:
            assert output.output_type != "error" and output.get("name") != "stderr", f"{path.name}: cell {i}: {output}"
        wide = [line for line in _text(cell).splitlines() if len(line) > 120]
        assert not wide, f"{path.name}: cell {i} prints a line wider than 120 characters: {wide[0]!r}"
