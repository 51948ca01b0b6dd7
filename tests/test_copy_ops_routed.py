"""The ops behind routed streaming: present_groups, unique_ids and gather_h2d_routed_copy —
their eager values, their traced (fake) shapes, and their errors."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import workbench  # noqa: F401  (registers the workbench ops)
from workbench.errors import ArgumentTypeError, ArgumentValueError

ops = torch.ops.workbench


def test_present_groups_lists_the_groups_with_rows_padded_with_the_last():
    """Groups 1, 3 and 5 own rows (offsets rise there); ids are ascending and padded by
    repeating group 5, so offs[ids] stays non-decreasing and the padding groups are empty."""
    offs = torch.tensor([0, 2, 2, 3, 3, 5], dtype=torch.int32)
    ids, count = ops.present_groups(offs, 4)
    assert ids.tolist() == [1, 3, 5, 5] and ids.dtype == torch.int64
    assert count.item() == 3 and count.dim() == 0
    assert offs[ids].tolist() == [2, 3, 5, 5]


def test_present_groups_first_group_and_all_empty():
    """Group 0 with rows counts; offsets with no rows at all give no present group."""
    ids, count = ops.present_groups(torch.tensor([2, 2, 4]), 2)
    assert ids.tolist() == [0, 2] and count.item() == 2
    ids, count = ops.present_groups(torch.zeros(3, dtype=torch.int64), 2)
    assert count.item() == 0 and ids.tolist() == [0, 0]


def test_unique_ids_gives_distinct_ids_and_the_way_back():
    """ids[inverse] rebuilds the index, in its shape; the distinct ids come first, ascending."""
    index = torch.tensor([[5, 1], [5, 3], [1, 7]])
    ids, count, inverse = ops.unique_ids(index, 6)
    assert ids[: count.item()].tolist() == [1, 3, 5, 7] and ids[4:].tolist() == [7, 7]
    assert inverse.shape == index.shape and torch.equal(ids[inverse], index)


def test_routed_copy_moves_the_real_rows_and_zeroes_the_padding():
    """Rows x[index[j]] for j < count, zeros after; the shape stays static."""
    x = torch.arange(24.0).reshape(6, 2, 2)
    out = ops.gather_h2d_routed_copy(x, torch.tensor([4, 0, 2, 2]), torch.tensor(3), "cpu", "cuda:0")
    assert out.shape == (4, 2, 2)
    assert torch.equal(out[:3], x[[4, 0, 2]]) and not out[3].any()
    none = ops.gather_h2d_routed_copy(x, torch.tensor([1, 1]), torch.tensor(0), "cpu", "cuda:0")
    assert not none.any()


def test_traced_shapes_are_static():
    """Under fake tensors every result has the shape the propagated graph plans for."""
    with FakeTensorMode():
        ids, count = ops.present_groups(torch.empty(8, dtype=torch.int32), 3)
        assert ids.shape == (3,) and count.shape == () and ids.dtype == count.dtype == torch.int64
        uids, ucount, inverse = ops.unique_ids(torch.empty(4, 2, dtype=torch.int64), 5)
        assert uids.shape == (5,) and ucount.shape == () and inverse.shape == (4, 2)
        rows = ops.gather_h2d_routed_copy(torch.empty(8, 3, 4), uids, ucount, "cpu", "cuda:0")
        assert rows.shape == (5, 3, 4)


BAD = [
    ("present_groups with float offsets", lambda: ops.present_groups(torch.ones(4), 2), ArgumentTypeError, "present_groups: offs must hold integer"),
    ("present_groups of size 0", lambda: ops.present_groups(torch.ones(4, dtype=torch.int64), 0), ArgumentValueError, "size must be an int >= 1"),
    ("present_groups with 2-d offsets", lambda: ops.present_groups(torch.ones(2, 2, dtype=torch.int64), 2), ArgumentValueError, "offs must have 1 dimensions"),
    ("present_groups too small", lambda: ops.present_groups(torch.tensor([1, 2, 3]), 2), ArgumentValueError, "3 distinct ids do not fit in size=2"),
    ("unique_ids too small", lambda: ops.unique_ids(torch.tensor([1, 2, 3]), 2), ArgumentValueError, "3 distinct ids do not fit"),
    ("unique_ids of a scalar", lambda: ops.unique_ids(torch.tensor(1), 2), ArgumentValueError, "unique_ids: index must have 1 or 2 or 3 dimensions"),
    ("routed copy with a 2-element count", lambda: ops.gather_h2d_routed_copy(torch.ones(4, 2), torch.tensor([0, 1]), torch.tensor([1, 2]), "cpu", "cuda:0"), ArgumentValueError, "count must be a one-element integer tensor"),
    ("routed copy with float ids", lambda: ops.gather_h2d_routed_copy(torch.ones(4, 2), torch.ones(2), torch.tensor(1), "cpu", "cuda:0"), ArgumentTypeError, "index must hold integer row ids"),
]


@pytest.mark.parametrize("what, call, error, message", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_say_what_is_valid(what, call, error, message):
    """Each bad argument is an error of the fitting type whose message names it and what is valid."""
    with pytest.raises(error, match=message):
        call()
