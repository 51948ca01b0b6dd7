"""Models too large for the memory of the device they would be made on are refused
before any weight is allocated.

Properties:
- A ``QwenMoEDecoder`` or ``hf.load_model`` whose weights would not fit in the memory of
  the device they are made on is refused before any is allocated, naming the bytes
  needed and how to build it shape-only; the same model builds under the meta device
  (or ``shape_only=True``); one that fits builds, up to exactly the memory there is.
"""

from __future__ import annotations

import pytest
import torch

from workbench import memory_limits
from workbench.errors import ArgumentValueError
from workbench.models import MoEConfig, QwenMoEDecoder, param_count


def _memory(monkeypatch, nbytes):
    monkeypatch.setattr(memory_limits, "device_memory", lambda device: nbytes)


def test_a_decoder_too_large_for_memory_is_refused_before_allocating():
    """A hidden size of 10**9 (tens of terabytes of weights): refused with the bytes needed
    and the meta-device hint, on any machine; under the meta device it builds."""
    config = MoEConfig.tiny(hidden_size=10**9)
    needed = param_count(config)["total"] * 4
    with pytest.raises(ArgumentValueError, match=rf"{needed:,} bytes\) of weights, more than .*torch.device\('meta'\)"):
        QwenMoEDecoder(config)
    with torch.device("meta"):
        assert QwenMoEDecoder(config).lm_head.weight.shape[1] == 10**9


def test_the_decoder_limit_is_the_memory_of_the_device(monkeypatch):
    """With 1 MiB of memory the tiny decoder (more bytes than that) is refused; with its
    bytes exactly it builds."""
    needed = param_count(MoEConfig.tiny())["total"] * 4
    _memory(monkeypatch, needed - 1)
    with pytest.raises(ArgumentValueError, match=f"{needed:,} bytes"):
        QwenMoEDecoder(MoEConfig.tiny())
    _memory(monkeypatch, needed)
    assert sum(p.numel() for p in QwenMoEDecoder(MoEConfig.tiny()).parameters()) * 4 == needed


def _million_experts():
    from workbench import hf

    config = hf.load_config("qwen3_moe")
    config.num_experts = 1_000_000
    return config


def test_a_transformers_model_too_large_for_memory_is_refused_before_allocating(monkeypatch):
    """Qwen3-MoE with 1,000,000 experts on a machine of 16 GiB: refused with the bytes its
    weights need (counted on the meta device) and the shape-only hint; shape-only it loads."""
    pytest.importorskip("transformers")
    from workbench import hf
    from workbench.hf.configs import HFError

    shape_only = hf.load_model(_million_experts(), shape_only=True)
    needed = sum(p.numel() * p.element_size() for p in [*shape_only.parameters(), *shape_only.buffers()])
    _memory(monkeypatch, 16 << 30)
    with pytest.raises(HFError, match=rf"{needed:,} bytes\) of weights, more than the 16.0 GiB .*shape_only=True"):
        hf.load_model(_million_experts())
    assert shape_only.model.layers[0].mlp.experts.gate_up_proj.device.type == "meta"


def test_a_transformers_model_too_large_for_any_machine_is_refused():
    """100,000,000 experts (terabytes of weights): refused on any machine, at once."""
    pytest.importorskip("transformers")
    from workbench import hf
    from workbench.hf.configs import HFError

    config = _million_experts()
    config.num_experts = 100_000_000
    with pytest.raises(HFError, match="of weights, more than"):
        hf.load_model(config)
