"""Tests of the Qwen-3.5-MoE-shaped decoder, its config and its size formulas."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from workbench.models import ConfigError, MoEConfig, QwenMoEDecoder, cache_bytes, cache_specs, param_count
from workbench.models.config import full_config_path

# Published values (Hugging Face key names) the shipped full config must carry.
PUBLISHED = dict(
    vocab_size=248320,
    hidden_size=2048,
    num_hidden_layers=40,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    partial_rotary_factor=0.25,
    rope_theta=1e7,
    rms_norm_eps=1e-6,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    full_attention_interval=4,
)


@pytest.fixture(scope="module")
def tiny() -> QwenMoEDecoder:
    return QwenMoEDecoder(MoEConfig.tiny()).eval()


def _random_caches(model: QwenMoEDecoder, batch: int, seed: int = 1) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(c.shape, generator=gen, dtype=c.dtype) * 0.5 for c in model.init_caches(batch))


def _hf_dict(config: MoEConfig) -> dict:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


# -- config ------------------------------------------------------------------


def test_full_config_carries_published_values():
    """The shipped JSON loads to the published 35B-A3B hyperparameters in bfloat16."""
    full = MoEConfig.full()
    assert {k: getattr(full, k) for k in PUBLISHED} == PUBLISHED
    assert full.dtype == "bfloat16" and full.torch_dtype == torch.bfloat16
    assert full.rotary_dim == 64
    assert full_config_path().name == "qwen3_5_moe_35b_a3b.json"


def test_tiny_has_both_layer_kinds():
    """The tiny preset keeps the published structure: linear layers and at least one full-attention layer."""
    t = MoEConfig.tiny()
    assert t.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert t.num_experts_per_tok < t.num_experts and t.dtype == "float32"


@pytest.mark.parametrize("interval", [1, 2, 4])
def test_layer_types_follow_interval(interval):
    """Layer i is full attention exactly when (i+1) % interval == 0."""
    c = MoEConfig.tiny(num_hidden_layers=8, full_attention_interval=interval)
    full = [i for i, t in enumerate(c.layer_types) if t == "full_attention"]
    assert full == [i for i in range(8) if (i + 1) % interval == 0]
    assert MoEConfig.full().layer_types.count("full_attention") == 10
    assert MoEConfig.full().layer_types[3] == "full_attention"


def test_from_json_flat_nested_and_rope_parameters(tmp_path):
    """Flat, text_config-nested and rope_parameters-style files give the same config; extra keys are ignored."""
    tiny = MoEConfig.tiny()
    flat = _hf_dict(tiny) | {"architectures": ["X"], "some_unknown_key": [1, 2]}
    nested = {"model_type": "m", "vision_config": {"depth": 3}, "text_config": _hf_dict(tiny)}
    rope_style = _hf_dict(tiny)
    rope_style["rope_parameters"] = {
        "rope_theta": rope_style.pop("rope_theta"),
        "partial_rotary_factor": rope_style.pop("partial_rotary_factor"),
    }
    for i, raw in enumerate([flat, nested, rope_style]):
        p = tmp_path / f"c{i}.json"
        p.write_text(json.dumps(raw))
        assert MoEConfig.from_json(p) == tiny


def test_from_json_defaults_and_hf_dtype(tmp_path):
    """max_seq_len and dtype are optional; HF's torch_dtype key sets dtype; an int rope_theta is accepted."""
    raw = _hf_dict(MoEConfig.tiny())
    del raw["max_seq_len"], raw["dtype"]
    raw["rope_theta"] = 10000
    raw["torch_dtype"] = "bfloat16"
    p = tmp_path / "c.json"
    p.write_text(json.dumps(raw))
    c = MoEConfig.from_json(p)
    assert c.max_seq_len == 4096 and c.dtype == "bfloat16" and c.rope_theta == 10000.0


def test_missing_keys_are_named(tmp_path):
    """A file lacking required keys fails with an error naming every missing key."""
    raw = _hf_dict(MoEConfig.tiny())
    del raw["num_experts"], raw["head_dim"]
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"text_config": raw}))
    with pytest.raises(ConfigError, match="missing required keys") as e:
        MoEConfig.from_json(p)
    assert "num_experts" in str(e.value) and "head_dim" in str(e.value)
    assert "vocab_size" not in str(e.value)


def test_unreadable_files_are_clear_errors(tmp_path):
    """A missing file or bad JSON is a ConfigError that names the file."""
    with pytest.raises(ConfigError, match="not found"):
        MoEConfig.from_json(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        MoEConfig.from_json(bad)


def test_layer_types_that_break_the_interval_rule_are_rejected(tmp_path):
    """An explicit layer_types list that our interval rule cannot build is an error, not silently ignored."""
    raw = _hf_dict(MoEConfig.tiny())
    raw["layer_types"] = ["full_attention", "linear_attention", "linear_attention", "linear_attention"]
    p = tmp_path / "c.json"
    p.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="layer_types"):
        MoEConfig.from_json(p)


@pytest.mark.parametrize(
    "override, needle",
    [
        (dict(num_attention_heads=3), "multiple of num_key_value_heads"),
        (dict(linear_num_value_heads=3), "linear_num_value_heads=3 must be a multiple"),
        (dict(num_experts_per_tok=9), "num_experts_per_tok=9 must be <= num_experts=8"),
        (dict(hidden_size=0), "hidden_size=0 must be a positive integer"),
        (dict(num_experts=-2), "num_experts=-2 must be a positive integer"),
        (dict(head_dim=16.0), "head_dim=16.0 must be an integer"),
        (dict(max_seq_len=True), "max_seq_len=True must be an integer"),
        (dict(rms_norm_eps=0.0), "rms_norm_eps=0.0 must be > 0"),
        (dict(rope_theta=float("inf")), "rope_theta=inf must be a finite number"),
        (dict(partial_rotary_factor=1.5), "partial_rotary_factor=1.5 must be in"),
        (dict(partial_rotary_factor=0.0625), "even number >= 2"),
        (dict(linear_conv_kernel_dim=1), "linear_conv_kernel_dim=1 must be >= 2"),
        (dict(dtype="int8"), "dtype='int8' is not one of"),
    ],
)
def test_invalid_values_are_rejected(override, needle):
    """Each inconsistent or non-positive field fails with a message naming it and what is valid."""
    with pytest.raises(ConfigError, match=None) as e:
        MoEConfig.tiny(**override)
    assert needle in str(e.value)


# -- sizes -------------------------------------------------------------------


def test_param_count_tiny_matches_module_exactly(tiny):
    """The hand formula equals the real module's parameter count, in total and per component."""
    pc = param_count(tiny.config)
    numel = {n: p.numel() for n, p in tiny.named_parameters()}
    assert pc["total"] == sum(numel.values())

    def total(pred):
        return sum(v for n, v in numel.items() if pred(n))

    assert pc["experts"] == total(lambda n: ".mlp.experts." in n)
    assert pc["router"] == total(lambda n: n.endswith(".mlp.gate.weight"))
    assert pc["shared_expert"] == total(lambda n: ".mlp.shared_expert" in n)
    assert pc["attention"] == total(lambda n: ".self_attn." in n)
    assert pc["deltanet"] == total(lambda n: ".linear_attn." in n)
    assert pc["embedding"] == numel["embed_tokens.weight"]
    assert pc["lm_head"] == numel["lm_head.weight"]
    assert pc["per_expert"] * tiny.config.num_experts == numel["layers.0.mlp.experts.w1"] + numel["layers.0.mlp.experts.w2"]


def test_param_count_full_matches_meta_module_and_is_35b():
    """The full config's formula equals the meta module's numel sum; ~35 B total, ~3 B active per token."""
    c = MoEConfig.full()
    with torch.device("meta"):
        m = QwenMoEDecoder(c)
    pc = param_count(c)
    assert pc["total"] == sum(p.numel() for p in m.parameters())
    assert 34e9 <= pc["total"] <= 36e9
    assert 2.5e9 <= pc["active_per_token"] <= 3.5e9
    # Active differs from total by the unrouted experts and the unread embedding rows.
    L, E, k, H, V = c.num_hidden_layers, c.num_experts, c.num_experts_per_tok, c.hidden_size, c.vocab_size
    assert pc["total"] - pc["active_per_token"] == L * (E - k) * pc["per_expert"] + (V - 1) * H


def test_cache_bytes_match_real_caches(tiny):
    """cache_bytes equals the bytes of init_caches, for tiny and (on meta) for the full config."""
    caches = tiny.init_caches(batch=3)
    assert cache_bytes(tiny.config, 3) == sum(t.numel() * t.element_size() for t in caches)
    full = MoEConfig.full()
    with torch.device("meta"):
        m = QwenMoEDecoder(full)
    meta_caches = m.init_caches(2)
    assert all(t.is_meta for t in meta_caches)
    assert cache_bytes(full, 2) == sum(t.numel() * t.element_size() for t in meta_caches)
    # 10 full layers with K and V of (2, 2, 4096, 256) bf16, 30 linear layers with conv + recurrent state.
    assert cache_bytes(full, 2) == 2 * 2 * (10 * 2 * 2 * 4096 * 256 + 30 * (8192 * 3 + 32 * 128 * 128))


# -- the decode step ---------------------------------------------------------


def test_cache_layout_follows_layer_types(tiny):
    """Two caches per layer, in layer order, with the documented shapes."""
    c = tiny.config
    specs = cache_specs(c, batch=2)
    assert [s.name for s in specs[-2:]] == ["layers.3.key_cache", "layers.3.value_cache"]
    assert specs[-1].shape == (2, c.num_key_value_heads, c.max_seq_len, c.head_dim)
    assert specs[0].shape == (2, c.linear_conv_dim, c.linear_conv_kernel_dim - 1)
    assert specs[1].shape == (2, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
    out = tiny(*tiny.example_inputs(batch=2))
    assert len(out) == 1 + len(specs)
    assert [tuple(t.shape) for t in out[1:]] == [s.shape for s in specs]


def test_same_seed_same_logits_and_no_global_rng_use():
    """Weights are a function of the seed only: same seed -> same logits, other seed -> other; global RNG untouched."""
    c = MoEConfig.tiny()
    state = torch.get_rng_state()
    a, b, other = QwenMoEDecoder(c, seed=0), QwenMoEDecoder(c, seed=0), QwenMoEDecoder(c, seed=1)
    assert torch.equal(state, torch.get_rng_state())
    inputs = a.example_inputs(batch=2)
    with torch.no_grad():
        la, lb, lo = a(*inputs)[0], b(*inputs)[0], other(*inputs)[0]
    assert torch.equal(la, lb)
    assert not torch.allclose(la, lo)


def test_logits_are_finite_and_order_one(tiny):
    """Random tokens give finite logits of O(1) scale (weights are scaled, nothing explodes or vanishes)."""
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(tiny.config.vocab_size, (16, 1), generator=gen)
    with torch.no_grad():
        logits = tiny(tokens, torch.tensor([0]), *tiny.init_caches(16))[0]
    assert torch.isfinite(logits).all()
    assert 0.3 < logits.std().item() < 3.0


def test_second_step_uses_the_cache_and_inputs_are_not_mutated(tiny):
    """Decoding t1 then t2 through the returned caches differs from decoding t2 alone; inputs stay unchanged."""
    tok1, tok2 = torch.tensor([[5], [7]]), torch.tensor([[11], [13]])
    caches0 = tiny.init_caches(2)
    snapshot = [c.clone() for c in caches0]
    with torch.no_grad():
        out1 = tiny(tok1, torch.tensor([0]), *caches0)
        two_step = tiny(tok2, torch.tensor([1]), *out1[1:])[0]
        fresh = tiny(tok2, torch.tensor([1]), *tiny.init_caches(2))[0]
    assert all(torch.equal(a, b) for a, b in zip(caches0, snapshot))
    assert not torch.allclose(two_step, fresh, atol=1e-4)
    # Every returned cache moved away from zero: each layer really updated its state.
    assert all(c.abs().sum() > 0 for c in out1[1:])


def test_full_attention_writes_new_k_at_position_only(tiny):
    """The K/V caches returned by a full-attention layer hold the new K/V at `position` and the old ones elsewhere."""
    attn = tiny.layers[3].self_attn
    seen = {}
    h = attn.register_forward_hook(lambda mod, args, out: seen.update(x=args[0]))
    batch, pos = 2, 5
    caches = _random_caches(tiny, batch)
    tokens, position = tiny.example_inputs(batch, pos)[:2]
    try:
        with torch.no_grad():
            out = tiny(tokens, position, *caches)
    finally:
        h.remove()
    k_old, v_old, k_new, v_new = caches[6], caches[7], out[7], out[8]

    # Recompute K and V for this token from the layer's own weights.
    c = tiny.config
    q_len = 2 * c.num_attention_heads * c.head_dim
    kv_len = c.num_key_value_heads * c.head_dim
    qkv = seen["x"] @ attn.qkv_proj.weight.T
    k = qkv[:, q_len : q_len + kv_len].reshape(batch, c.num_key_value_heads, c.head_dim)
    v = qkv[:, q_len + kv_len :].reshape(batch, c.num_key_value_heads, c.head_dim)
    k = attn.k_norm(k)
    # RoPE by hand on the first rotary_dim dims: pairs (j, j + rot/2) rotated by pos * theta^(-2j/rot).
    rot = c.rotary_dim
    freqs = pos * c.rope_theta ** (-torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    x1, x2 = k[..., : rot // 2], k[..., rot // 2 : rot]
    k_rot = torch.cat([x1 * freqs.cos() - x2 * freqs.sin(), x2 * freqs.cos() + x1 * freqs.sin(), k[..., rot:]], -1)

    torch.testing.assert_close(k_new[:, :, pos], k_rot)
    torch.testing.assert_close(v_new[:, :, pos], v)
    others = [i for i in range(c.max_seq_len) if i != pos]
    assert torch.equal(k_new[:, :, others], k_old[:, :, others])
    assert torch.equal(v_new[:, :, others], v_old[:, :, others])


def test_attention_sees_past_slots_but_not_future_ones(tiny):
    """Changing cache slots after `position` leaves logits unchanged; changing a slot before it changes them."""
    batch, pos = 1, 4
    tokens, position = tiny.example_inputs(batch, pos)[:2]
    caches = list(_random_caches(tiny, batch))
    with torch.no_grad():
        base = tiny(tokens, position, *caches)[0]
        future = [c.clone() for c in caches]
        future[6][:, :, pos + 1 :] += 3.0
        future[7][:, :, pos + 1 :] -= 3.0
        past = [c.clone() for c in caches]
        past[7][:, :, pos - 1] += 3.0
        assert torch.equal(tiny(tokens, position, *future)[0], base)
        assert not torch.allclose(tiny(tokens, position, *past)[0], base)


def test_full_attention_output_matches_gated_gqa_reference(tiny):
    """The full-attention output equals per-head softmax attention over slots <= position, sigmoid-gated, then o_proj."""
    attn = tiny.layers[3].self_attn
    c = tiny.config
    B, pos = 2, 6
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(B, c.hidden_size, generator=gen)
    k_cache = torch.randn(B, c.num_key_value_heads, c.max_seq_len, c.head_dim, generator=gen)
    v_cache = torch.randn_like(k_cache)
    position = torch.tensor([pos])
    rope = (torch.ones(1, c.rotary_dim), torch.zeros(1, c.rotary_dim))  # identity rotation: RoPE is tested above
    with torch.no_grad():
        out, k_new, v_new = attn(x, position, rope, k_cache, v_cache)
        nh, D, group = c.num_attention_heads, c.head_dim, c.num_attention_heads // c.num_key_value_heads
        qg = (x @ attn.qkv_proj.weight.T)[:, : 2 * nh * D].view(B, nh, 2 * D)
        q, gate = attn.q_norm(qg[..., :D]), qg[..., D:]
        heads = torch.empty(B, nh, D)
        for b in range(B):
            for h in range(nh):
                kv = h // group  # query head h reads KV head kv
                keys, values = k_new[b, kv, : pos + 1], v_new[b, kv, : pos + 1]
                p = torch.softmax(keys @ q[b, h] / math.sqrt(D), dim=0)
                heads[b, h] = (p @ values) * torch.sigmoid(gate[b, h])
        expected = heads.reshape(B, nh * D) @ attn.o_proj.weight.T
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_block_is_prenorm_residual_mixer_then_moe(tiny):
    """A decoder block computes h = x + mixer(norm1(x)); out = h + moe(norm2(h))."""
    layer = tiny.layers[1]
    c = tiny.config
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, c.hidden_size, generator=gen)
    conv = torch.randn(2, c.linear_conv_dim, c.linear_conv_kernel_dim - 1, generator=gen)
    rec = torch.randn(2, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim, generator=gen)
    rope = (torch.ones(1, c.rotary_dim), torch.zeros(1, c.rotary_dim))
    with torch.no_grad():
        out, *_ = layer(x, torch.tensor([0]), rope, conv, rec)
        h = x + layer.linear_attn(layer.input_layernorm(x), conv, rec)[0]
        expected = h + layer.mlp(layer.post_attention_layernorm(h))
    torch.testing.assert_close(out, expected)


def test_deltanet_step_matches_the_delta_rule(tiny):
    """One Gated DeltaNet step equals the delta rule written out per head, and the conv state shifts by one column."""
    layer = tiny.layers[0].linear_attn
    c = tiny.config
    gen = torch.Generator().manual_seed(7)
    B = 2
    x = torch.randn(B, c.hidden_size, generator=gen)
    conv_state = torch.randn(B, c.linear_conv_dim, c.linear_conv_kernel_dim - 1, generator=gen)
    rec = torch.randn(B, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim, generator=gen)
    with torch.no_grad():
        out, new_conv, new_rec = layer(x, conv_state, rec)

        kd, vd, hv, hk = c.linear_key_dim, c.linear_value_dim, c.linear_num_value_heads, c.linear_num_key_heads
        proj = x @ layer.in_proj.weight.T
        mixed = proj[:, : c.linear_conv_dim]
        z = proj[:, c.linear_conv_dim : c.linear_conv_dim + vd]
        b = proj[:, c.linear_conv_dim + vd : c.linear_conv_dim + vd + hv]
        a = proj[:, c.linear_conv_dim + vd + hv :]
        window = torch.cat([conv_state, mixed[:, :, None]], -1)
        conv = F.silu(torch.einsum("bck,ck->bc", window, layer.conv_weight[:, 0]))
        assert torch.equal(new_conv, window[:, :, 1:])

        q, k, v = conv[:, :kd], conv[:, kd : 2 * kd], conv[:, 2 * kd :]
        expected_o = torch.empty(B, hv, c.linear_value_head_dim)
        expected_s = torch.empty_like(rec)
        for bi in range(B):
            for h in range(hv):
                kh = h // (hv // hk)  # value head h reads key head kh
                dk = c.linear_key_head_dim
                qh = F.normalize(q[bi, kh * dk : (kh + 1) * dk], dim=0, eps=0) / math.sqrt(dk)
                khv = F.normalize(k[bi, kh * dk : (kh + 1) * dk], dim=0, eps=0)
                vh = v[bi, h * c.linear_value_head_dim : (h + 1) * c.linear_value_head_dim]
                g = -layer.A_log[h].exp() * F.softplus(a[bi, h] + layer.dt_bias[h])
                beta = torch.sigmoid(b[bi, h])
                S = rec[bi, h] * g.exp()
                S = S + torch.outer(khv, beta * (vh - S.T @ khv))
                expected_s[bi, h] = S
                expected_o[bi, h] = S.T @ qh
        torch.testing.assert_close(new_rec, expected_s, rtol=1e-4, atol=1e-5)
        zh = z.view(B, hv, -1)
        o = expected_o * torch.rsqrt(expected_o.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps)
        o = o * layer.norm.weight * F.silu(zh)
        torch.testing.assert_close(out, o.reshape(B, vd) @ layer.out_proj.weight.T, rtol=1e-4, atol=1e-5)


# -- the sparse MoE ----------------------------------------------------------


def test_moe_equals_dense_top_k_reference(tiny):
    """SparseMoE equals running every expert densely and mixing the top-k with softmax weights, plus the gated shared expert."""
    moe = tiny.layers[1].mlp
    c = tiny.config
    x = torch.randn(5, c.hidden_size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = moe(x)
        logits = x @ moe.gate.weight.T
        top, idx = logits.topk(c.num_experts_per_tok, dim=-1)
        w = top.softmax(-1)
        expected = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(c.num_experts_per_tok):
                e = idx[t, j]
                gate, up = (moe.experts.w1[e] @ x[t]).chunk(2)
                expected[t] += w[t, j] * (moe.experts.w2[e] @ (F.silu(gate) * up))
        shared_gate, shared_up = (x @ moe.shared_expert.gate_up_proj.weight.T).chunk(2, -1)
        shared = (F.silu(shared_gate) * shared_up) @ moe.shared_expert.down_proj.weight.T
        expected += torch.sigmoid(x @ moe.shared_expert_gate.weight.T) * shared
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_only_routed_experts_affect_the_output():
    """Perturbing an expert no token was routed to leaves logits bit-identical; perturbing a routed one changes them."""
    model = QwenMoEDecoder(MoEConfig.tiny()).eval()
    layer = 2
    moe = model.layers[layer].mlp
    seen = {}
    h = moe.register_forward_pre_hook(lambda mod, args: seen.update(x=args[0]))
    inputs = model.example_inputs(batch=2, position=0)
    with torch.no_grad():
        base = model(*inputs)[0]
        h.remove()
        _, idx = moe.route(seen["x"])
        routed = set(idx.flatten().tolist())
        unrouted = sorted(set(range(model.config.num_experts)) - routed)
        assert unrouted and len(routed) <= 2 * model.config.num_experts_per_tok

        for w in (moe.experts.w1, moe.experts.w2):
            saved = w.clone()
            w[unrouted[0]] += 1.0
            assert torch.equal(model(*inputs)[0], base)
            w.copy_(saved)
            w[min(routed)] += 1.0
            assert not torch.allclose(model(*inputs)[0], base)
            w.copy_(saved)


# -- export and meta ---------------------------------------------------------


def test_export_matches_eager_with_caches_as_graph_io(tiny):
    """torch.export of the tiny decode step runs like eager (atol 1e-5); caches are plain graph inputs/outputs, never mutated."""
    inputs = tiny.example_inputs(batch=2, position=3)
    inputs = inputs[:2] + _random_caches(tiny, 2)
    ep = torch.export.export(tiny, inputs, strict=False)
    sig = ep.graph_signature
    n_caches = len(inputs) - 2
    assert len(sig.user_inputs) == 2 + n_caches and len(sig.user_outputs) == 1 + n_caches
    assert not sig.user_inputs_to_mutate and not sig.buffers_to_mutate
    with torch.no_grad():
        eager = tiny(*inputs)
    exported = ep.module()(*inputs)
    for a, b in zip(eager, exported):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)

    # The routed experts are gathered straight from the stacked parameters.
    param_of = sig.inputs_to_parameters
    gathered = {
        param_of[n.args[0].name]
        for n in ep.graph.nodes
        if n.target == torch.ops.aten.index_select.default and n.args[0].name in param_of
    }
    assert gathered == {f"layers.{i}.mlp.experts.{w}" for i in range(4) for w in ("w1", "w2")}


def test_meta_construction_allocates_nothing():
    """Built under torch.device('meta'), the full model has only meta parameters, meta inputs and meta outputs of the right shape."""
    with torch.device("meta"):
        m = QwenMoEDecoder(MoEConfig.full())
    assert all(p.is_meta for p in m.parameters())
    assert all(p.dtype == torch.bfloat16 for p in m.parameters())
    assert not list(m.buffers())
    inputs = m.example_inputs(batch=1, position=7)
    assert all(t.is_meta for t in inputs)
    small = QwenMoEDecoder(MoEConfig.tiny()).to("meta")
    out = small(*small.example_inputs(batch=3))
    assert out[0].is_meta and tuple(out[0].shape) == (3, 512)


def test_bad_inputs_are_clear_errors(tiny):
    """Wrong cache count, token shape, position dtype or position range fail with messages that say what is expected."""
    tokens, position, *caches = tiny.example_inputs(batch=1)
    with pytest.raises(ValueError, match="expected 8 cache tensors"):
        tiny(tokens, position, *caches[:-1])
    with pytest.raises(ValueError, match=r"tokens must be \(B, 1\) int64"):
        tiny(tokens.view(1), position, *caches)
    with pytest.raises(ValueError, match=r"position must be a \(1,\) int64"):
        tiny(tokens, position.float(), *caches)
    with pytest.raises(ValueError, match="cache layers.0.conv_state must have shape"):
        tiny(tokens, position, caches[0][..., :1], *caches[1:])
    with pytest.raises(ValueError, match=r"position must be an integer in \[0, max_seq_len=32\)"):
        tiny.example_inputs(position=32)
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        tiny.init_caches(0)


@pytest.mark.slow
def test_full_meta_export_peak_rss_under_4gb():
    """Shape-only export of the 35B config (meta weights and inputs) succeeds with peak RSS far below 4 GB."""
    code = textwrap.dedent(
        """
        import resource, torch
        from workbench.models import MoEConfig, QwenMoEDecoder
        with torch.device("meta"):
            m = QwenMoEDecoder(MoEConfig.full())
        ep = torch.export.export(m, m.example_inputs(), strict=False)
        out = [n for n in ep.graph.nodes if n.op == "output"][0].args[0]
        assert tuple(out[0].meta["val"].shape) == (1, 248320)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    peak_mb = int(res.stdout.strip().splitlines()[-1]) / 1024  # ru_maxrss is KiB on Linux
    assert peak_mb < 2048, f"peak RSS {peak_mb:.0f} MB"
