"""The MoE walkthrough: every strategy runs correctly; tables are computed, not written in;
the full-size analysis fits in memory and accounts for every parameter."""

import functools
import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch

from workbench.app import walkthrough as wt
from workbench.models import MoEConfig, QwenMoEDecoder, param_count
from workbench.moe.strategies import expert_streaming
from workbench.machine import CostModel


@functools.lru_cache(maxsize=None)
def _tiny():
    return wt.tiny_results()


def test_every_strategy_matches_eager_on_sim():
    """All eight variants (six plus expert_streaming+prefetch with and without skips) run
    on the simulated accelerator and equal eager PyTorch."""
    results = _tiny()
    assert len(results) == 8 and all(r.matches_eager for r in results)
    assert [r.strategy.prefetch for r in results] == [False] * 6 + [True] * 2


def test_table_numbers_come_from_the_runs():
    """Table cells equal the underlying graphs, plans and timelines."""
    results = _tiny()
    table = wt.strategy_table(results)
    for i, r in enumerate(results):
        row = table.iloc[i]
        assert row["h2d"] == r.device_graph.copy_counts()["h2d"]
        assert row["h2d_KiB/token"] == round(r.device_graph.copy_bytes()["h2d"] / 1024, 2)
        assert row["us/token"] == round(r.run.time_us, 2)
        assert row["arena_cuda:0_KiB"] == round(r.plan.arena_bytes["cuda:0"] / 1024, 2)
        assert row["h2d_moved_KiB/token"] == round(r.run.copy_bytes_by_kind()["h2d"] / 1024, 2)
        # the timeline moved exactly the bytes the graph's copies say, except the rows a
        # prefetch already held (copied on the device, not over the link)
        held = sum(p.device_bytes for p in r.run.prefetch)
        assert r.run.copy_bytes_by_kind()["h2d"] == r.device_graph.copy_bytes()["h2d"] - held
        assert (held > 0) == r.strategy.prefetch
        if r.strategy.prefetch:
            assert row["prefetch_hit_rate"] == round(r.run.prefetch_hit_rate, 3)
        else:
            assert pd.isna(row["prefetch_hit_rate"])


def test_skip_flags_remove_input_output_copies():
    """With skip flags on, all-on-device moves nothing; with them off it moves inputs/outputs."""
    by_label = {r.strategy.label: r for r in _tiny()}
    assert sum(by_label["all_on_device+skip"].device_graph.copy_counts().values()) == 0
    assert by_label["all_on_device"].device_graph.copy_counts()["h2d"] > 0


def test_streaming_moves_expert_bytes_experts_on_host_moves_activations():
    """Per token, streaming moves k expert slabs per layer over h2d; experts-on-host moves
    only activations (far fewer bytes)."""
    cfg = MoEConfig.tiny()
    by_label = {r.strategy.label: r for r in _tiny()}
    slab = 3 * cfg.hidden_size * cfg.moe_intermediate_size * 4
    expected = cfg.num_hidden_layers * cfg.num_experts_per_tok * slab
    assert by_label["expert_streaming+skip"].device_graph.copy_bytes()["h2d"] == expected
    assert by_label["experts_on_host+skip"].device_graph.copy_bytes()["h2d"] < expected / 10


def test_prefetch_moves_fewer_bytes_than_its_upper_bound_and_more_than_plain_streaming():
    """Tiny model with prefetch: the link carries the plain streaming bytes (every layer's
    k slabs: layer 0 gathered, later layers prefetched) plus the slabs the hints missed;
    the measured hit rate says how many."""
    cfg = MoEConfig.tiny()
    by_label = {r.strategy.label: r for r in _tiny()}
    plain = by_label["expert_streaming+skip"].run.copy_bytes_by_kind()["h2d"]
    hinted = by_label["expert_streaming+prefetch+skip"].run
    k, L = cfg.num_experts_per_tok, cfg.num_hidden_layers
    slab = 3 * cfg.hidden_size * cfg.moe_intermediate_size * 4
    missed = sum(p.misses for p in hinted.prefetch) // 2  # w1 and w2 miss together
    assert hinted.copy_bytes_by_kind()["h2d"] == plain + missed * slab
    assert hinted.prefetch_hit_rate == 1 - missed / (k * (L - 1))


def test_measured_hit_rate_counts_per_token_agreement():
    """measured_hit_rate equals |chosen ∩ predicted| / k per token and layer, computed by
    hand from the plain model's post-attention states; on the tiny model it is high."""
    cfg = MoEConfig.tiny()
    tokens = 64
    model = QwenMoEDecoder(cfg).eval()
    states = []
    hooks = [l.post_attention_layernorm.register_forward_pre_hook(lambda m, a: states.append(a[0])) for l in model.layers]
    ids = torch.randint(cfg.vocab_size, (tokens, 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(ids, torch.tensor([0]), *model.init_caches(tokens))
        for h in hooks:
            h.remove()
        layers, hits = list(model.layers), 0
        for i in range(1, len(layers)):
            chosen = layers[i].mlp.route(layers[i].post_attention_layernorm(states[i]))[1]
            predicted = layers[i].mlp.route(layers[i].post_attention_layernorm(states[i - 1]))[1]
            hits += sum(len(set(c.tolist()) & set(p.tolist())) for c, p in zip(chosen, predicted))
    rate = wt.measured_hit_rate(cfg, tokens=tokens)
    assert rate == hits / (tokens * cfg.num_experts_per_tok * (len(layers) - 1))
    assert 0.5 < rate <= 1.0


def test_prefetch_sensitivity_brackets_plain_streaming():
    """Shape-only (tiny config): with prefetch at hit rate 1 the link carries exactly plain
    streaming's bytes; at 0 every predicted slab is fetched again (plain + (L-1)·k slabs);
    in between, linearly. Cells are ``time_decode`` of each plan's layout."""
    cfg = MoEConfig.tiny()
    res = wt.full_size_results(
        cfg, strategies=[expert_streaming(), expert_streaming(prefetch=True)], prefetch_hit_rate=0.5, links=["pcie_gen5"]
    )
    table = wt.prefetch_sensitivity(res, hit_rates=[0.0, 0.5, 1.0], links=["pcie_gen5"])
    slab = 3 * cfg.hidden_size * cfg.moe_intermediate_size * 4
    extra = (cfg.num_hidden_layers - 1) * cfg.num_experts_per_tok * slab
    plain = res[0].tokens["pcie_gen5"].link_bytes
    assert list(table["link_MiB/token"]) == [round(b / 2**20, 3) for b in (plain, plain + extra, plain + extra / 2, plain)]
    assert res[1].prefetch_hit_rate == 0.5
    assert table["tok/s pcie_gen5"][2] == round(res[1].tokens["pcie_gen5"].tok_s, 2)  # rate 0.5
    # the schedule decides what hides: every share is a share, and a prefetch that fetches
    # fewer slabs again (a higher hit rate) is never slower
    assert all(0 <= h <= 1 for h in table["hidden pcie_gen5"])
    assert table["tok/s pcie_gen5"][1] <= table["tok/s pcie_gen5"][2] <= table["tok/s pcie_gen5"][3]
    with pytest.raises(ValueError, match=r"expert_streaming\+prefetch\+skip"):
        wt.prefetch_sensitivity(res[:1])


def test_breakeven_matches_the_roofline_ratio():
    """The break-even tokens per expert sits near device FLOP/s ÷ link bytes/s (bf16: one
    byte per FLOP... two bytes per parameter, two FLOPs per parameter per token), scaled
    up by the share of the copy time that is latency rather than bytes."""
    table = wt.streaming_breakeven()
    for row in table.itertuples(index=False):
        latency_us = CostModel.preset("h200", link=row.link).h2d_latency * 1e6
        latency_scale = row.copy_us / (row.copy_us - latency_us)
        assert 0.5 < row.breakeven_tokens_per_expert / (row.device_FLOPs_per_link_byte * latency_scale) < 1.1
    assert list(table.breakeven_tokens_per_expert) == sorted(table.breakeven_tokens_per_expert, reverse=True)


FULL_SIZE_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    from workbench.app import walkthrough as wt
    from workbench.moe.strategies import all_on_device, experts_on_host
    res = wt.full_size_results(strategies=[all_on_device(), experts_on_host()], links=["pcie_gen5"])
    out = {r.strategy.label: {str(d): n for d, n in r.device_graph.constant_bytes.items()} for r in res}
    out["tok_s"] = {r.strategy.label: r.tokens["pcie_gen5"].tok_s for r in res}
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_full_size_analysis_fits_and_counts_every_parameter():
    """Shape-only analysis of the 35B config: peak RSS under 4 GB, and resident bytes on
    host + device equal the hand-counted parameters × 2 bytes (bf16) within 1%."""
    proc = subprocess.run([sys.executable, "-c", FULL_SIZE_SCRIPT], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rss_mb"] < 4096
    expected = param_count(MoEConfig.full())["total"] * 2
    for label in ("all_on_device+skip", "experts_on_host+skip"):
        resident = sum(out[label].values())
        assert abs(resident - expected) / expected < 0.01, (label, resident, expected)
    assert out["tok_s"]["all_on_device+skip"] > out["tok_s"]["experts_on_host+skip"] > 0


@pytest.mark.slow
def test_full_size_prefetch_beats_plain_streaming_on_nvlink_under_graph_replay():
    """Full size, shape-only, NVLink-C2C, the deployment's graph replay: at the tiny
    model's measured hit rate, prefetch raises tokens/s and the share of copy time hidden
    behind compute over plain streaming; at hit rate 1 it moves exactly plain streaming's
    bytes; the weights' residency is unchanged, and the device arena grows by at most one
    layer's prefetch."""
    cfg = MoEConfig.full()
    rate = wt.measured_hit_rate()
    res = wt.full_size_results(
        strategies=[expert_streaming(), expert_streaming(prefetch=True)], links=["nvlink_c2c"], prefetch_hit_rate=rate
    )
    plain, hinted = res[0].tokens["nvlink_c2c"], res[1].tokens["nvlink_c2c"]
    assert hinted.tok_s > plain.tok_s
    assert hinted.hidden / hinted.copy > plain.hidden / plain.copy
    table = wt.prefetch_sensitivity(res, hit_rates=[1.0], links=["nvlink_c2c"])
    assert table["link_MiB/token"][1] == table["link_MiB/token"][0]
    assert res[0].device_graph.constant_bytes == res[1].device_graph.constant_bytes
    slab = 3 * cfg.hidden_size * cfg.moe_intermediate_size * 2
    grown = res[1].plan.arena_bytes["cuda:0"] - res[0].plan.arena_bytes["cuda:0"]
    assert 0 < grown <= cfg.num_experts_per_tok * slab + 4096