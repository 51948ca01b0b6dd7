"""Graph ops for ExecuTorch calls whose work the workbench cannot see: delegates, unknown kernels.

A delegate's payload belongs to its backend, and a kernel from a library torch does not
know has no torch operator, yet the imported graph needs a node for each, with its
inputs and the tensors it writes. ``workbench::executorch_call`` (several outputs) and
``workbench::executorch_call_one`` (one output) are those nodes: real ``torch.library``
ops, so the graph exports and the cost model runs them on meta tensors.

Rules:
1. The outputs' shapes and dtypes travel as arguments (ranks, flattened sizes, dtype
   codes), so the fake (meta) implementation returns exactly the tensors ExecuTorch
   planned, and the cost model counts their bytes (and no FLOPs: the work is unknown).
2. On real tensors the ops raise ``ImportedCallNotRunnable``: the work lives in
   ExecuTorch's runtime or its backend, not in the workbench.
3. ``DTYPES`` fixes the dtype codes; a dtype outside it cannot be encoded.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import WorkbenchError

__all__ = [
    "DTYPES",
    "EXECUTORCH_CALL",
    "EXECUTORCH_CALL_ONE",
    "ImportedCallNotRunnable",
    "output_spec",
]

#: Rule 3: the dtype of each code.
DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.uint16, torch.uint32, torch.uint64,
)  # fmt: skip


class ImportedCallNotRunnable(WorkbenchError, RuntimeError):
    """An imported ExecuTorch call was asked to run on real tensors (rule 2)."""


def output_spec(
    outputs: Sequence[tuple[tuple[int, ...], torch.dtype]],
) -> tuple[list[int], list[int], list[int]]:
    """Rule 1: ``[(shape, dtype), ...]`` as ``(ranks, flattened sizes, dtype codes)``."""
    ranks: list[int] = []
    sizes: list[int] = []
    codes: list[int] = []
    for shape, dtype in outputs:
        ranks.append(len(shape))
        sizes.extend(int(s) for s in shape)
        codes.append(DTYPES.index(dtype))
    return ranks, sizes, codes


def _outputs(
    like: Sequence[torch.Tensor],
    ranks: Sequence[int],
    sizes: Sequence[int],
    dtypes: Sequence[int],
) -> list[torch.Tensor]:
    device = like[0].device if like else torch.device("meta")
    out, at = [], 0
    for rank, code in zip(ranks, dtypes):
        shape = list(sizes[at : at + rank])
        at += rank
        out.append(torch.empty(shape, dtype=DTYPES[code], device=device))
    return out


def _refuse(op: str) -> ImportedCallNotRunnable:
    return ImportedCallNotRunnable(
        f"the imported ExecuTorch call {op!r} cannot run in the workbench: its work lives in "
        "ExecuTorch's runtime or its backend's delegate payload. An imported program is for viewing, "
        "planning and estimating (wb.estimate), not for running"
    )


@torch.library.custom_op("workbench::executorch_call", mutates_args=())
def executorch_call(
    inputs: list[torch.Tensor], op: str, ranks: list[int], sizes: list[int], dtypes: list[int]
) -> list[torch.Tensor]:
    """An ExecuTorch call writing several tensors (rule 2: never runs on real tensors)."""
    raise _refuse(op)


@torch.library.custom_op("workbench::executorch_call_one", mutates_args=())
def executorch_call_one(
    inputs: list[torch.Tensor], op: str, ranks: list[int], sizes: list[int], dtypes: list[int]
) -> torch.Tensor:
    """An ExecuTorch call writing one tensor (rule 2: never runs on real tensors)."""
    raise _refuse(op)


def _register_fakes() -> None:
    """Rule 1: the outputs ExecuTorch planned, from the shapes the call carries."""

    @executorch_call.register_fake
    def _(inputs, op, ranks, sizes, dtypes):  # noqa: ANN001, ANN202 - signature fixed by the op schema
        return _outputs(inputs, ranks, sizes, dtypes)

    @executorch_call_one.register_fake
    def _(inputs, op, ranks, sizes, dtypes):  # noqa: ANN001, ANN202
        return _outputs(inputs, ranks, sizes, dtypes)[0]


_register_fakes()

EXECUTORCH_CALL = torch.ops.workbench.executorch_call.default
EXECUTORCH_CALL_ONE = torch.ops.workbench.executorch_call_one.default
