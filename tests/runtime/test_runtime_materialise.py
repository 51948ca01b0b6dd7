"""Weights made in place: a shape-only plan loaded with seeded random weights, decoded."""

import warnings

import pytest
import torch

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe.strategies import expert_cache
from workbench.runtime import live_bytes
from workbench.runtime.materialise import MaterialiseError, SeededWeights, module_with_weights
from workbench.moe.strategies import all_on_device, expert_streaming, experts_on_host

CONFIG = MoEConfig.tiny(dtype="float32")


def _meta_model():
    with torch.device("meta"):
        return QwenMoEDecoder(CONFIG)


@pytest.fixture(scope="module")
def program():
    model = _meta_model()
    with torch.device("meta"):
        inputs = model.example_inputs()
    return wb.capture(model, inputs, shape_only=True)


STRATEGIES = {
    "all_on_device": lambda: all_on_device(skip_copies=True),
    "experts_on_host": lambda: experts_on_host(skip_copies=True),
    "expert_streaming": lambda: expert_streaming(),
    "expert_cache": lambda: expert_cache(2, "lru"),
}


def _plan(program, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return wb.plan(STRATEGIES[name]().apply(program), "best")


def test_a_shape_only_plan_without_weights_is_refused_with_the_way_out(program):
    """Loading a shape-only plan without weights says to pass weights=SeededWeights."""
    with pytest.raises(WorkbenchError, match="SeededWeights"):
        wb.load(_plan(program, "all_on_device"), "sim")


def test_bad_weights_argument_is_an_error_and_allocates_nothing(program):
    """weights must be a WeightSource; the error names one, before any allocation."""
    before = live_bytes()
    with pytest.raises(WorkbenchError, match="SeededWeights"):
        wb.load(_plan(program, "all_on_device"), "sim", weights=3)
    with pytest.raises(WorkbenchError, match="seed"):
        SeededWeights(seed=-1)
    assert live_bytes() == before


def test_seeded_weights_depend_on_seed_and_name_only(program):
    """The same seed gives the same resident values on two loads of two different plans
    (order and residency of the constants do not matter); another seed differs; every
    value is finite and within the rule's bounds."""
    a = _plan(program, "all_on_device")
    b = _plan(program, "experts_on_host")
    with wb.load(a, "sim", weights=SeededWeights(3)) as s1, wb.load(b, "sim", weights=SeededWeights(3)) as s2, \
            wb.load(a, "sim", weights=SeededWeights(4)) as s3:
        one = {n: t for (n, _), t in s1.resident_constants().items()}
        two = {n: t for (n, _), t in s2.resident_constants().items()}
        three = {n: t for (n, _), t in s3.resident_constants().items()}
        assert set(one) == set(two)
        for name, t in one.items():
            assert torch.equal(t, two[name]), name
            assert torch.isfinite(t).all()
            if t.dim() >= 2:
                assert t.abs().max() <= 1.0 / t.shape[-1] ** 0.5
            else:
                assert ((t >= 0.5) & (t < 1.0)).all()
        assert any(not torch.equal(t, three[n]) for n, t in one.items())


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize("launch", ["eager", "graph"])
def test_decode_of_seeded_weights_equals_eager_on_the_same_weights(program, name, launch):
    """A shape-only plan with seeded weights decodes 4 tokens whose logits match eager
    PyTorch on a module holding the session's own resident weights, every step, with
    per-op and with graph launch; the tokens do not depend on the strategy."""
    plan = _plan(program, name)
    with wb.load(plan, "sim", weights=SeededWeights(7), launch=launch) as session:
        reference = module_with_weights(session, _meta_model()).eval()
        result = wb.decode(plan, 4, session=session, reference=reference)
        assert not session.closed  # the caller's session stays open
    assert result.matches_eager == (True,) * 4
    with wb.load(_plan(program, "all_on_device"), "sim", weights=SeededWeights(7)) as session:
        baseline = wb.decode(session.plan, 4, session=session)
    assert result.tokens == baseline.tokens


def test_module_with_weights_aliases_the_session_and_refuses_another_model(program):
    """The eager module's parameters are the session's resident tensors (no copy); a
    module of another shape is a MaterialiseError naming the mismatch."""
    plan = _plan(program, "all_on_device")
    with wb.load(plan, "sim", weights=SeededWeights(0)) as session:
        module = module_with_weights(session, _meta_model())
        resident = {t.data_ptr() for t in session.resident_constants().values()}
        assert all(p.data_ptr() in resident for p in module.parameters())
        with torch.device("meta"):
            other = QwenMoEDecoder(MoEConfig.tiny(hidden_size=32))
        with pytest.raises(MaterialiseError):
            module_with_weights(session, other)


def test_decode_refuses_a_session_of_another_plan(program):
    """decode(session=...) must be given a session of the plan it decodes."""
    a, b = _plan(program, "all_on_device"), _plan(program, "experts_on_host")
    with wb.load(a, "sim", weights=SeededWeights(0)) as session:
        with pytest.raises(WorkbenchError, match="session"):
            wb.decode(b, 2, session=session)
