"""One question, one answer: a figure that two notebooks show is the same figure in both.

Each test reads the stored outputs of the notebooks (what a reader sees; nbval checks that
they are what the code computes today) and compares the figure where each shows it.
"""

import re
from pathlib import Path

import nbformat

from workbench.app.measured_decode import measured_decode

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _outputs(notebook: str) -> list[str]:
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") + out.get("data", {}).get("text/plain", ""))
    return texts


def _block(notebook: str, header: str) -> list[str]:
    """The lines after ``header`` in the first output that shows it."""
    for text in _outputs(notebook):
        if header in text:
            return text[text.index(header):].splitlines()[1:]
    raise AssertionError(f"{notebook} shows no output with {header!r}")


def _first_numbers(lines: list[str]) -> dict[str, float]:
    """strategy → the first number of its row, for the rows right after a header."""
    found = {}
    for line in lines:
        m = re.match(r"^(\w[\w+]*)\s+(\d+(?:\.\d+)?)", line)
        if m:
            found[m.group(1)] = float(m.group(2))
        elif found:
            break
    return found


def test_the_measured_decode_spans_are_the_same_in_03_and_04():
    """Notebooks 03 and 04 show the committed measured span of every strategy, each the
    same number (one reader, ``measured_decode``, and the file's figures)."""
    want = {s: round(v) for s, v in measured_decode("h200").spans["measured_us"].items()}
    in_03 = _first_numbers(_block("03_copy_kernels.ipynb", "tiny MoE decode step on"))
    in_04 = _first_numbers(_block("04_moe_walkthrough.ipynb", "measured µs"))
    assert {s: round(v) for s, v in in_03.items()} == want
    assert {s: round(v) for s, v in in_04.items()} == want


def test_the_full_size_all_on_device_speed_is_the_same_in_04_and_06():
    """The full-size model with everything on the GPU, PCIe Gen5: notebook 04's table and
    notebook 06's answer at the largest budget give one tokens/s."""
    header = next(line for text in _outputs("04_moe_walkthrough.ipynb") for line in text.splitlines()
                  if "tok/s pcie_gen5" in line and "resident_cpu_GiB" in line)
    row = next(line for text in _outputs("04_moe_walkthrough.ipynb") for line in text.splitlines()
               if header in text and re.match(r"^\d+\s+all_on_device\s", line))
    names = re.findall(r"tok/s \w+|\S+", header)  # "tok/s pcie_gen5" is one column name
    values = row.split()[1:]  # the row's index first
    in_04 = float(values[names.index("tok/s pcie_gen5")])
    answer = next(line for line in _block("06_capacity_planning.ipynb", "budget_GiB")
                  if re.match(r"^\d+\s+80\s+pcie_gen5\s+all_on_device\s", line))
    in_06 = float(answer.split()[4])
    assert round(in_04, 2) == round(in_06, 2), (in_04, in_06)
