"""Graph replay and weights made in place on a real GPU. Skipped without a GPU."""

import warnings

import pytest
import torch

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.runtime import cuda_available, cuda_unavailable_reason, stage_inputs, to_host
from workbench.runtime.graph_replay import WARMUP_CALLS
from workbench.runtime.graph_segments import REPLAY_PREFIX
from workbench.runtime.materialise import SeededWeights, module_with_weights
from workbench.moe.strategies import all_on_device, expert_streaming

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]

STRATEGIES = {"all_on_device+skip": lambda: all_on_device(skip_copies=True), "expert_streaming": lambda: expert_streaming()}


@pytest.fixture(scope="module")
def moe():
    model = QwenMoEDecoder(MoEConfig.tiny()).eval()
    inputs = model.example_inputs()
    return model, inputs, wb.capture(model, inputs)


def _plan(program, label):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return wb.plan(STRATEGIES[label]().apply(program), "best")


@pytest.mark.parametrize("label", list(STRATEGIES))
def test_captured_segments_replay_to_the_per_op_outputs(moe, label):
    """After the warm-up, calls replay captured CUDA graphs (one replay event per segment,
    no per-step events of captured steps) and give the per-op launch's outputs, call
    after call, within the eager tolerance; the graph calls are no slower in wall time."""
    model, inputs, program = moe
    plan = _plan(program, label)
    staged = stage_inputs(plan.device_graph, inputs, "cuda")
    with wb.load(plan, "cuda") as session:
        want = [to_host(t).clone() for t in session.run(*staged).outputs]
    with wb.load(plan, "cuda", launch="graph") as session:
        for n in range(WARMUP_CALLS + 4):
            res = session.run(*staged)
            got = [to_host(t) for t in res.outputs]
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
        assert not session.graph_replay.disabled
        names = {e.node for e in res.timeline}
        replays = {n for n in names if n.startswith(REPLAY_PREFIX)}
        assert len(replays) == len(session.segments.segments)
        captured = session.segments.segment_of()
        assert not names & set(captured)


def test_decode_with_graph_replay_matches_eager_on_seeded_weights():
    """A shape-only tiny plan with seeded weights made on the GPU decodes the same tokens
    with graph replay as with per-op launches, each step matching eager PyTorch on the
    session's own weights."""
    config = MoEConfig.tiny()
    with torch.device("meta"):
        meta = QwenMoEDecoder(config)
        inputs = meta.example_inputs()
    program = wb.capture(meta, inputs, shape_only=True)
    plan = _plan(program, "all_on_device+skip")
    tokens = {}
    for launch in ("eager", "graph"):
        with wb.load(plan, "cuda", weights=SeededWeights(0), launch=launch) as session:
            with torch.device("meta"):
                reference = QwenMoEDecoder(config)
            reference = module_with_weights(session, reference).eval()
            result = wb.decode(plan, 6, session=session, reference=reference)
        assert result.matches_eager == (True,) * 6
        tokens[launch] = result.tokens
    assert tokens["graph"] == tokens["eager"]
