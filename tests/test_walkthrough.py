"""The MoE walkthrough: every strategy runs correctly; tables are computed, not written in;
the full-size analysis fits in memory and accounts for every parameter."""

import functools
import json
import subprocess
import sys
import textwrap

import pytest

from workbench import walkthrough as wt
from workbench.models import MoEConfig, param_count


@functools.lru_cache(maxsize=None)
def _tiny():
    return wt.tiny_results()


def test_every_strategy_matches_eager_on_sim():
    """All six variants run on the simulated accelerator and equal eager PyTorch."""
    results = _tiny()
    assert len(results) == 6 and all(r.matches_eager for r in results)


def test_table_numbers_come_from_the_runs():
    """Table cells equal the underlying graphs, plans and timelines."""
    results = _tiny()
    table = wt.strategy_table(results)
    for i, r in enumerate(results):
        row = table.iloc[i]
        assert row["h2d"] == r.graph.copy_counts()["h2d"]
        assert row["h2d_KiB/token"] == round(r.graph.copy_bytes()["h2d"] / 1024, 2)
        assert row["us/token"] == round(r.run.time_us, 2)
        assert row["arena_cuda:0_KiB"] == round(r.plan.arena_bytes["cuda:0"] / 1024, 2)
        # the timeline moved exactly the bytes the graph's copies say
        assert r.run.copy_bytes_by_kind()["h2d"] == r.graph.copy_bytes()["h2d"]


def test_skip_flags_remove_input_output_copies():
    """With skip flags on, all-on-device moves nothing; with them off it moves inputs/outputs."""
    by_label = {r.strategy.label: r for r in _tiny()}
    assert sum(by_label["all_on_device+skip"].graph.copy_counts().values()) == 0
    assert by_label["all_on_device"].graph.copy_counts()["h2d"] > 0


def test_streaming_moves_expert_bytes_experts_on_host_moves_activations():
    """Per token, streaming moves k expert slabs per layer over h2d; experts-on-host moves
    only activations (far fewer bytes)."""
    cfg = MoEConfig.tiny()
    by_label = {r.strategy.label: r for r in _tiny()}
    slab = 3 * cfg.hidden_size * cfg.moe_intermediate_size * 4
    expected = cfg.num_hidden_layers * cfg.num_experts_per_tok * slab
    assert by_label["expert_streaming+skip"].graph.copy_bytes()["h2d"] == expected
    assert by_label["experts_on_host+skip"].graph.copy_bytes()["h2d"] < expected / 10


def test_breakeven_matches_the_roofline_ratio():
    """The break-even tokens per expert sits near device FLOP/s ÷ link bytes/s (bf16: one
    byte per FLOP... two bytes per parameter, two FLOPs per parameter per token)."""
    table = wt.streaming_breakeven()
    for row in table.itertuples(index=False):
        assert 0.5 < row.breakeven_tokens_per_expert / row.device_FLOPs_per_link_byte < 1.1
    assert list(table.breakeven_tokens_per_expert) == sorted(table.breakeven_tokens_per_expert, reverse=True)


FULL_SIZE_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    from workbench import walkthrough as wt
    from workbench.strategies import all_on_device, experts_on_host
    res = wt.full_size_results(strategies=[all_on_device(), experts_on_host()], links=["pcie_gen5"])
    out = {r.strategy.label: dict(r.graph.constant_bytes) for r in res}
    out["tok_s"] = {r.strategy.label: 1e6 / r.estimates["pcie_gen5"].span_us for r in res}
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
