"""CSV files the workbench writes are safe to open in a spreadsheet and read back exactly.

Properties:
- No text cell or column name of a written file starts a formula (``=``, ``+``, ``-``,
  ``@``, tab, carriage return): such text is written with a leading ``'``; text that is a
  plain number, and numeric cells (negative numbers included), are written unchanged.
- Reading a written file back and restoring its cells gives the table that was written,
  whatever its text (hypothesis).
- The command line's tables (the walkthrough's CSV files) are written this way.
"""

from __future__ import annotations

import csv

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.app import cli
from workbench.csv_files import restore_cells, safe_cell, safe_table, write_csv

from conftest import starts_no_formula

HOSTILE = ['=HYPERLINK("http://example.invalid","x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A2)", "\tx", "\rx",
           "'quoted", "-", "plain"]  # fmt: skip


def _cells(path) -> list[str]:
    with open(path, newline="") as f:
        return [cell for row in csv.reader(f) for cell in row]


def test_formula_text_is_marked_and_numbers_are_left_alone(tmp_path):
    """Every hostile string is written with a leading quote; -1.5 as text, and numeric
    columns with negative numbers, are written as the numbers they are."""
    table = pd.DataFrame({"label": HOSTILE, "as_text": ["-1.5"] * len(HOSTILE), "n": range(-4, 5),
                          "x": [-0.25] * len(HOSTILE), "=col": [True] * len(HOSTILE)})  # fmt: skip
    path = write_csv(table, tmp_path / "t.csv")
    cells = _cells(path)
    assert starts_no_formula(cells)
    assert {"'" + h for h in HOSTILE if h != "plain"} <= set(cells) and "plain" in cells
    assert "'=col" in cells and "-1.5" in cells and "-4" in cells and "-0.25" in cells
    back = restore_cells(pd.read_csv(path))
    assert back["label"].tolist() == HOSTILE and back["n"].tolist() == list(range(-4, 5))
    assert list(back.columns) == list(table.columns) and (back["x"] == -0.25).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("=+-@'\t\r a1.eE,\""), max_size=8), min_size=1, max_size=6))
def test_any_text_round_trips_and_never_starts_a_formula(texts):
    """Whatever the text, the written cells start no formula, and restoring them gives the
    text back exactly."""
    table = pd.DataFrame({"text": texts})
    written = safe_table(table)
    assert starts_no_formula([c for c in written["text"] if c])
    assert restore_cells(written)["text"].tolist() == texts
    assert [safe_cell(t) for t in texts] == written["text"].tolist()


def test_a_line_break_inside_text_never_starts_a_row(tmp_path):
    """A label hiding a formula after a carriage return or a line feed stays in its cell:
    the file has one row per table row, and the text reads back whole."""
    texts = ['ok\r=HYPERLINK("http://example.invalid")', "ok\n@SUM(A1)", "ok\r\n+1"]
    path = write_csv(pd.DataFrame({"label": texts, "n": [1, 2, 3]}), tmp_path / "t.csv")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert [row[0] for row in rows] == ["label", *texts] and all(len(row) == 2 for row in rows)
    assert restore_cells(pd.read_csv(path))["label"].tolist() == texts


def test_the_command_lines_tables_are_written_safely(tmp_path):
    """The walkthrough's writer marks a formula label as text (the CSV names routing traces
    and strategies a user chose)."""
    path = tmp_path / "strategies.csv"
    cli._write_csv(pd.DataFrame({"trace": ["=1+1", "ok"], "tok/s": [-1.0, 2.0]}), path)
    text = path.read_text()
    assert "'=1+1" in text and "-1.0" in text
    assert starts_no_formula(_cells(path))
