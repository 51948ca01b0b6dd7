"""Row-gathering ops are charged for the rows they read, not for their whole source."""

import torch

from workbench.machine.cost_model import op_cost


def test_index_select_reads_only_selected_rows():
    """index_select of 8 of 256 expert slabs touches 8 slabs (read) + 8 (written) + the
    index, not the 256-slab stack — on meta tensors, without data."""
    with torch.device("meta"):
        experts = torch.empty(256, 64, 32, dtype=torch.bfloat16)
        index = torch.zeros(8, dtype=torch.long)
    slab = 64 * 32 * 2
    cost = op_cost(torch.ops.aten.index_select.default, (experts, 0, index))
    assert cost.bytes_touched == 2 * 8 * slab + 8 * 8


def test_embedding_reads_only_looked_up_rows():
    """An embedding lookup of one token reads one row of the table."""
    with torch.device("meta"):
        table = torch.empty(50000, 128)
        ids = torch.zeros(1, 1, dtype=torch.long)
    cost = op_cost(torch.ops.aten.embedding.default, (table, ids))
    assert cost.bytes_touched == 2 * 128 * 4 + 8


def test_dense_ops_still_read_everything():
    """Ops that are not row gathers keep the full-read rule."""
    with torch.device("meta"):
        a = torch.empty(64, 64)
    assert op_cost(torch.ops.aten.add.Tensor, (a, a)).bytes_touched == 3 * 64 * 64 * 4
