"""Routing traces: recorded from the built-in model, generated with stated skew and
locality, saved and loaded."""

import numpy as np
import pytest
import torch

from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.moe import RoutingRecorder, RoutingTrace, TraceError, record_decode, synthetic_trace, synthetic_trace_for
from workbench.moe.discovery import ExpertDiscoveryError, expert_layers

from conftest import moe_tiny, reference_routing


def test_recorder_matches_the_router():
    """A recorded batch call holds, per layer, exactly the top-k the router chose."""
    config, model, inputs, _ = moe_tiny()
    tokens = torch.arange(6)[:, None] * 37 % config.vocab_size
    batch = (tokens, torch.tensor([0]), *model.init_caches(6))
    with RoutingRecorder(model) as rec:
        with torch.no_grad():
            model(*batch)
    trace = rec.trace()
    assert (trace.num_tokens, trace.num_layers, trace.top_k) == (6, config.num_hidden_layers, config.num_experts_per_tok)
    assert not trace.synthetic
    chosen, _ = reference_routing(model, batch)
    for layer, want in enumerate(chosen):
        np.testing.assert_array_equal(trace.experts[:, layer], want.numpy())


def test_recorder_removes_its_hooks():
    """After the with-block the model runs unrecorded (no hooks left behind)."""
    _, model, inputs, _ = moe_tiny()
    with RoutingRecorder(model) as rec:
        with torch.no_grad():
            model(*inputs)
    with torch.no_grad():
        model(*inputs)
    assert rec.trace().num_tokens == 1


def test_recorder_without_calls_is_an_error():
    """Asking for a trace before any call says how to record."""
    _, model, _, _ = moe_tiny()
    with pytest.raises(TraceError, match="nothing recorded"):
        RoutingRecorder(model).trace()


def test_record_decode_is_a_real_sequence():
    """record_decode feeds back the argmax token each step and records one token per step;
    the same decode run by hand chooses the same experts at the last step."""
    config = MoEConfig.tiny(max_seq_len=12)
    model = QwenMoEDecoder(config, seed=1).eval()
    trace, fed = record_decode(model, 12, first_token=5)
    assert trace.experts.shape == (12, config.num_hidden_layers, config.num_experts_per_tok)
    assert fed[0] == 5 and len(fed) == 12
    caches = model.init_caches(1)
    with torch.no_grad():
        for pos, tok in enumerate(fed[:-1]):
            logits, *caches = model(torch.tensor([[tok]]), torch.tensor([pos]), *caches)
            assert int(logits[0].argmax()) == fed[pos + 1]
    with RoutingRecorder(model) as rec, torch.no_grad():
        model(torch.tensor([[fed[-1]]]), torch.tensor([11]), *caches)
    np.testing.assert_array_equal(rec.trace().experts[0], trace.experts[-1])


def test_record_decode_checks_length():
    """More tokens than KV-cache slots is refused with the limit."""
    model = QwenMoEDecoder(MoEConfig.tiny(max_seq_len=4))
    with pytest.raises(TraceError, match=r"\[1, max_seq_len=4\]"):
        record_decode(model, 5)


def test_save_load_roundtrip(tmp_path):
    """A saved trace loads back with the same ids, label and synthetic flag."""
    trace = synthetic_trace(50, 3, 16, 4, zipf=1.2, reuse=0.5, seed=7)
    path = trace.save(tmp_path / "t.npz")
    back = RoutingTrace.load(path)
    np.testing.assert_array_equal(back.experts, trace.experts)
    assert (back.label, back.synthetic, back.num_experts) == (trace.label, True, 16)


def test_load_rejects_other_files(tmp_path):
    """A file that is not a trace, or a missing one, is a TraceError."""
    bad = tmp_path / "x.npz"
    np.savez(bad, something=np.zeros(3))
    with pytest.raises(TraceError, match="not a routing trace"):
        RoutingTrace.load(bad)
    with pytest.raises(TraceError, match="not found"):
        RoutingTrace.load(tmp_path / "missing.npz")
    with pytest.raises(TraceError, match="ends in .npz"):
        synthetic_trace(2, 1, 4, 1).save(tmp_path / "t.bin")


@pytest.mark.parametrize(
    "ids, experts, message",
    [
        (np.array([[[0, 0]]]), 4, "must be distinct"),
        (np.array([[[0, 4]]]), 4, r"in \[0, num_experts=4\)"),
        (np.zeros((2, 3)), 4, "tokens, layers, k"),
        (np.array([[[0.0, 1.0]]]), 4, "integer expert ids"),
    ],
)
def test_bad_traces_are_refused(ids, experts, message):
    """Repeated experts, out-of-range ids, wrong rank or dtype: clear TraceErrors."""
    with pytest.raises(TraceError, match=message):
        RoutingTrace(ids, experts, False, "recorded")


def test_synthetic_label_is_enforced():
    """A synthetic trace must say so in its label."""
    with pytest.raises(TraceError, match="must start with 'synthetic'"):
        RoutingTrace(np.zeros((1, 1, 1), int), 2, True, "measured")


def test_synthetic_is_deterministic_and_labelled():
    """Same arguments, same ids; the label states the skew, the locality and the seed."""
    a = synthetic_trace(200, 4, 32, 4, zipf=[0.5, 1.0, 1.5, 2.0], reuse=0.3, seed=11)
    b = synthetic_trace(200, 4, 32, 4, zipf=[0.5, 1.0, 1.5, 2.0], reuse=0.3, seed=11)
    np.testing.assert_array_equal(a.experts, b.experts)
    assert a.synthetic and a.label == "synthetic (zipf 0.5-2, reuse 0.3, seed 11)"


def test_synthetic_skew_and_locality():
    """Stronger Zipf concentrates requests on the top expert; reuse=1 repeats the previous
    token's experts exactly; reuse=0 and zipf=0 reuse only by chance (about k/E)."""
    flat = synthetic_trace(4000, 1, 64, 4, zipf=0.0, seed=1)
    steep = synthetic_trace(4000, 1, 64, 4, zipf=1.5, seed=1)
    share = lambda t: t.counts()[0].max() / t.counts()[0].sum()  # noqa: E731
    assert share(steep) > 3 * share(flat)
    assert abs(flat.reuse_rate() - 4 / 64) < 0.02
    sticky = synthetic_trace(50, 2, 64, 4, zipf=1.0, reuse=1.0, seed=2)
    assert sticky.reuse_rate() == 1.0
    mid = synthetic_trace(4000, 1, 64, 4, zipf=0.0, reuse=0.5, seed=3)
    assert 0.45 < mid.reuse_rate() < 0.6  # kept with p=0.5, plus chance repeats


def test_synthetic_for_full_config():
    """synthetic_trace_for takes layers, experts and top-k from the config."""
    t = synthetic_trace_for(MoEConfig.full(), 10, seed=0)
    assert t.experts.shape == (10, 40, 8) and t.num_experts == 256
    with pytest.raises(TraceError, match="zipf must be one number or one per layer"):
        synthetic_trace(10, 3, 8, 2, zipf=[1.0, 2.0])
    with pytest.raises(TraceError, match="reuse must be a probability"):
        synthetic_trace(10, 3, 8, 2, reuse=1.5)


def test_expert_layers_from_program():
    """MoE layers of a program come from find_experts, indexed by decoder layer, in layer
    order, each with its stacked weights; a model without routed experts is refused."""
    config, model, _, program = moe_tiny()
    layers = expert_layers(program)
    assert [index for index, _ in layers] == list(range(config.num_hidden_layers))
    assert set(layers[2][1].weights) == {"layers.2.mlp.experts.w1", "layers.2.mlp.experts.w2"}
    assert [(i, e.module) for i, e in expert_layers(model)] == [(i, e.module) for i, e in layers]
    with pytest.raises(ExpertDiscoveryError, match="no routed experts"):
        expert_layers(torch.nn.Linear(4, 4))
    with pytest.raises(ExpertDiscoveryError, match="nn.Module or a Program"):
        expert_layers({"a": "embed.weight"})
