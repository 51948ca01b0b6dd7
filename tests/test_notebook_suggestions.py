"""Every piece of code a notebook's "What to try next" suggests runs as written.

A suggestion is an inline code span (or a fenced block) of that cell that is a Python call
(it parses, and calls something) or a shell command (``python …``). The cell's metadata
``suggestions`` lists each: ``run`` (executed by this test), or ``not_run`` with the reason
(a GPU, minutes of CPU, a file of the reader's own, a template whose ``...`` the reader
fills in). ``needs`` names the notebook cells whose state the suggestions use, and ``given``
is code that binds a template's placeholders (``my_model``) to the notebook's own objects.

The slow test runs, per notebook, one fresh kernel of this interpreter: the needed cells
in notebook order, ``given``, then each Python suggestion (it must not raise) and each
shell command from the repository root (exit status 0).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import ipykernel.kernelspec
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
_SPAN = re.compile(r"```(?:python)?\n(.*?)```|`([^`\n]+)`", re.S)


class _CurrentInterpreter(KernelSpecManager):
    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())


def _is_shell(span: str) -> bool:
    return span.startswith("python ")


def _is_python_call(span: str) -> bool:
    try:
        tree = ast.parse(span)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Call) for node in ast.walk(tree))


def suggestions_of(source: str) -> list[str]:
    """The suggestions of a "What to try next" cell, in order."""
    spans = [textwrap.dedent(block).strip() if block else span.strip() for block, span in _SPAN.findall(source)]
    return [s for s in spans if _is_shell(s) or _is_python_call(s)]


def _try_next(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## What to try next")]
    assert len(cells) == 1, f"{path.name}: {len(cells)} 'What to try next' cells"
    return cells[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_suggestion_is_run_or_says_why_not(path):
    """Each suggestion of the cell is listed under ``run`` or ``not_run`` (with a reason),
    and each listed one is in the cell as written."""
    cell = _try_next(path)
    listed = cell.metadata.get("suggestions", {})
    run, not_run = listed.get("run", []), listed.get("not_run", {})
    found = suggestions_of(cell.source)
    missing = [s for s in found if s not in run and s not in not_run]
    assert not missing, f"{path.name}: suggestions neither run nor excused: {missing}"
    stale = [s for s in [*run, *not_run] if s not in found]
    assert not stale, f"{path.name}: listed suggestions that are not in the cell: {stale}"
    assert all(isinstance(r, str) and len(r) > 10 for r in not_run.values()), f"{path.name}: a not_run without a reason"


def test_the_span_rule_finds_calls_and_commands_not_words():
    """A call or a shell command is a suggestion; a word, a keyword argument or a path is not."""
    source = ("Try `partitioner=\"fx\"` in `wb.place`, or `wb.place(prog, rules)`; run `python -m workbench plan` "
              "or read `data/parts.csv`.\n```python\nx = f(1)\n```")
    assert suggestions_of(source) == ["wb.place(prog, rules)", "python -m workbench plan", "x = f(1)"]


_PROBE = r'''
import json as __json, traceback as __traceback
__outcomes = []
for __code in __json.loads({codes!r}):
    try:
        exec(compile(__code, "<suggestion>", "exec"), globals())
        __outcomes.append("ok")
    except BaseException as __exc:
        __outcomes.append(type(__exc).__name__ + ": " + str(__exc)[:300])
print("SUGGESTIONS " + __json.dumps(__outcomes))
'''


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_suggestion_runs(path):
    """Each ``run`` suggestion runs: Python ones in a kernel holding the notebook's needed
    state, without raising; shell ones from the repository root, with exit status 0."""
    nb = nbformat.read(path, as_version=4)
    listed = _try_next(path).metadata.get("suggestions", {})
    python = [s for s in listed.get("run", []) if not _is_shell(s)]
    shell = [s for s in listed.get("run", []) if _is_shell(s)]
    if python:
        needed = set(listed.get("needs", []))
        unknown = needed - {c.get("id") for c in nb.cells}
        assert not unknown, f"{path.name}: suggestions need cells that are not in the notebook: {sorted(unknown)}"
        setup = [nbformat.v4.new_code_cell(c.source) for c in nb.cells if c.get("id") in needed]
        given = [nbformat.v4.new_code_cell(listed["given"])] if listed.get("given") else []
        probe = nbformat.v4.new_code_cell(_PROBE.format(codes=json.dumps(python)))
        run = nbformat.v4.new_notebook(cells=[*setup, *given, probe], metadata=nb.metadata)
        manager = KernelManager(kernel_spec_manager=_CurrentInterpreter(), kernel_name="python3")
        NotebookClient(run, km=manager, timeout=900, resources={"metadata": {"path": str(path.parent)}}).execute()
        text = "".join(o.get("text", "") for o in probe.outputs if o.output_type == "stream")
        line = next(line for line in text.splitlines() if line.startswith("SUGGESTIONS "))
        outcomes = json.loads(line.removeprefix("SUGGESTIONS "))
        failed = {s: o for s, o in zip(python, outcomes) if o != "ok"}
        assert not failed, f"{path.name}: suggestions that fail as written: {failed}"
    for command in shell:
        argv = [sys.executable, *command.split()[1:]]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{path.name}: `{command}` exited {done.returncode}: {done.stderr[-1500:]}"
