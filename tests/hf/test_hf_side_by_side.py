"""The built-in decoder and transformers' Qwen3.5-MoE side by side, same tiny config."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from workbench.hf.side_by_side import side_by_side, transformers_config  # noqa: E402
from workbench.models import MoEConfig  # noqa: E402


@pytest.fixture(scope="module")
def table():
    return side_by_side(MoEConfig.tiny())


def test_same_parameters_and_resident_device_bytes(table):
    """They implement the same model: equal parameter counts, and device-resident bytes
    within 5% under every strategy."""
    params = table[table.quantity == "parameters"].iloc[0]
    assert params.builtin == params.transformers > 0
    resident = table[table.quantity == "resident_cuda:0_bytes"]
    assert len(resident) == 4 and resident.agree_5pct.all()


def test_skip_flags_leave_nothing_to_cross_on_either_side(table):
    """Everything on the device with the skip flags: no link bytes for either model."""
    row = table[(table.strategy == "all_on_device+skip") & (table.quantity == "link_bytes_per_token")].iloc[0]
    assert row.builtin == row.transformers == 0


def test_every_difference_is_explained(table):
    """Every row beyond 5% carries a note naming its cause; equal rows say 'equal'."""
    for row in table.itertuples():
        if not row.agree_5pct:
            assert len(row.note) > 40, (row.strategy, row.quantity)
        elif row.builtin == row.transformers:
            assert row.note == "equal"


def test_streaming_shows_what_happens_today(table):
    """Until propagation gathers from grouped_mm, transformers' streamed decode moves the
    whole expert stacks: E / k times the built-in decoder's routed slabs (tiny: 8 / 2)."""
    row = table[(table.strategy == "expert_streaming+skip") & (table.quantity == "link_bytes_per_token")].iloc[0]
    config = MoEConfig.tiny()
    assert row.transformers == row.builtin * config.num_experts // config.num_experts_per_tok
    assert "whole" in row.note


def test_transformers_config_keeps_every_hyperparameter():
    """The mapped configuration carries every shared field, the layer pattern and RoPE."""
    config = MoEConfig.tiny()
    keys = transformers_config(config)
    assert keys["layer_types"] == list(config.layer_types)
    assert keys["rope_parameters"]["partial_rotary_factor"] == config.partial_rotary_factor
    assert keys["max_position_embeddings"] == config.max_seq_len
    assert all(keys[k] == getattr(config, k) for k in ("hidden_size", "num_experts", "linear_conv_kernel_dim"))
