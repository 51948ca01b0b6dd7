"""The notebooks' exercise checks refuse a wrong prediction and accept the right one.

For each notebook, one fresh kernel of this interpreter runs the cells every exercise check
needs (the check cell's ``exercise.needs``: cell ids, run in notebook order — not the whole
notebook), then, per exercise, the check cell's own source three times: with the prediction
unanswered (``...``: it must pass and ask for one), with a deliberately wrong prediction
derived from the answer (it must raise an ``AssertionError`` whose message starts
"Exercise N"), and with the answer itself (it must pass). The answer is what
``exercise_answer`` computes from the very objects the check cell passed to
``check_exercise`` (recorded when it ran unanswered), so the notebook itself never holds
it. It also checks that each of the cell's ``exercise.reveals`` (what
``test_notebook_structure`` looks for above the exercise) renders the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import ipykernel.kernelspec
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# Defined in the kernel: a prediction that must fail (far from the answer, same shape), the
# texts an answer prints as, and a run of a check's source that reports how it ended.
HARNESS = r'''
import json as __json

import workbench.app.exercises as __exercises

__calls = []
__check_exercise = __exercises.check_exercise


def __recording(notebook, number, prediction, **objects):
    __calls.append((notebook, number, objects))
    return __check_exercise(notebook, number, prediction, **objects)


__exercises.check_exercise = __recording  # the check cells import it when they run

def __wrong(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + max(1, abs(value))
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + " (not this)"
    if isinstance(value, dict):
        first = next(iter(value))
        return {**value, first: __wrong(value[first])}
    if isinstance(value, (list, tuple)):
        return type(value)([__wrong(value[0]), *value[1:]])
    raise TypeError(f"no wrong prediction for a {type(value).__name__}")

def __renderings(value):
    if isinstance(value, dict):
        return [r for v in value.values() for r in __renderings(v)]
    if isinstance(value, (list, tuple)):
        return [r for v in value for r in __renderings(v)]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [str(value)]
    found = {str(value), f"{value:,}"}
    if isinstance(value, float):
        found |= {f"{value:.{d}f}" for d in range(4)} | {f"{value:,.{d}f}" for d in range(4)} | {f"{value:.{d}%}" for d in range(3)}
    return sorted(found)

def __run(source, guess):
    global prediction
    prediction = guess
    try:
        exec(compile(source, "<exercise check>", "exec"), globals())
    except AssertionError as exc:  # the check's own assert on the prediction says "Exercise N: ..."
        return "raised " + type(exc).__name__ + ": " + str(exc).split(" ", 1)[0]
    return "passed"
'''


class _CurrentInterpreter(KernelSpecManager):
    """Every kernel name is an ipykernel of the interpreter running the tests (as nbval's
    ``--nbval-current-env``)."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())


def _exercises(nb) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code" and "exercise-check" in c.metadata.get("tags", [])]


def _probe(check) -> str:
    number = check.metadata["exercise"]["number"]
    return (
        f"__source = {check.source!r}\n"
        f"__result = {{'number': {number}, 'unanswered': __run(__source, ...)}}\n"
        "__notebook, __number, __objects = __calls[-1]\n"
        "answer = __exercises.exercise_answer(__notebook, __number, **__objects)\n"
        "__result['right'] = __run(__source, answer)\n"
        "__result['wrong'] = __run(__source, __wrong(answer))\n"
        "__result['renderings'] = __renderings(answer)\n"
        "print('EXERCISE-RESULT ' + __json.dumps(__result))"
    )


def _results(cell) -> dict:
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    line = next(line for line in text.splitlines() if line.startswith("EXERCISE-RESULT "))
    return json.loads(line.removeprefix("EXERCISE-RESULT "))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_refuses_a_wrong_prediction_and_accepts_the_answer(path):
    nb = nbformat.read(path, as_version=4)
    checks = _exercises(nb)
    assert len(checks) >= 2, f"{path.name}: fewer than two exercises"
    needed = {cid for check in checks for cid in check.metadata["exercise"]["needs"]}
    by_id = {c.get("id"): c for c in nb.cells}
    unknown = needed - set(by_id)
    assert not unknown, f"{path.name}: exercise needs cells that are not in the notebook: {sorted(unknown)}"
    setup = [nbformat.v4.new_code_cell(c.source) for c in nb.cells if c.get("id") in needed]
    probes = [nbformat.v4.new_code_cell(_probe(check)) for check in checks]
    run = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(HARNESS), *setup, *probes], metadata=nb.metadata)
    manager = KernelManager(kernel_spec_manager=_CurrentInterpreter(), kernel_name="python3")
    NotebookClient(run, km=manager, timeout=600, resources={"metadata": {"path": str(path.parent)}}).execute()
    for check, probe in zip(checks, probes):
        got = _results(probe)
        n = got["number"]
        assert got["unanswered"] == "passed", f"{path.name} exercise {n}: an unanswered prediction failed the check"
        assert got["right"] == "passed", f"{path.name} exercise {n}: the computed answer itself fails the check"
        assert got["wrong"] == "raised AssertionError: Exercise", (
            f"{path.name} exercise {n}: a wrong prediction passed the check ({got['wrong']})")
        for shown in check.metadata["exercise"].get("reveals", []):
            assert shown in got["renderings"], (
                f"{path.name} exercise {n}: reveals {shown!r} is not how the answer prints ({got['renderings'][:8]})")
