"""Shipped transformers configurations and seeded models: tiny ones are tiny, published
ones count what their notes say, weights are a pure function of the seed."""

from __future__ import annotations

import json
import re

import pytest
import torch

from hf_cases import FAMILIES

from workbench import hf
from workbench.moe.discovery import config_expert_count
from workbench.models import MoEConfig, param_count


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_configs_are_tiny(family):
    """Every tiny config: hidden 64, 2-4 layers, vocabulary 128, float32; MoE ones have
    8 experts with top-2 routing."""
    config = hf.tiny_config(family)
    assert config.hidden_size == 64 and 2 <= config.num_hidden_layers <= 4 and config.vocab_size == 128
    assert config.dtype == torch.float32
    if hf.family(family).moe:
        assert config_expert_count(config) == 8 and config.num_experts_per_tok == 2
    else:
        assert config_expert_count(config) is None


def _stated_total(path) -> float:
    """The parameter count a published file's note states, in billions."""
    note = json.loads(path.read_text())["_comment"]
    return float(re.search(r"count ([\d.]+) B parameters", note).group(1))


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "qwen3_5_moe"])
def test_published_configs_count_what_their_notes_say(family):
    """Each published file's note states its parameter count; the model built from it
    (shape-only) has that many, so the file name and note describe what it is."""
    path = hf.config_file(family, "published")
    model = hf.load_model(path, shape_only=True)
    total = sum(p.numel() for p in model.parameters()) / 1e9
    assert round(total, 2) == _stated_total(path)
    assert all(p.is_meta for p in model.parameters())
    assert model.config.dtype == torch.bfloat16


def test_published_qwen3_5_moe_is_the_builtin_models_config():
    """Qwen3.5-MoE's published config is the built-in decoder's file, and transformers'
    model built from it has exactly the built-in parameter count."""
    path = hf.config_file("qwen3_5_moe", "published")
    assert path.name == "qwen3_5_moe_35b_a3b.json"
    model = hf.load_model(path, shape_only=True)
    assert sum(p.numel() for p in model.parameters()) == param_count(MoEConfig.full())["total"]


def test_weights_are_a_pure_function_of_the_seed():
    """Same seed, same weights; another seed, other weights; the caller's RNG is untouched."""
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b, c = (hf.load_model("olmoe", seed=s) for s in (0, 0, 1))
    assert torch.equal(torch.random.get_rng_state(), before)
    wa, wb_, wc = (dict(m.named_parameters()) for m in (a, b, c))
    name = "model.layers.0.mlp.experts.gate_up_proj"
    assert torch.equal(wa[name], wb_[name]) and not torch.equal(wa[name], wc[name])


def test_load_config_sources():
    """A family name, a JSON path, a mapping and a config object all give the same config;
    keys starting with '_' are notes, overrides replace keys."""
    path = hf.config_file("mixtral")
    raw = json.loads(path.read_text())
    from_path, from_name, from_map = hf.load_config(path), hf.load_config("hf:mixtral"), hf.load_config(raw)
    assert from_path.to_dict() == from_name.to_dict() == from_map.to_dict()
    assert not hasattr(from_map, "_comment")
    copied = hf.load_config(from_path, num_hidden_layers=3)
    assert copied.num_hidden_layers == 3 and from_path.num_hidden_layers == 2


def test_a_model_instance_is_used_as_it_is():
    """load_model of a model returns that model, weights untouched."""
    model = hf.load_model("llama")
    assert hf.load_model(model) is model


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda tmp: hf.load_config({"hidden_size": 8}), "no 'model_type'"),
        (lambda tmp: hf.load_config(tmp / "missing.json"), "config file not found"),
        (lambda tmp: hf.load_config(_write(tmp / "bad.json", "{")), "not valid JSON"),
        (lambda tmp: hf.load_config(_write(tmp / "list.json", "[1]")), "must hold a JSON object"),
        (lambda tmp: hf.load_config(3), "a configuration is a transformers config object"),
        (lambda tmp: hf.family("hf:gpt5"), "unknown transformers family 'hf:gpt5'"),
        (lambda tmp: hf.load_model("llama", experts_implementation="eager"), "cannot be captured"),
        (lambda tmp: hf.load_model("llama", seed="0"), "seed must be an integer"),
    ],
)
def test_bad_configs_and_options(tmp_path, call, message):
    """Bad configurations and options are clear errors saying what is valid."""
    with pytest.raises(hf.HFError, match=message):
        call(tmp_path)


def _write(path, text):
    path.write_text(text)
    return path


def test_an_eager_experts_model_is_refused():
    """A model whose experts loop in Python (transformers' 'eager' form) cannot export;
    using it is an error that says how to switch."""
    model = hf.load_model("qwen3_moe", seed=0)
    model.set_experts_implementation("eager")
    try:
        with pytest.raises(hf.HFError, match="set_experts_implementation"):
            hf.capture_prefill(model)
    finally:
        model.set_experts_implementation("grouped_mm")


def test_importing_the_package_does_not_import_transformers():
    """workbench.hf is importable without transformers: only its functions import it."""
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, workbench.hf, workbench.moe.discovery, workbench.moe.strategies; print('transformers' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"
