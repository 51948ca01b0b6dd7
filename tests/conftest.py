"""Shared test helpers: captured examples are cached (export is the slow step, and a
Program is never modified by later stages)."""

import functools
import os
import threading

import pytest
import torch

import workbench as wb

# Every strategy's passes run with the device-graph checks after each pass in tests.
os.environ.setdefault("WORKBENCH_CHECK_PASSES", "1")
from workbench.models.examples import example


@functools.lru_cache(maxsize=None)
def captured(name: str, decompose: bool = False, shape_only: bool = False):
    """(model, inputs, program) for a built-in example, exported once per session."""
    model, inputs = example(name)
    return model, inputs, wb.capture(model, inputs, decompose=decompose, shape_only=shape_only)


def run_with_layer_hooks(model, inputs, register):
    """Call ``model(*inputs)`` once without grad, with ``register(layer)`` (which returns a
    hook handle) applied to every decoder layer; the hooks are removed even if the call
    fails, so a cached model is left clean for the next test. The prefetch tests read
    per-layer routing this way."""
    hooks = [register(layer) for layer in model.layers]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()


def reference_routing(model, inputs):
    """Per layer, from the plain model: (chosen, predicted), chosen = layer i's top-k
    experts, predicted = layer i's post-attention norm + router + top-k applied to layer
    i-1's post-attention hidden state (None for layer 0). Shared by the model and the
    executor prefetch tests, so both check against the same hand-computed routing."""
    states = []
    run_with_layer_hooks(
        model,
        inputs,
        lambda layer: layer.post_attention_layernorm.register_forward_pre_hook(lambda mod, args: states.append(args[0])),
    )
    layers = list(model.layers)
    with torch.no_grad():
        chosen = [layer.mlp.route(layer.post_attention_layernorm(h))[1] for layer, h in zip(layers, states)]
        predicted = [None] + [
            layers[i].mlp.route(layers[i].post_attention_layernorm(states[i - 1]))[1] for i in range(1, len(layers))
        ]
    return chosen, predicted


@functools.lru_cache(maxsize=None)
def moe_tiny():
    """(config, model, inputs, program) for the tiny MoE decoder, exported once per session."""
    from workbench.models import MoEConfig, QwenMoEDecoder

    cfg = MoEConfig.tiny()
    model = QwenMoEDecoder(cfg)
    inputs = model.example_inputs()
    return cfg, model, inputs, wb.capture(model, inputs)


# Planned execution writes into arena buffers whose addresses differ from eager's, and some
# CPU BLAS kernels pick their vector path by alignment: on some CPUs a planned matmul differs
# from eager by ~1e-7. Outputs of planned runs are compared with eager within this tolerance;
# bit-for-bit comparisons are kept for runs of the same plan against each other.
# Half-precision outputs use torch's own per-dtype tolerance.
EAGER_ATOL = 1e-5
EAGER_RTOL = 1e-5


def assert_matches_eager(got, want, what: str = "") -> None:
    """``got`` (a planned run's output: tensor or sequence of tensors, host or device) equals
    eager's ``want``: same shapes and dtypes, integers exactly, floats within the suite's
    tolerance."""
    from workbench.runtime import to_host

    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want), (what, len(got), len(want))
    for g, w in zip(got, want):
        g = to_host(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype in (torch.float32, torch.float64):
            torch.testing.assert_close(g, w, atol=EAGER_ATOL, rtol=EAGER_RTOL, msg=lambda m: f"{what} {m}")
        elif w.dtype.is_floating_point:  # half precision: torch's own per-dtype tolerance (one ulp or so)
            torch.testing.assert_close(g, w, msg=lambda m: f"{what} {m}")
        else:
            assert torch.equal(g, w), what


def assert_no_cross_device_reads(dg) -> None:
    """Every op (copies aside) reads tensors that live on its own device, or resident constants."""
    import torch

    from workbench.copy_ops import is_copy_node

    for node in dg.graph.nodes:
        if node.op != "call_function" or is_copy_node(node):
            continue
        for arg in node.all_input_nodes:
            if arg.name in dg.residency or not isinstance(arg.meta.get("val"), torch.Tensor):
                continue
            assert dg.node_device[arg.name] == dg.node_device[node.name], (arg.name, node.name)


def call_with_timeout(function, path, seconds=20.0):
    """``function(path)``'s exception (or None), failing the test if it blocks: a reader
    given the named pipe ``path`` must refuse it at once (if it waits in ``open``,
    opening the pipe's write end lets it through before the test fails)."""
    outcome: dict = {}

    def target():
        try:
            function(path)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(5)
        pytest.fail(f"{function} blocked on a named pipe for {seconds} s")
    return outcome.get("error")


def starts_no_formula(cells) -> bool:
    """Whether no CSV cell would start a spreadsheet formula: none begins with ``=``,
    ``+``, ``@``, a tab or a carriage return, or with ``-`` unless it is a number."""

    def number(text):
        try:
            float(text)
        except ValueError:
            return False
        return True

    return all(not c.startswith(("=", "+", "-", "@", "\t", "\r")) or number(c) for c in cells)
