"""The pure parts of the copy kernels: staging chunks, gather offsets, variants, launch shapes."""

import numpy as np
import pytest
import torch

from workbench.kernels import (
    gather_launch_config,
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
