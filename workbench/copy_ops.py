"""The copy ops: host↔device and device↔device copies as real graph nodes.

They are registered with ``torch.library`` under the ``workbench`` namespace, so a
propagated graph that contains them is still an ordinary ``torch.fx.GraphModule`` that
PyTorch can run, export, serialize and fake-trace:

- ``workbench::h2d_copy(Tensor x, str src, str dst) -> Tensor``  host → device
- ``workbench::d2h_copy(Tensor x, str src, str dst) -> Tensor``  device → host
- ``workbench::d2d_copy(Tensor x, str src, str dst) -> Tensor``  device → device, direct
- ``workbench::gather_h2d_copy(Tensor x, Tensor index, str src, str dst) -> Tensor``
  rows ``x[index]`` of a host tensor gathered straight into device memory in one copy
- ``workbench::gather_h2d_reuse_copy(Tensor x, Tensor index, Tensor cached,
  Tensor cached_index, str src, str dst) -> Tensor`` rows ``x[index]`` again, but a row
  whose id is in ``cached_index`` comes from ``cached`` (rows ``x[cached_index]`` already
  on the device, e.g. prefetched); only the other rows cross the link
- ``workbench::gather_h2d_routed_copy(Tensor x, Tensor index, Tensor count, str src,
  str dst) -> Tensor`` rows ``x[index[j]]`` for ``j < count`` (the distinct ids of an
  index, padded to a static length), zeros for the padding rows: only ``count``
  rows cross the link, and the result keeps its static shape ``index.shape + x.shape[1:]``

and compute ops that are not copies:

- ``workbench::select_rows(Tensor x, Tensor index, Tensor hint) -> Tensor`` rows
  ``x[index]`` (``index_select`` along dim 0); ``hint`` predicts ``index`` and does not
  change the value. It exists so that a graph carries the prediction: propagation turns
  a device ``select_rows`` of a streamed host weight into a prefetch of the hinted rows
  plus a reuse copy of the rest.
- ``workbench::present_groups(Tensor offs, int size) -> (Tensor ids, Tensor count)`` the
  groups of a grouped matmul that own at least one row, from its cumulative row offsets
  ``offs`` (E,): ``ids`` (size,) int64 ascending, padded by repeating the last of them;
  ``count`` () int64, how many there are.
- ``workbench::unique_ids(Tensor index, int size) -> (Tensor ids, Tensor count, Tensor
  inverse)`` the distinct ids of ``index`` ascending, padded to ``size`` by repeating the
  last; ``count`` () int64, how many are distinct; ``inverse`` (``index.shape``, int64)
  with ``ids[inverse] == index``.

A graph rewrite emits the last three to stream a weight that a grouped or batched matmul
reads whole, though it uses only the rows an index lists (``moe.streaming``): padding to
a static ``size`` keeps every shape static (so memory is planned), and the counted copy
moves only the real rows.

Run as plain PyTorch, each returns a fresh tensor with the same data (the bytes really
move, into new memory); the runtime executes the same nodes with real copy kernels on
the device named by ``dst``. Devices travel as arguments so that a graph read back from a
file still says where every copy goes.
"""

from __future__ import annotations

import torch

from .copy_variants import is_copy_target
from .devices import CopyKind
from .errors import ArgumentTypeError, ArgumentValueError

#: Integer dtypes accepted for row ids (an index, a hint, a cached index).
_INDEX_DTYPES = (torch.int64, torch.int32)


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


def _check_ids(t: torch.Tensor, what: str, op: str, dims: tuple[int, ...] = (1, 2)) -> None:
    """Row ids must be int32/int64 tensors of the given ranks, non-empty."""
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"{op}: {what} must be a tensor of row ids, got {type(t).__name__}")
    if t.dtype not in _INDEX_DTYPES:
        raise ArgumentTypeError(
            f"{op}: {what} must hold integer row ids (torch.int64 or torch.int32), got {t.dtype}"
        )
    if t.dim() not in dims:
        raise ArgumentValueError(
            f"{op}: {what} must have {' or '.join(map(str, dims))} dimensions (row ids, e.g. a "
            f"router's (B, k) top-k), got shape {tuple(t.shape)}"
        )
    if t.numel() == 0:
        raise ArgumentValueError(f"{op}: {what} must hold at least one row id, got shape {tuple(t.shape)}")


def _check_rows_source(x: torch.Tensor, op: str) -> None:
    if x.dim() < 1:
        raise ArgumentValueError(f"{op}: x must have at least one dimension (its rows), got a 0-d tensor")


def _check_select(x: torch.Tensor, index: torch.Tensor, hint: torch.Tensor) -> None:
    op = "select_rows"
    _check_rows_source(x, op)
    _check_ids(index, "index", op, dims=(0, 1, 2))
    _check_ids(hint, "hint", op)


def _check_reuse(x: torch.Tensor, index: torch.Tensor, cached: torch.Tensor, cached_index: torch.Tensor) -> None:
    op = "gather_h2d_reuse_copy"
    _check_rows_source(x, op)
    _check_ids(index, "index", op, dims=(0, 1, 2))
    _check_ids(cached_index, "cached_index", op)
    want = tuple(cached_index.shape) + tuple(x.shape[1:])
    if tuple(cached.shape) != want or cached.dtype != x.dtype:
        raise ArgumentValueError(
            f"{op}: cached must hold the rows x[cached_index], shape {want} and dtype {x.dtype} "
            f"(cached_index {tuple(cached_index.shape)} + a row of x {tuple(x.shape[1:])}), "
            f"got shape {tuple(cached.shape)} and dtype {cached.dtype}"
        )


def _rows_shape(x: torch.Tensor, index: torch.Tensor) -> tuple:
    return tuple(index.shape) + tuple(x.shape[1:])


def reuse_sources(index: torch.Tensor, cached_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each row of a reuse copy comes from: ``(hit, position)``, both ``(N,)`` for the
    N ids of ``index`` flattened. ``hit[n]`` says id ``n`` is in ``cached_index``;
    ``position[n]`` is its first slot there (0 for a miss, unused)."""
    ids = index.reshape(-1).to(torch.long)  # (N,)
    pool = cached_index.reshape(-1).to(device=ids.device, dtype=torch.long)  # (C,)
    match = ids[:, None] == pool[None, :]  # (N, C)
    hit = match.any(dim=1)  # (N,)
    if not pool.numel():  # an empty pool (a cache of no slots) holds nothing: argmax has no dim to reduce
        return hit, torch.zeros_like(ids)
    position = match.to(torch.int32).argmax(dim=1)  # first match: argmax returns the first maximum
    return hit, position


@torch.library.custom_op("workbench::select_rows", mutates_args=())
def select_rows(x: torch.Tensor, index: torch.Tensor, hint: torch.Tensor) -> torch.Tensor:
    """Rows ``x[index]`` (``index_select(x, 0, index.flatten())``, shaped ``index.shape +
    x.shape[1:]``); ``hint`` predicts ``index`` and never changes the value."""
    _check_select(x, index, hint)
    return torch.index_select(x, 0, index.reshape(-1).to(torch.long)).reshape(_rows_shape(x, index))


@torch.library.custom_op("workbench::gather_h2d_reuse_copy", mutates_args=())
def gather_h2d_reuse_copy(
    x: torch.Tensor, index: torch.Tensor, cached: torch.Tensor, cached_index: torch.Tensor, src: str, dst: str
) -> torch.Tensor:
    """Rows ``x[index]`` into one device tensor: a row whose id is in ``cached_index`` is
    copied from ``cached`` (on ``dst`` already), the others from the host tensor ``x``."""
    _check_reuse(x, index, cached, cached_index)
    row_shape = tuple(x.shape[1:])
    hit, position = reuse_sources(index, cached_index)
    ids = index.reshape(-1).to(torch.long)
    out = x.new_empty((ids.numel(),) + row_shape)  # (N, *row)
    if bool(hit.any()):
        out[hit] = cached.reshape((-1,) + row_shape)[position[hit].to(torch.long)]
    miss = ~hit
    if bool(miss.any()):
        out[miss] = torch.index_select(x, 0, ids[miss])
    return out.reshape(_rows_shape(x, index))


def _check_size(size: int, op: str) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ArgumentValueError(f"{op}: size must be an int >= 1 (the static number of slots), got {size!r}")


def _check_present(offs: torch.Tensor, size: int) -> None:
    op = "present_groups"
    _check_ids(offs, "offs", op, dims=(1,))
    _check_size(size, op)


def _check_unique(index: torch.Tensor, size: int) -> None:
    op = "unique_ids"
    _check_ids(index, "index", op, dims=(1, 2, 3))
    _check_size(size, op)


def _check_counted(x: torch.Tensor, index: torch.Tensor, count: torch.Tensor) -> None:
    op = "gather_h2d_routed_copy"
    _check_rows_source(x, op)
    _check_ids(index, "index", op, dims=(1,))
    if not isinstance(count, torch.Tensor) or count.dtype not in _INDEX_DTYPES or count.numel() != 1:
        raise ArgumentValueError(
            f"{op}: count must be a one-element integer tensor (how many rows of index are real), "
            f"got {_tensor_words(count)}"
        )


def _tensor_words(t: object) -> str:
    """``tensor (3,) int64`` or the type of a non-tensor: how errors name an argument."""
    if isinstance(t, torch.Tensor):
        return f"tensor {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}"
    return type(t).__name__


def _padded(ids: torch.Tensor, size: int, op: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` (ascending, at most ``size``) padded to ``size`` by repeating the last, and their count."""
    n = ids.numel()
    if n > size:
        raise ArgumentValueError(f"{op}: {n} distinct ids do not fit in size={size} slots")
    out = torch.zeros(size, dtype=torch.int64, device=ids.device)
    if n:
        out[:n] = ids
        out[n:] = ids[-1]
    return out, torch.tensor(n, dtype=torch.int64, device=ids.device)


@torch.library.custom_op("workbench::present_groups", mutates_args=())
def present_groups(offs: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The groups owning at least one row, from cumulative row offsets ``offs`` (E,):
    ``(ids (size,) int64, count () int64)``, ``ids`` ascending and padded with the last one."""
    _check_present(offs, size)
    ends = offs.to(torch.int64)  # (E,)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])  # (E,)
    return _padded(torch.nonzero(ends > starts).reshape(-1), size, "present_groups")


@torch.library.custom_op("workbench::unique_ids", mutates_args=())
def unique_ids(index: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct ids of ``index``: ``(ids (size,) int64 ascending, padded with the last
    one; count () int64; inverse (index.shape) int64)``, so that ``ids[inverse] == index``."""
    _check_unique(index, size)
    distinct, inverse = torch.unique(index.to(torch.int64), sorted=True, return_inverse=True)
    ids, count = _padded(distinct, size, "unique_ids")
    return ids, count, inverse.to(torch.int64).reshape(index.shape)


@torch.library.custom_op("workbench::gather_h2d_routed_copy", mutates_args=())
def gather_h2d_routed_copy(x: torch.Tensor, index: torch.Tensor, count: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """Rows ``x[index[j]]`` of the host tensor ``x`` for ``j < count`` into one device
    tensor of ``len(index)`` rows; the rows from ``count`` on are zeros and never cross."""
    _check_counted(x, index, count)
    out = x.new_zeros(_rows_shape(x, index))  # (U, *row)
    n = counted_rows(count, index.numel())
    if n:
        out[:n] = torch.index_select(x, 0, index[:n].to(torch.long))
    return out


def counted_rows(count: torch.Tensor, slots: int) -> int:
    """How many rows a counted copy (``gather_h2d_routed_copy``) moves: ``count`` clamped to ``[0, slots]``."""
    return max(0, min(int(count.reshape(-1)[0]), slots))


def _register_fakes() -> None:
    for op in (h2d_copy, d2h_copy, d2d_copy):

        @op.register_fake
        def _(x, src, dst):  # noqa: ANN001 - signature fixed by the op schema
            return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    @gather_h2d_copy.register_fake
    def _(x, index, src, dst):  # noqa: ANN001
        return x.new_empty(tuple(index.shape) + tuple(x.shape[1:]))

    @select_rows.register_fake
    def _(x, index, hint):  # noqa: ANN001
        _check_select(x, index, hint)
        return x.new_empty(_rows_shape(x, index))

    @gather_h2d_reuse_copy.register_fake
    def _(x, index, cached, cached_index, src, dst):  # noqa: ANN001
        _check_reuse(x, index, cached, cached_index)
        return x.new_empty(_rows_shape(x, index))

    @present_groups.register_fake
    def _(offs, size):  # noqa: ANN001
        _check_present(offs, size)
        return offs.new_empty((size,), dtype=torch.int64), offs.new_empty((), dtype=torch.int64)

    @unique_ids.register_fake
    def _(index, size):  # noqa: ANN001
        _check_unique(index, size)
        ids = index.new_empty((size,), dtype=torch.int64)
        return ids, index.new_empty((), dtype=torch.int64), index.new_empty(tuple(index.shape), dtype=torch.int64)

    @gather_h2d_routed_copy.register_fake
    def _(x, index, count, src, dst):  # noqa: ANN001
        _check_counted(x, index, count)
        return x.new_empty(_rows_shape(x, index))


_register_fakes()

#: The OpOverloads as they appear as node targets.
H2D = torch.ops.workbench.h2d_copy.default
D2H = torch.ops.workbench.d2h_copy.default
D2D = torch.ops.workbench.d2d_copy.default
GATHER_H2D = torch.ops.workbench.gather_h2d_copy.default
GATHER_REUSE = torch.ops.workbench.gather_h2d_reuse_copy.default
GATHER_COUNTED = torch.ops.workbench.gather_h2d_routed_copy.default
SELECT_ROWS = torch.ops.workbench.select_rows.default
PRESENT_GROUPS = torch.ops.workbench.present_groups.default
UNIQUE_IDS = torch.ops.workbench.unique_ids.default

#: The op that copies a whole value, per copy kind (propagation emits these).
OP_FOR_KIND = {CopyKind.H2D: H2D, CopyKind.D2H: D2H, CopyKind.D2D: D2D}
#: The kind of every workbench copy op. Later stages read a copy's facts from the
#: ``DeviceGraph``'s copy table; this tells a workbench copy op apart in any graph
#: (e.g. one read back with ``torch.export.load``).
KIND_FOR_OP = {
    H2D: CopyKind.H2D,
    D2H: CopyKind.D2H,
    D2D: CopyKind.D2D,
    GATHER_H2D: CopyKind.H2D,
    GATHER_REUSE: CopyKind.H2D,
    GATHER_COUNTED: CopyKind.H2D,
}


def is_copy_node(node: torch.fx.Node) -> bool:
    """True for a node that runs one of the workbench copy ops, or the op of a registered
    copy variant (``copy_variants``)."""
    return node.op == "call_function" and (node.target in KIND_FOR_OP or is_copy_target(node.target))
