"""Names the stages share one reading of: indexed module paths and plain names."""

import pytest

from workbench.indexed_names import ends_with_index, indices, last_entry, list_entries, wildcard
from workbench.plain_names import PLAIN_NAME_RULE, is_plain_name


def test_indices_are_the_numeric_segments_in_order():
    """Every all-digit segment is an index, wherever it sits; digits inside a name are not."""
    assert indices("model.layers.17.mlp.experts.3.w1") == [17, 3]
    assert indices("0.weight") == [0] and indices("h2o.layer7.proj") == []


def test_a_path_ending_in_an_index_names_a_list_entry():
    """``layers.3`` is an entry of a list; ``layers.3.mlp`` and ``layer3`` are not."""
    assert ends_with_index("layers.3") and ends_with_index("3")
    assert not ends_with_index("layers.3.mlp") and not ends_with_index("layer3")


def test_wildcard_keeps_a_leading_index():
    """Indices after the first segment become ``*``; a ``Sequential``'s own child ``0`` stays."""
    assert wildcard("layers.3.mlp.experts.12") == "layers.*.mlp.experts.*"
    assert wildcard("0.weight") == "0.weight" and wildcard("0.1.weight") == "0.*.weight"


def test_the_last_entry_splits_list_index_and_rest():
    """The last index followed by a named segment splits the path; none, or an index at the
    end, gives None."""
    assert last_entry("layers.3.experts.5.w1") == ("layers.3.experts", 5, "w1")
    assert last_entry("experts.3.0.weight") == ("experts.3", 0, "weight")
    assert last_entry("layers.3") is None and last_entry("embed.weight") is None


def test_list_entries_name_each_list_by_its_prefix():
    """Each named list with an entry inside the path gives (prefix with its dot, index), so
    the same list under another root is another list."""
    assert list_entries("model.layers.17.mlp.experts.3.w1") == [("model.layers.", 17), ("model.layers.17.mlp.experts.", 3)]
    assert list_entries("layers.3") == [] and list_entries("blocks.0.attn.q") == [("blocks.", 0)]


@pytest.mark.parametrize("name", ["h200", "rtx_4090", "a100_80gb", "x86-server", "ggml.v2", "0day"])
def test_plain_names_pass(name):
    """Lowercase letters, digits, ``_``, ``.``, ``-``, starting with a letter or digit."""
    assert is_plain_name(name)


@pytest.mark.parametrize("name", ["", ".hidden", "-flag", "_private", "sub/h200", "../x", "H200", "h200 ", "a\\b", None, 3])
def test_anything_else_is_not_a_plain_name(name):
    """Paths, hidden files, flags, upper case, spaces and non-strings are refused; the rule
    in words says what is valid."""
    assert not is_plain_name(name)
    assert "lowercase" in PLAIN_NAME_RULE and "separator" in PLAIN_NAME_RULE
