"""CSV files the workbench writes: atomic, and safe to open in a spreadsheet.

Rules:
1. A text cell a spreadsheet would take for a formula — one starting with ``=``, ``+``,
   ``-``, ``@``, a tab or a carriage return — is written with a leading ``'``, the
   spreadsheet's mark for literal text, so a string a user chose (a routing trace's
   label, a strategy parameter, a model name) is shown, never evaluated. A text cell
   that starts with ``'`` already gets one too, so ``restore_cells`` gives back exactly
   what was written.
2. Numbers stay numbers: a numeric cell is never changed, nor is a text cell that is a
   plain decimal number (``"-1.5"``, ``"2e-3"``), which a spreadsheet reads as that number.
3. Column names are cells of the header row: rule 1 applies to them too.
4. Rows end with CRLF (RFC 4180's line break), so a text holding a carriage return or a
   line feed anywhere is quoted and stays in its cell: it can never start a row (and a
   formula) of its own.
5. The file is written atomically (``atomic_files``): complete, or the old file untouched.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Union

import pandas as pd

from .atomic_files import atomic_path

__all__ = ["FORMULA_STARTS", "restore_cells", "safe_cell", "safe_table", "write_csv"]

#: Rule 1: first characters that make a spreadsheet evaluate a cell.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_QUOTE = "'"
#: Rule 2: a decimal number, as a spreadsheet reads one.
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value: Any) -> Any:
    """``value`` as rules 1-2 write it: text a spreadsheet would evaluate gets a leading ``'``."""
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(_QUOTE) or (value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value)):
        return _QUOTE + value
    return value


def _restore_cell(value: Any) -> Any:
    return value[1:] if isinstance(value, str) and value.startswith(_QUOTE) else value


def _map_text(table: pd.DataFrame, cell: Callable[[Any], Any]) -> pd.DataFrame:
    """A copy of ``table`` with ``cell`` applied to its column names and to every cell of
    its columns that can hold text (numeric and boolean columns are left as they are)."""
    out = table.rename(columns=cell)
    for i in range(out.shape[1]):
        column = out.iloc[:, i]
        if not (pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)):
            out.isetitem(i, column.map(cell))
    return out


def safe_table(table: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``table`` with every text cell and column name made safe (rules 1-3)."""
    return _map_text(table, safe_cell)


def restore_cells(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` read back from a file ``write_csv`` wrote, its cells and column names as
    they were before rule 1 marked them."""
    return _map_text(table, _restore_cell)


def write_csv(table: pd.DataFrame, path: Union[str, Path], what: str = "a table") -> Path:
    """Write ``table`` (no index) to ``path`` as CSV (rules 1-5); returns the path."""
    text = safe_table(table).to_csv(index=False, lineterminator="\r\n")
    with atomic_path(path, what) as tmp:
        tmp.write_bytes(text.encode("utf-8"))  # bytes: the line breaks as rule 4 has them, on every system
    return Path(path)
