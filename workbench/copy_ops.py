"""The copy ops: host↔device and device↔device copies as real graph nodes.

They are registered with ``torch.library`` under the ``workbench`` namespace, so a
propagated graph that contains them is still an ordinary ``torch.fx.GraphModule`` that
PyTorch can run, export, serialize and fake-trace:

- ``workbench::h2d_copy(Tensor x, str src, str dst) -> Tensor``  host → device
- ``workbench::d2h_copy(Tensor x, str src, str dst) -> Tensor``  device → host
- ``workbench::d2d_copy(Tensor x, str src, str dst) -> Tensor``  device → device, direct
- ``workbench::gather_h2d_copy(Tensor x, Tensor index, str src, str dst) -> Tensor``
  rows ``x[index]`` of a host tensor gathered straight into device memory in one copy

Run as plain PyTorch, each returns a fresh tensor with the same data (the bytes really
move, into new memory); the runtime executes the same nodes with real copy kernels on
the device named by ``dst``. Devices travel as arguments so that a graph read back from a
file still says where every copy goes.
"""

from __future__ import annotations

import torch

COPY_KINDS = ("h2d", "d2h", "d2d")


@torch.library.custom_op("workbench::h2d_copy", mutates_args=())
def h2d_copy(x: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """Copy ``x`` from the host ``src`` to the device ``dst``."""
    return x.clone(memory_format=torch.contiguous_format)


@torch.library.custom_op("workbench::d2h_copy", mutates_args=())
def d2h_copy(x: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """Copy ``x`` from the device ``src`` to the host ``dst``."""
    return x.clone(memory_format=torch.contiguous_format)


@torch.library.custom_op("workbench::d2d_copy", mutates_args=())
def d2d_copy(x: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """Copy ``x`` from device ``src`` to device ``dst`` directly (peer to peer)."""
    return x.clone(memory_format=torch.contiguous_format)


@torch.library.custom_op("workbench::gather_h2d_copy", mutates_args=())
def gather_h2d_copy(x: torch.Tensor, index: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """Copy rows ``x[index]`` of the host tensor ``x`` into one contiguous device tensor."""
    return torch.index_select(x, 0, index.reshape(-1).to(torch.long)).reshape(
        tuple(index.shape) + tuple(x.shape[1:])
    )


def _register_fakes() -> None:
    for op in (h2d_copy, d2h_copy, d2d_copy):

        @op.register_fake
        def _(x, src, dst):  # noqa: ANN001 - signature fixed by the op schema
            return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    @gather_h2d_copy.register_fake
    def _(x, index, src, dst):  # noqa: ANN001
        return x.new_empty(tuple(index.shape) + tuple(x.shape[1:]))


_register_fakes()

#: The OpOverloads as they appear as node targets.
H2D = torch.ops.workbench.h2d_copy.default
D2H = torch.ops.workbench.d2h_copy.default
D2D = torch.ops.workbench.d2d_copy.default
GATHER_H2D = torch.ops.workbench.gather_h2d_copy.default

OP_FOR_KIND = {"h2d": H2D, "d2h": D2H, "d2d": D2D}
KIND_FOR_OP = {H2D: "h2d", D2H: "d2h", D2D: "d2d", GATHER_H2D: "h2d"}


def is_copy_node(node: torch.fx.Node) -> bool:
    """True for a node that runs one of the workbench copy ops."""
    return node.op == "call_function" and node.target in KIND_FOR_OP
