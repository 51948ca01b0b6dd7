"""GPU copies (CuPy): every path moves exactly the source's bytes. Skipped without a GPU."""

import gc

import pytest
import torch

from workbench.runtime import (
    DeviceBuffer,
    clone_to,
    cuda_available,
    cuda_unavailable_reason,
    device_of,
    live_bytes,
    registry_for_backend,
    to_device,
    to_host,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]

CHUNK = 64 << 10  # small staging chunks so that multi-chunk cases stay small
SIZES = [1, 4096 + 3, 5 * CHUNK + 7]


def _random_bytes(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


@pytest.fixture
def engine():
    from workbench.kernels import CopyEngine

    return CopyEngine(0, chunk_bytes=CHUNK)


@pytest.fixture
def cuda_registry():
    from workbench.runtime import CupyDeviceAllocator

    reg = registry_for_backend("cuda")
    reg.register(CupyDeviceAllocator(chunk_bytes=CHUNK), replace=True)
    return reg


@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("n", SIZES)
def test_h2d_then_d2h_round_trip(engine, n, pinned):
    """Pinned and staged (pageable) copies in both directions return the exact bytes, odd sizes included."""
    import cupy as cp

    src = _random_bytes(n, n)
    if pinned:
        src = src.pin_memory()
    dev = cp.zeros(n + 32, dtype=cp.uint8)
    engine.h2d(dev.data.ptr + 16, src)
    assert bytes(cp.asnumpy(dev[16 : 16 + n])) == bytes(src.numpy())
    assert int(dev[:16].sum()) == 0 and int(dev[16 + n :].sum()) == 0
    out = torch.empty(n, dtype=torch.uint8)
    if pinned:
        out = out.pin_memory()
    engine.d2h(out, dev.data.ptr + 16)
    assert torch.equal(out, src)


def test_staged_copies_on_a_stream_complete_after_sync(engine):
    """A pageable h2d on a side stream may return early; after synchronizing, the bytes are right."""
    import cupy as cp

    n = 7 * CHUNK + 1
    src = _random_bytes(n, 1)
    dev = cp.zeros(n, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    engine.h2d(dev.data.ptr, src, stream)
    src.zero_()  # rule: the source may be reused once a pageable h2d returns
    stream.synchronize()
    assert bytes(cp.asnumpy(dev)) == bytes(_random_bytes(n, 1).numpy())


@pytest.mark.parametrize("n", SIZES)
def test_d2d(engine, n):
    """A device-to-device copy at offsets moves exactly n bytes."""
    import cupy as cp

    a = cp.asarray(_random_bytes(n, 2).numpy())
    b = cp.zeros(n + 8, dtype=cp.uint8)
    engine.d2d(b.data.ptr + 8, a.data.ptr, n)
    assert bytes(cp.asnumpy(b[8:])) == bytes(cp.asnumpy(a)) and int(b[:8].sum()) == 0


@pytest.mark.parametrize("row_bytes", [1, 4096 + 3, 4096, 2 * 512 * 64 * 2])
def test_gather_matches_index_select(engine, row_bytes):
    """Gathering rows of a pinned, mapped host tensor equals index_select, aligned (v16) and odd (b1) rows."""
    import cupy as cp

    experts = _random_bytes(32 * row_bytes, 3).reshape(32, row_bytes).pin_memory()
    idx = torch.tensor([5, 0, 31, 5, 17, 2, 30, 9])
    dst = cp.zeros(len(idx) * row_bytes, dtype=cp.uint8)
    written = engine.gather_rows(dst.data.ptr, experts, idx)
    assert written == len(idx) * row_bytes
    expected = experts.index_select(0, idx).reshape(-1)
    assert bytes(cp.asnumpy(dst)) == bytes(expected.numpy())


def test_gather_from_registered_pageable_memory_and_device_indices(engine):
    """A pageable tensor pinned by MappedHost, with indices already on the GPU, gathers correctly."""
    import cupy as cp

    from workbench.kernels import MappedHost

    rows = _random_bytes(16 * 1024, 4).reshape(16, 1024).view(torch.float32)
    idx = cp.asarray([3, 15, 0])
    dst = cp.zeros(3 * 1024, dtype=cp.uint8)
    with MappedHost(rows):
        engine.gather_rows(dst.data.ptr, rows, idx)
    expected = rows.index_select(0, torch.tensor([3, 15, 0])).reshape(-1).view(torch.uint8)
    assert bytes(cp.asnumpy(dst)) == bytes(expected.numpy())


@pytest.mark.parametrize("method", ["kernel", "dma", "auto"])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("count", [3, 8, 20])
def test_every_gather_method_matches_index_select(engine, method, strided, count):
    """Kernel (ids as scalars up to 8, as one struct beyond), DMA (runs of consecutive ids
    become one copy) and auto gathers of host ids equal index_select, from a source whose
    rows are packed or spaced apart."""
    import cupy as cp

    row_bytes = 4096
    table = _random_bytes(32 * 2 * row_bytes, 5).reshape(32, 2 * row_bytes).pin_memory()
    experts = table[:, :row_bytes] if strided else table.reshape(64, row_bytes)
    idx = torch.tensor([4, 5, 6, 0, 31, 7, 8, 3, 9, 10, 30, 1, 2, 12, 11, 13, 29, 14, 15, 16][:count])
    dst = cp.zeros(len(idx) * row_bytes, dtype=cp.uint8)
    assert engine.gather_rows(dst.data.ptr, experts, idx, method=method) == len(idx) * row_bytes
    expected = experts.index_select(0, idx).reshape(-1)
    assert bytes(cp.asnumpy(dst)) == bytes(expected.numpy())


def test_host_id_slots_are_not_overwritten_while_a_gather_still_reads_them(engine):
    """Three times as many gathers as there are id slots (each with more ids than go by
    value), queued on one stream without a sync in between, each land their own rows: a
    slot is refilled only after its last gather ran."""
    import cupy as cp

    from workbench.kernels.copies import ID_RING_SLOTS, INLINE_IDS

    rows = _random_bytes(64 * 1024, 6).reshape(64, 1024).pin_memory()
    stream = cp.cuda.Stream(non_blocking=True)
    count = INLINE_IDS + 6
    picks = [torch.tensor([(3 * k + j) % 64 for j in range(count)]) for k in range(3 * ID_RING_SLOTS)]
    dsts = [cp.zeros(count * 1024, dtype=cp.uint8) for _ in picks]
    for dst, idx in zip(dsts, picks):
        engine.gather_rows(dst.data.ptr, rows, idx, stream, method="kernel")
    stream.synchronize()
    for dst, idx in zip(dsts, picks):
        assert bytes(cp.asnumpy(dst)) == bytes(rows.index_select(0, idx).reshape(-1).numpy())


def test_gather_takes_int32_device_ids_and_more_host_ids_than_a_slot_holds(engine):
    """int32 ids on the device and 5000 host ids (over a slot's capacity) gather correctly;
    a DMA gather with device ids is refused, saying why."""
    import cupy as cp

    from workbench.kernels.copies import ID_RING_CAPACITY, KernelArgumentError

    rows = _random_bytes(128 * 32, 7).reshape(128, 32).pin_memory()
    ids = cp.asarray([127, 0, 64], dtype=cp.int32)
    dst = cp.zeros(3 * 32, dtype=cp.uint8)
    engine.gather_rows(dst.data.ptr, rows, ids)
    assert bytes(cp.asnumpy(dst)) == bytes(rows.index_select(0, torch.tensor([127, 0, 64])).reshape(-1).numpy())
    many = torch.arange(ID_RING_CAPACITY + 904) % 128
    big = cp.zeros(len(many) * 32, dtype=cp.uint8)
    engine.gather_rows(big.data.ptr, rows, many, method="kernel")
    assert bytes(cp.asnumpy(big)) == bytes(rows.index_select(0, many).reshape(-1).numpy())
    with pytest.raises(KernelArgumentError, match="host"):
        engine.gather_rows(dst.data.ptr, rows, ids, method="dma")
    with pytest.raises(KernelArgumentError, match="method"):
        engine.gather_rows(dst.data.ptr, rows, [0], method="fast")


def test_gather_refuses_unpinned_host_memory_and_bad_indices(engine):
    """An unpinned source and an out-of-range host index are errors, not garbage reads."""
    import cupy as cp

    dst = cp.zeros(64, dtype=cp.uint8)
    with pytest.raises(ValueError, match="pinned"):
        engine.gather_rows(dst.data.ptr, torch.zeros(4, 16, dtype=torch.uint8), [0])
    with pytest.raises(IndexError):
        engine.gather_rows(dst.data.ptr, torch.zeros(4, 16, dtype=torch.uint8).pin_memory(), [4])


@pytest.mark.parametrize("n", SIZES)
def test_cupy_allocator_copies_and_views(cuda_registry, n):
    """The CuPy allocator's h2d/d2d/d2h move exact bytes and its view aliases the memory (zero-copy)."""
    alloc = cuda_registry.get("cuda")
    src = _random_bytes(n, 5)
    with DeviceBuffer(alloc, n + 3) as a, DeviceBuffer(alloc, n) as b:
        a.copy_from_host(src, offset=3)
        b.copy_from(a, n, src_offset=3)
        view = b.view()
        assert view.device.type == "cuda" and view.data_ptr() == b.ptr
        view[:1] = 7
        out = torch.empty(n, dtype=torch.uint8)
        b.copy_to_host(out)
    expected = src.clone()
    expected[0] = 7
    assert torch.equal(out, expected)


def test_cuda_tensors_helpers_and_leaks(cuda_registry):
    """to_device/clone_to/to_host on cuda give CUDA tensors on the right device, and free everything after."""
    before = live_bytes("cuda:0")
    host = torch.randn(33, 17)
    dev = to_device(host, "cuda:0", registry=cuda_registry)
    assert dev.is_cuda and device_of(dev, "cuda").type == "cuda"
    twin = clone_to(dev, "cuda:0", registry=cuda_registry)
    assert torch.equal(to_host(twin), host) and torch.equal((dev * 2).cpu(), host * 2)
    del dev, twin
    gc.collect()
    assert live_bytes("cuda:0") == before
