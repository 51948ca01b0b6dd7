"""The pure parts of the copy kernels: staging chunks, gather offsets, variants, launch shapes."""

import numpy as np
import pytest
import torch

from hypothesis import given
from hypothesis import strategies as st

from workbench.kernels.copies import INLINE_IDS, KernelArgumentError, GATHER_SOURCE, inline_ids
from workbench.kernels import (
    dma_runs,
    gather_launch_config,
    gather_row_ids,
    gather_row_offsets,
    gather_variant,
    staging_schedule,
)


@pytest.mark.parametrize("nbytes", [0, 1, 4096 + 3, 8 << 20, (8 << 20) + 1, 3 * (8 << 20) - 5])
def test_staging_chunks_cover_every_byte_once_in_order(nbytes):
    """Chunks tile [0, nbytes) without gap or overlap, none over the chunk size, slots alternating."""
    chunk = 8 << 20
    plan = staging_schedule(nbytes, chunk)
    covered = 0
    for i, c in enumerate(plan):
        assert c.index == i and c.offset == covered and 0 < c.nbytes <= chunk and c.slot == i % 2
        covered += c.nbytes
    assert covered == nbytes
    assert len(plan) == -(-nbytes // chunk)


def test_staging_schedule_rejects_bad_arguments():
    """A zero chunk size or negative length is an error naming the argument."""
    with pytest.raises(ValueError, match="chunk_bytes"):
        staging_schedule(10, 0)
    with pytest.raises(ValueError, match="nbytes"):
        staging_schedule(-1)


def test_gather_offsets_are_index_times_stride():
    """Row offsets are index × row stride in int64, for lists, numpy and torch indices alike."""
    stride = 2 * 512 * 2048 * 2  # one Qwen expert slab (w1, bf16)
    expected = np.array([3, 0, 255, 3], dtype=np.int64) * stride
    for idx in ([3, 0, 255, 3], np.array([3, 0, 255, 3], dtype=np.int32), torch.tensor([3, 0, 255, 3])):
        got = gather_row_offsets(idx, 256, stride)
        assert got.dtype == np.int64 and np.array_equal(got, expected)


def test_gather_offsets_do_not_overflow_32_bits():
    """Offsets beyond 4 GiB are exact (a 32-bit product would wrap)."""
    got = gather_row_offsets(np.array([255], dtype=np.int32), 256, 1 << 26)
    assert int(got[0]) == 255 << 26


def test_gather_offsets_reject_bad_indices():
    """Out-of-range, 2-D and float indices are refused, naming the valid range or shape."""
    with pytest.raises(IndexError, match="0..255"):
        gather_row_offsets([1, 256], 256, 16)
    with pytest.raises(IndexError):
        gather_row_offsets([-1], 256, 16)
    with pytest.raises(ValueError, match="1-D"):
        gather_row_offsets([[1]], 256, 16)
    with pytest.raises(TypeError, match="integers"):
        gather_row_offsets([1.5], 256, 16)


def test_gather_row_ids_are_a_new_int64_array_even_for_int64_input():
    """Row ids come back as a new, writable, contiguous int64 array, never a view of the
    caller's (the GPU path hands them to torch.from_numpy, which refuses the negative
    strides of a reversed view), with the same checks as the offsets."""
    backwards = np.arange(8, dtype=np.int64)[::-1]
    got = gather_row_ids(backwards, 8)
    assert got.dtype == np.int64 and got.tolist() == list(range(7, -1, -1))
    assert not np.shares_memory(got, backwards) and got.flags.writeable and got.flags.c_contiguous
    assert torch.from_numpy(got).tolist() == got.tolist()
    with pytest.raises(IndexError, match="0..7"):
        gather_row_ids([8], 8)


def test_vectorised_variant_only_when_everything_is_aligned():
    """16-byte loads need aligned source, destination, row size and stride; any odd one falls back."""
    assert gather_variant(1 << 20, 1 << 21, 4096, 8192) == "v16"
    assert gather_variant((1 << 20) + 8, 1 << 21, 4096, 8192) == "b1"
    assert gather_variant(1 << 20, 1 << 21, 4096 + 3, 4096 + 3) == "b1"
    assert gather_variant(1 << 20, 1 << 21, 4096, 4104) == "b1"


def test_launch_config_covers_rows_and_never_oversubscribes():
    """grid.y is the row count; grid.x spreads rows over the GPU but not beyond a row's work."""
    grid, block = gather_launch_config(4 << 20, 8, "v16", sm_count=132)
    assert grid[1] == 8 and block == (256, 1, 1) and grid[0] * 8 >= 8 * 132
    small, _ = gather_launch_config(16, 8, "v16", sm_count=132)
    assert small[0] == 1  # one 16-byte item per row needs one block
    with pytest.raises(ValueError, match="n_rows"):
        gather_launch_config(16, 0, "v16", 132)


@given(st.lists(st.integers(0, 40), max_size=24))
def test_dma_runs_cover_every_output_row_once_with_consecutive_source_rows(ids):
    """The runs of a DMA gather tile the output rows in order, each run reads consecutive
    source rows, and expanding the runs gives back the ids; no two neighbouring runs
    could have been one copy."""
    runs = dma_runs(np.array(ids, dtype=np.int64))
    expanded, next_out = [], 0
    for out_row, first, rows in runs:
        assert out_row == next_out and rows >= 1
        expanded += list(range(first, first + rows))
        next_out += rows
    assert expanded == ids
    for (_, a, n), (_, b, _) in zip(runs, runs[1:]):
        assert a + n != b


def test_ids_by_value_fill_the_kernels_struct_and_no_more():
    """Host ids packed for the inline gather kernels keep their order in a struct of
    exactly the size the kernel source declares; more ids than it holds are refused."""
    packed = inline_ids(np.array([7, 0, 3]))
    assert packed.dtype.itemsize == 8 * INLINE_IDS
    assert packed["v"][:3].tolist() == [7, 0, 3] and (packed["v"][3:] == -1).all()
    assert f"#define WB_INLINE_IDS {INLINE_IDS}\n" in GATHER_SOURCE
    with pytest.raises(KernelArgumentError, match=str(INLINE_IDS)):
        inline_ids(np.arange(INLINE_IDS + 1))


@given(st.lists(st.integers(1, 4), min_size=2, max_size=4), st.data())
def test_row_contiguity_from_strides_agrees_with_torch(shape, data):
    """Reading row contiguity off the shape and strides gives torch's answer for
    src[0].is_contiguous() on slices and permutations of a tensor."""
    from workbench.kernels.copies import rows_contiguous

    t = torch.zeros(*shape)
    order = [0] + data.draw(st.permutations(list(range(1, len(shape)))))
    view = t.permute(*order)
    dim = data.draw(st.integers(1, len(shape) - 1))
    stop = data.draw(st.integers(1, view.shape[dim]))
    view = view.narrow(dim, 0, stop)
    assert rows_contiguous(view.shape, view.stride()) == view[0].is_contiguous()
