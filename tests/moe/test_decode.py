"""Multi-token decode starts from a real token: the config's BOS, or a seeded token; a
decode that would feed only pad tokens is refused."""

import functools

import pytest
import torch

import workbench as wb
from workbench import hf
from workbench.models import QwenMoEDecoder
from workbench.moe.decode import DecodeError, decode
from workbench.moe.strategies import partial_offload
from workbench.moe.strategies import all_on_device

from conftest import moe_tiny


@functools.lru_cache(maxsize=None)
def hf_step():
    """The tiny Qwen3-MoE decode step: its config has bos_token_id 1 and pad_token_id 0."""
    model = hf.load_model("qwen3_moe")
    return model, hf.capture_decode(model, "static", past=4, max_cache_len=8)


def test_default_first_token_is_the_configs_bos_and_its_logits_say_something():
    """Without first_token a transformers step starts from its config's BOS (not the pad
    token 0): step 0 is fed the BOS, its logits are not all zeros, and every step equals eager."""
    model, step = hf_step()
    assert model.config.bos_token_id == 1 and model.config.pad_token_id == 0
    result = decode(wb.plan(all_on_device().apply(step.program)), 3, reference=step.module)
    assert result.tokens[0] == model.config.bos_token_id
    logits = wb.runtime.to_host(result.steps[0].outputs[0])
    assert logits.abs().max() > 0
    assert result.matches_eager == (True,) * 3


def test_a_pad_first_token_is_refused_with_the_fix():
    """first_token equal to the config's pad_token_id is a DecodeError that names the pad
    token and the BOS default; a token outside the vocabulary is one too."""
    _, step = hf_step()
    plan = wb.plan(all_on_device().apply(step.program))
    with pytest.raises(DecodeError, match=r"first_token=0 is the pad token.*config's BOS \(1\)"):
        decode(plan, 2, first_token=0, reference=step.module)
    with pytest.raises(DecodeError, match="pad token"):
        decode(plan, 2, first_token=0)  # the captured model's own config is read too
    with pytest.raises(DecodeError, match=r"first_token must be a token id in \[0, 128\)"):
        decode(plan, 2, first_token=128)


def test_builtin_decoder_starts_from_a_seeded_token():
    """The built-in decoder's config names no BOS: the first token is drawn with ``seed``,
    the same for the same seed, and the decode equals eager from it."""
    config, _, _, program = moe_tiny()
    plan = wb.plan(partial_offload(1).apply(program), "greedy")
    eager = QwenMoEDecoder(config).eval()
    firsts = {seed: decode(plan, 1, seed=seed).tokens[0] for seed in range(4)}
    assert decode(plan, 1, seed=0).tokens[0] == firsts[0]
    assert len(set(firsts.values())) > 1  # the seed draws it
    assert all(0 <= t < config.vocab_size for t in firsts.values())
    result = decode(plan, 3, reference=eager, seed=2)
    assert result.tokens[0] == firsts[2] and result.matches_eager == (True,) * 3
    assert decode(plan, 1, first_token=0).tokens == (0,)  # no pad token in this config: 0 is a token like any
    with torch.no_grad():
        assert eager(torch.tensor([[0]]), torch.tensor([0]), *eager.init_caches(1))[0].abs().max() > 0
