"""Public import paths of moved modules still work, and give the module at its new path."""

import importlib

import pytest

import workbench
from workbench.moved_modules import MOVED


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_path_is_the_module_at_its_new_path(old, new):
    """``import <old>`` and ``from workbench import <name>`` give the very module now at
    ``new`` (one module object: its classes are the same classes), with its own spec."""
    moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
    assert getattr(workbench, old.rsplit(".", 1)[1]) is moved
    assert moved.__spec__.name == new and moved.__name__ == new


def test_the_public_names_of_the_moved_modules_still_import():
    """The names notebooks and scripts import from the old paths are there."""
    from workbench import walkthrough as wt
    from workbench.anchors import ANCHORS, anchors_table
    from workbench.examples import EXAMPLES, example

    assert callable(wt.answer_table) and callable(anchors_table) and ANCHORS
    assert "mlp" in EXAMPLES and callable(example)


def test_a_path_that_never_existed_is_not_served():
    """Only the listed old paths are served: any other missing module is still missing."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("workbench.no_such_module")
