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


def test_streaming_moves_the_same_routed_slabs_on_both_sides(table):
    """With the grouped matmuls streamed by routed copies, transformers' decode step moves
    exactly what the built-in decoder's index_select gathers: k slabs per layer and
    weight (one token, so every routed expert is distinct), never the whole stacks."""
    row = table[(table.strategy == "expert_streaming+skip") & (table.quantity == "link_bytes_per_token")].iloc[0]
    config = MoEConfig.tiny()
    slab = 3 * config.hidden_size * config.moe_intermediate_size * config.torch_dtype.itemsize  # w1 (2I x H) + w2 (H x I)
    assert row.builtin == row.transformers == config.num_hidden_layers * config.num_experts_per_tok * slab


def test_host_resident_bytes_agree(table):
    """A constant read only by a metadata check (aten._assert_tensor_metadata, which
    transformers' .to(dtype) leaves) is resident nowhere: host-resident bytes agree under
    every strategy (the experts' weights under the expert strategies, nothing otherwise)."""
    rows = table[table.quantity == "resident_cpu_bytes"]
    assert len(rows) == 4 and (rows.builtin == rows.transformers).all()


def test_transformers_config_keeps_every_hyperparameter():
    """The mapped configuration carries every shared field, the layer pattern and RoPE."""
    config = MoEConfig.tiny()
    keys = transformers_config(config)
    assert keys["layer_types"] == list(config.layer_types)
    assert keys["rope_parameters"]["partial_rotary_factor"] == config.partial_rotary_factor
    assert keys["max_position_embeddings"] == config.max_seq_len
    assert all(keys[k] == getattr(config, k) for k in ("hidden_size", "num_experts", "linear_conv_kernel_dim"))
