"""Absurd shapes and figures in tables and hand-made records, refused naming them before
anything is made.

Properties:
- A routing-locality row claiming 10**12 layers, 10**9 experts, or more layers × experts
  than accepted is refused when the table is read, naming the row and the bound; a
  ``ModelLocality`` made by hand with such a shape, and a trace of absurdly many tokens,
  are refused before any array is made.
- A weight format made by hand with bits per weight of 1e9, inf, NaN, 0 or below, or
  past 64 (or a non-number) is refused, naming the format and the valid range (0, 64];
  a table row with such bits is refused naming the row.
"""

from __future__ import annotations

import math

import pytest

from workbench.moe.locality import (
    MAX_LAYERS,
    LocalityError,
    ModelLocality,
    locality_trace,
    model_locality,
    published_locality,
)
from workbench.weight_formats import FORMAT_COLUMNS, WeightFormat, WeightFormatError, weight_formats_table

_HEADER = "model,num_layers,num_experts,top_k,subset,layers,statistic,value,kind,source,quote\n"


def _locality_table(tmp_path, shape: str) -> str:
    path = tmp_path / "locality.csv"
    path.write_text(_HEADER + f"big,{shape},all,0,any_overlap,0.5,table,https://example.invalid,a quote\n")
    return str(path)


@pytest.mark.parametrize(
    "shape, message",
    [
        ("1000000000000,8,2", r"row 2 \(big/all/0/any_overlap\): num_layers=1000000000000 is more than the 4096 layers"),
        ("32,1000000000,2", r"row 2 .*num_experts=1000000000 is more than the 65536 experts"),
        ("4096,65536,2", r"row 2 .*num_layers × num_experts = 268435456 is more than the 4194304"),
        ("32,8,9", r"row 2 .*top_k=9 cannot exceed num_experts=8"),
    ],
    ids=["10**12 layers", "10**9 experts", "layers × experts", "top-k over experts"],
)
def test_an_absurd_locality_shape_is_refused_naming_the_row(shape, message, tmp_path):
    """The table is refused on reading, with the row and the bound named."""
    with pytest.raises(LocalityError, match=message):
        published_locality(_locality_table(tmp_path, shape))


def test_a_sane_locality_shape_still_reads(tmp_path):
    """The bounds let a real model's shape through, and its targets are per layer."""
    path = _locality_table(tmp_path, f"{MAX_LAYERS},8,2")
    fit = model_locality("big", path=path)
    assert fit.num_layers == MAX_LAYERS and fit.target("any_overlap").shape == (MAX_LAYERS,)


def test_a_hand_made_locality_or_a_huge_trace_is_refused_before_any_array(tmp_path):
    """A ModelLocality of 10**12 layers cannot be made; a trace of 10**12 tokens of a real
    shape is refused naming how many tokens are accepted."""
    real = model_locality("mixtral_8x7b")
    with pytest.raises(LocalityError, match="num_layers=1000000000000 is more than"):
        ModelLocality("big", "all", 10**12, 8, 2, real.rows)
    with pytest.raises(LocalityError, match=r"tokens=1000000000000: .*generate at most \d+ tokens"):
        locality_trace(real, tokens=10**12)


def _format(bits):
    return WeightFormat("hand_made", (), bits, 32, "made by hand", 1.0, "", "a test")


@pytest.mark.parametrize("bits", [1e9, math.inf, -math.inf, math.nan, 0, -4.0, 64.5], ids=str)
def test_a_hand_made_format_with_impossible_bits_is_refused(bits):
    """Bits outside (0, 64], or not finite, are refused naming the format and the range."""
    with pytest.raises(WeightFormatError, match=r"weight format 'hand_made': bits_per_weight .* not a finite number in \(0, 64\]"):
        _format(bits)


@pytest.mark.parametrize("bits", ["4", None, True], ids=repr)
def test_a_hand_made_format_with_bits_that_are_no_number_is_refused(bits):
    """Text, None or a bool for bits per weight: refused as not a number."""
    with pytest.raises(WeightFormatError, match="bits_per_weight must be a number"):
        _format(bits)


def test_a_hand_made_format_in_range_is_accepted():
    """64 bits and half a bit per weight are formats; their bytes follow their bits."""
    assert _format(64).nbytes(8) == 64 and _format(0.5).nbytes(16) == 1


@pytest.mark.parametrize("cell", ["1e9", "inf", "nan", "-1"])
def test_a_format_table_row_with_impossible_bits_is_refused(cell, tmp_path):
    """A table row with such bits is refused, naming the row's format and the range."""
    path = tmp_path / "formats.csv"
    row = ",".join(f'"{v}"' for v in ("odd", "", cell, "32", "x", "1", "", "somewhere"))
    path.write_text(",".join(FORMAT_COLUMNS) + "\n" + row + "\n")
    with pytest.raises(WeightFormatError, match=r"odd: bits_per_weight .* not a finite number in \(0, 64\]"):
        weight_formats_table(path)
