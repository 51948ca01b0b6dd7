"""Prefill and decode steps of transformers models: plain tensors in and out, caches of
every kind turned into state tensors, the skip flags acting on them, no input mutated."""

from __future__ import annotations

import pytest
import torch
from torch.export.graph_signature import OutputKind

from hf_cases import assert_equal_to_eager, captured, run_on_sim, tiny_model

import workbench as wb
from workbench import hf
from workbench.moe.strategies import all_on_device

CUDA0 = wb.Device("cuda", 0)


def test_parameter_and_module_names_are_the_models_own():
    """The step wrapper adds no prefix: the program's parameter names are the model's,
    each held once, and its ops are traced in the model's module paths."""
    step = captured("qwen3_moe", "decode")
    model = step.module.hf_model
    assert set(step.program.constants.values()) >= {name for name, _ in model.named_parameters()}
    paths = {p for n in step.program.graph.nodes for p, _t in (n.meta.get("nn_module_stack") or {}).values()}
    assert "model.layers.0.mlp.experts" in paths
    assert sum(p.numel() for p in step.module.parameters()) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_5_moe", "gpt_oss"])
def test_decode_states_cover_every_cache_kind(family):
    """A static cache becomes keys, values and a position counter per attention layer
    (sliding-window layers included), and a conv and a recurrent state per
    linear-attention layer; outputs are the logits and every state, same shapes."""
    step = captured(family, "decode")
    model = step.module.hf_model
    layer_types = getattr(model.config, "layer_types", None) or ["full_attention"] * model.config.num_hidden_layers
    expected = []
    for i, kind in enumerate(layer_types):
        if kind == "linear_attention":
            expected += [f"layers.{i}.conv_states.0", f"layers.{i}.recurrent_states.0"]
        else:
            expected += [f"layers.{i}.keys", f"layers.{i}.values", f"layers.{i}.cumulative_length"]
    assert list(step.state_names) == expected
    logits, *states = step.eager()
    assert logits.shape == (1, 1, model.config.vocab_size)
    assert [s.shape for s in states] == [t.shape for t in step.inputs[2:]]


def _writes_an_input(program) -> bool:
    """An input mutation in the signature, or an in-place op whose written argument is a
    user input (torch.export's default IR keeps in-place ops)."""
    inputs = set(program.user_inputs)
    if any(spec.kind == OutputKind.USER_INPUT_MUTATION for spec in program.exported.graph_signature.output_specs):
        return True
    for node in program.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            for i, arg in enumerate(node.target._schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write and i < len(node.args):
                    if getattr(node.args[i], "name", None) in inputs:
                        return True
    return False


@pytest.mark.parametrize("family", ["qwen3_5_moe", "gpt_oss", "deepseek_v3"])
def test_decode_never_mutates_its_inputs(family):
    """The captured decode step writes no input in place, and running it eagerly leaves the
    caller's cache tensors as they were."""
    step = captured(family, "decode")
    assert not _writes_an_input(step.program)
    before = [t.clone() for t in step.inputs]
    step.eager()
    assert all(torch.equal(a, b) for a, b in zip(before, step.inputs))


def test_dynamic_cache_grows_by_the_new_token():
    """A dynamic cache's keys and values come in with `past` positions and go out with past + 1."""
    model = tiny_model("mixtral")
    step = hf.capture_decode(model, "dynamic", past=5)
    states = dict(zip(step.state_names, step.inputs[2:]))
    out = dict(zip(step.state_names, step.eager()[1:]))
    assert states["layers.0.keys"].shape[-2] == 5 and out["layers.0.keys"].shape[-2] == 6
    _dg, _result, outputs = run_on_sim(step, all_on_device())
    assert_equal_to_eager(step, outputs)


def test_skip_flags_act_on_the_cache_states():
    """With the skip flags the caller supplies the token, position and cache states on the
    device and gets logits and new states there (no copy); without them every state
    crosses in (h2d) and out (d2h)."""
    step = captured("qwen3_5_moe", "decode")
    skipped = all_on_device().apply(step.program)
    assert skipped.copies == ()
    states = step.program.user_inputs[2:]
    assert all(skipped.input_devices[name] == CUDA0 for name in states)
    assert set(skipped.output_devices) == {CUDA0}
    plain = all_on_device(skip_copies=False).apply(step.program)
    state_bytes = sum(t.numel() * t.element_size() for t in step.inputs[2:])
    copied_in = sum(c.nbytes for c in plain.copies if c.kind == "h2d" and c.value in states)
    assert copied_in == state_bytes
    assert plain.copy_counts()["d2h"] == len(step.program.user_outputs)


def test_prefill_is_captured_without_a_cache():
    """The prefill step returns only the logits of every position."""
    step = captured("deepseek_v3", "prefill")
    logits = step.eager()
    assert logits.shape == (1, 4, step.module.hf_model.config.vocab_size)
    assert len(step.program.user_outputs) == 1


def test_a_state_written_in_place_is_found_and_cloned():
    """Rule 3: a cache layer that writes its keys in place although its type is not known
    to is caught by the capture, which captures again with that state cloned."""
    from transformers.cache_utils import DynamicLayer

    class ScalingLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            self.keys.mul_(1.0)  # in place, unlike DynamicLayer
            return super().update(key_states, value_states, *args, **kwargs)

    model = tiny_model("llama")
    cache = hf.prefill_cache(model, "dynamic", past=3)
    for i, layer in enumerate(cache.layers):
        scaled = ScalingLayer()
        scaled.__dict__.update(vars(layer))
        cache.layers[i] = scaled
    step = hf.capture_decode(model, cache)
    assert {s.name for s in step.module.slots if s.in_place} == {"layers.0.keys", "layers.1.keys"}
    assert not _writes_an_input(step.program)
    _dg, _result, outputs = run_on_sim(step, all_on_device())
    assert_equal_to_eager(step, outputs)


def test_shape_only_decode_allocates_no_weights():
    """A meta model's decode step captures shape-only: every constant and input is meta."""
    model = hf.load_model("qwen3_5_moe", shape_only=True)
    step = hf.capture_decode(model, past=4)
    assert step.program.shape_only
    assert all(step.program.constant_tensor(n).is_meta for n in step.program.constants)
    assert all(t.is_meta for t in step.inputs)
    assert model.config._experts_implementation == "grouped_mm"  # restored after the meta prefill


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: hf.capture_decode(m, "paged"), "static, dynamic"),
        (lambda m: hf.capture_decode(m, "static", past=4, max_cache_len=4), "max_cache_len must be an integer > past=4"),
        (lambda m: hf.capture_decode(m, object()), "expected a transformers Cache"),
        (lambda m: hf.capture_prefill(m, tokens=0), "length must be a positive integer"),
        (lambda m: hf.capture_prefill(torch.nn.Linear(2, 2)), "expected a transformers model"),
    ],
)
def test_bad_step_arguments(call, message):
    """Bad cache kinds, sizes, caches and models are clear errors saying what is valid."""
    with pytest.raises(hf.HFError, match=message):
        call(tiny_model("llama"))


def test_quantized_cache_layers_are_refused():
    """Rule 2 of the cache: a layer holding tensors other than attention or linear-attention
    state is refused, naming what is supported."""
    model = tiny_model("llama")
    cache = hf.prefill_cache(model, "dynamic", past=3)
    cache.layers[0]._quantized_keys = torch.zeros(2)
    with pytest.raises(hf.HFError, match="not attention or linear-attention state"):
        hf.capture_decode(model, cache)


def test_capturing_a_cache_output_says_what_to_do():
    """Capturing a transformers model as is (use_cache on) fails inside torch.export on its
    DynamicCache output; the error says to pass use_cache=False or use the decode helper,
    and with kwargs={'use_cache': False} the same model captures."""
    model = tiny_model("olmoe")
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(wb.CaptureError, match=r"DynamicCache.*use_cache.*False.*capture_decode"):
        wb.capture(model, (ids,))
    prog = wb.capture(model, (ids,), {"use_cache": False})
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
    assert torch.equal(prog.exported.module()(ids, use_cache=False).logits, want)
