"""Expert prefetch on a real GPU: the reuse-gather kernel and the cuda executor. Skipped
without a GPU."""

import pytest
import torch

import workbench as wb
from workbench.copy_ops import reuse_sources
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.runtime import cuda_available, cuda_unavailable_reason, stage_inputs, to_host
from workbench.runtime.executor import run
from workbench.moe.strategies import expert_streaming

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]


@pytest.fixture
def engine():
    from workbench.kernels import CopyEngine

    return CopyEngine(0)


@pytest.mark.parametrize("row_bytes", [4096, 4096 + 4, 3])  # v16, b1 (odd rows), tiny rows
def test_reuse_kernel_takes_hits_from_the_prefetched_buffer(engine, row_bytes):
    """One launch writes every selected row: ids in cached_indices from the prefetched
    device buffer (marked so it shows), the others from pinned host memory; the hit flags
    say which, as reuse_sources does on the host."""
    import cupy as cp

    experts, n = 32, 6
    src = torch.randint(0, 200, (experts, row_bytes), dtype=torch.uint8, generator=torch.Generator().manual_seed(row_bytes)).pin_memory()
    cached_ids = torch.tensor([4, 17, 9, 30])
    cached = (src[cached_ids] + 50).cuda()  # (4, row): marked rows
    index = torch.tensor([17, 2, 9, 9, 31, 4])
    dst = torch.empty(n, row_bytes, dtype=torch.uint8, device="cuda")
    flags = engine.gather_reuse_rows(dst.data_ptr(), src, index.cuda(), cached, cached_ids.cuda(), None)
    hit, position = reuse_sources(index, cached_ids)
    want = src[index].clone()
    want[hit] = (src[cached_ids] + 50)[position[hit].long()]
    assert torch.equal(dst.cpu(), want)
    assert cp.asnumpy(flags).tolist() == hit.int().tolist()


def test_reuse_kernel_rejects_a_cached_buffer_of_the_wrong_size(engine):
    """A prefetched buffer that does not hold len(cached_indices) rows is refused before launch."""
    src = torch.zeros(8, 64, dtype=torch.uint8).pin_memory()
    dst = torch.empty(2, 64, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="prefetched rows"):
        engine.gather_reuse_rows(dst.data_ptr(), src, [1, 2], torch.zeros(3, 64, dtype=torch.uint8, device="cuda"), [1, 2])


def test_prefetch_decode_step_on_cuda_matches_sim():
    """The prefetching decode step on cuda equals eager, and each reuse copy moves the same
    link bytes and counts the same hits as on sim (same data, same router choices)."""
    cfg = MoEConfig.tiny()
    model = QwenMoEDecoder(cfg, expert_prefetch=True).eval()
    inputs = model.example_inputs(batch=2, position=1)
    with torch.no_grad():
        expected = model(*inputs)
    dg = expert_streaming(prefetch=True).apply(wb.capture(model, inputs))
    plan = wb.plan(dg, "best")
    results = {}
    for backend in ("sim", "cuda"):
        results[backend] = run(plan, *stage_inputs(dg, inputs, backend), backend=backend, validate=True)
    for got, want in zip(results["cuda"].outputs, expected):
        torch.testing.assert_close(to_host(got), want, rtol=1e-4, atol=1e-4)
    assert results["cuda"].prefetch == results["sim"].prefetch
    reuse = lambda r: {e.node: e.nbytes for e in r.timeline if e.node in {p.node for p in r.prefetch}}  # noqa: E731
    assert reuse(results["cuda"]) == reuse(results["sim"])
