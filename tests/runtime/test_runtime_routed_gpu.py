"""Routed expert copies on a real GPU: the routed-gather kernel and the cuda executor running
streamed grouped and batched expert matmuls. Skipped without a GPU."""

import pytest
import torch

import workbench as wb
from toy_experts import WEIGHTS, distinct_experts, toy
from workbench.runtime import cuda_available, cuda_unavailable_reason, stage_inputs, to_host
from workbench.runtime.executor import run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())]


@pytest.fixture
def engine():
    from workbench.kernels import CopyEngine

    return CopyEngine(0)


@pytest.mark.parametrize("row_bytes", [4096, 4096 + 4, 3])  # v16, b1 (odd rows), tiny rows
@pytest.mark.parametrize("count", [0, 3, 5, 9])  # none, some, all, more than the slots (clamped)
def test_routed_kernel_moves_the_first_count_rows_and_zeroes_the_rest(engine, row_bytes, count):
    """One launch writes rows src[index[j]] for j < count (count read on the device, clamped
    to the slots) and zeros after them, and records how many rows crossed, as
    copy_ops.gather_h2d_routed_copy does on the host."""
    import cupy as cp

    from workbench.copy_ops import gather_h2d_routed_copy

    gen = torch.Generator().manual_seed(row_bytes + count)
    src = torch.randint(1, 200, (16, row_bytes), dtype=torch.uint8, generator=gen).pin_memory()
    index = torch.tensor([2, 7, 11, 13, 15])  # (U,) distinct ids, ascending
    dst = torch.full((5, row_bytes), 255, dtype=torch.uint8, device="cuda")  # stale bytes the padding must clear
    moved = engine.gather_counted_rows(dst.data_ptr(), src, index.cuda(), torch.tensor([count]).cuda(), None)
    want = gather_h2d_routed_copy(src, index, torch.tensor(count), "cpu", "cuda:0")
    assert torch.equal(dst.cpu(), want)
    assert int(cp.asnumpy(moved)[0]) == min(count, 5)


@pytest.mark.parametrize("form, dtype", [("grouped", torch.bfloat16), ("batched", torch.float32)])
def test_streamed_expert_matmul_on_cuda_matches_eager_and_sim(form, dtype):
    """The streamed layer on cuda equals eager, and each routed copy moves the distinct
    experts the router chose: the same rows and link bytes as on sim."""
    model, inputs, prog = toy(form, 6, dtype)
    with torch.no_grad():
        expected = model(*inputs)
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), True, True, stream_constants=WEIGHTS)
    plan = wb.plan(dg)
    results = {backend: run(plan, *stage_inputs(dg, inputs, backend), backend=backend, validate=True) for backend in ("sim", "cuda")}
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(to_host(results["cuda"].outputs), expected, rtol=tolerance, atol=tolerance)
    assert results["cuda"].routed == results["sim"].routed
    assert {r.rows for r in results["cuda"].routed} == {distinct_experts(model, inputs[0])}
