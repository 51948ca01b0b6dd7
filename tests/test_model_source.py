"""A model changed after capture: the program shares its weights, so in-place edits before
a plan is loaded are used; a replaced layer, a reshaped weight, or an edit after a session
loaded the weights is a ``ModelChangedError`` naming the weight — never a half-used model."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.capture import ModelChangedError
from workbench.models.examples import example
from workbench.runtime import load


def _fresh(decompose: bool = False):
    """A model of its own (the cached examples must stay unchanged), its input and plan."""
    model, (x,) = example("mlp")
    program = wb.capture(model, (x,), decompose=decompose)
    plan = wb.plan(wb.propagate(wb.place(program, {"cuda:0": ["aten.linear", "aten.addmm"]})))
    return model, x, plan


def test_in_place_edits_before_load_are_used():
    """Weights edited in place after capture (before ``run`` loads them) are the weights run."""
    model, x, plan = _fresh()
    with torch.no_grad():
        model.layers[0].weight.mul_(-2)
        want = model(x)
    assert torch.allclose(wb.run(plan, x, backend="sim").outputs, want, atol=1e-5)


@pytest.mark.parametrize("decompose", [False, True], ids=["captured", "decomposed"])
def test_a_replaced_layer_is_refused_at_run_naming_its_weights(decompose):
    """``model.layers[1] = nn.Linear(...)`` after capture: run refuses, naming the weights
    (a decomposed program shares the model's weights too)."""
    model, x, plan = _fresh(decompose)
    model.layers[1] = nn.Linear(32, 32)
    with pytest.raises(ModelChangedError, match=r"'layers\.1\.weight' was replaced after capture.*capture the model again"):
        wb.run(plan, x, backend="sim")


def test_a_replaced_layer_is_refused_by_a_loaded_session():
    """A layer replaced after ``load``: the session's next call refuses."""
    model, x, plan = _fresh()
    with load(plan, "sim") as session:
        session.run(x)
        model.layers[2] = nn.Linear(32, 32)
        with pytest.raises(ModelChangedError, match=r"'layers\.2\.bias' was replaced"):
            session.run(x)


def test_an_edit_after_load_is_refused_until_loaded_again():
    """An in-place edit after load: the session holds copies made at load, so its next call
    refuses; loading again runs with the new weights."""
    model, x, plan = _fresh()
    with load(plan, "sim") as session:
        with torch.no_grad():
            model.layers[0].bias.add_(1)
        with pytest.raises(ModelChangedError, match=r"'layers\.0\.bias' changed in place after this session loaded"):
            session.run(x)
    with torch.no_grad():
        want = model(x)
    with load(plan, "sim") as session:
        assert torch.allclose(session.run(x).outputs, want, atol=1e-5)


def test_a_weight_given_a_new_shape_or_removed_is_refused():
    """``.data`` of another shape, or a deleted parameter: named, with what changed."""
    model, x, plan = _fresh()
    model.layers[0].weight.data = torch.zeros(32, 16)
    with pytest.raises(ModelChangedError, match=r"'layers\.0\.weight' now has shape \(32, 16\)"):
        wb.run(plan, x, backend="sim")
    model, x, plan = _fresh()
    del model.layers[2].bias
    with pytest.raises(ModelChangedError, match=r"'layers\.2\.bias' is no longer in the model"):
        wb.run(plan, x, backend="sim")


def test_without_the_model_the_program_stands_alone():
    """Once the model is gone (or for a plan read from a file), there is nothing to compare:
    the program's own weights run."""
    model, x, plan = _fresh()
    with torch.no_grad():
        want = model(x)
    del model
    gc.collect()
    assert plan.device_graph.program.source.model is None
    assert torch.allclose(wb.run(plan, x, backend="sim").outputs, want, atol=1e-5)
