"""The copy variants the workbench ships: plain, row gather, prefetch and reuse.

Each is declared here once (``copy_variants``): the rewrite that makes it, the facts its
record carries, how the ``sim`` and ``cuda`` backends move its bytes, what ``estimate``
charges it and how a timeline names its events. Propagation, the plan checks, the steps,
the executor and the estimate dispatch through the registry.

Rules:
1. ``plain``: a whole value crosses (``h2d_copy``, ``d2h_copy``, ``d2d_copy``);
   propagation makes it wherever a consumer reads a value on another device (its rules
   3-6), not through a hook.
2. ``gather``: a device ``index_select(w, 0, idx)`` of a streamed constant ``w`` becomes
   ``gather_h2d_copy(w, idx)``: the selected rows, one per id, cross in one copy.
3. ``prefetch`` and ``reuse``: a device ``select_rows(w, idx, hint)`` of a streamed
   constant becomes a prefetch ``p = gather_h2d_copy(w, hint)`` (named ``…_prefetch``, one
   per (weight, hint, device)) plus ``gather_h2d_reuse_copy(w, idx, p, hint)``, which takes
   the rows the prefetch holds from ``p`` on the device and only the others over the link.
   A run's reuse copy is charged the bytes that crossed and counts its hits
   (``prefetch_stats``); ``estimate`` charges ``1 - prefetch_hit_rate`` (the workload's) of its
   rows to the link.
4. A gather reads each selected row of host memory once; on ``cuda`` from page-locked,
   mapped host memory by one kernel, a pageable source falling back to torch on the
   lane's copy stream (so stream order is the same).
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Sequence

import torch
import torch.fx

from .copy_ops import D2D, D2H, GATHER_H2D, GATHER_REUSE, H2D, SELECT_ROWS, reuse_sources
from .copy_variants import CopyVariant, register_copy_variant
from .devices import CPU, CopyKind, Device
from .graph_values import node_arg, node_nbytes, value_of
from .kernels.copies import pointer_kind
from .propagate import CopyFacts, CopyRecord, CopyRole
from .runtime.sim_timing import copy_cost, expected_link_bytes, reuse_cost

__all__ = ["GATHER", "PLAIN", "PREFETCH", "REUSE", "copy_handler", "reads", "rows_like", "sim_reuse_rows", "streamed_rows"]


# -- helpers every row variant shares ----------------------------------------------------------


def reads(readers: Sequence[str]) -> str:
    """``reads`` for one reader, ``read`` for several: a reason's verb."""
    return "reads" if len(readers) == 1 else "read"


def rows_like(source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The fake value of ``source``'s rows selected by ``index``: shape ``index.shape +
    source.shape[1:]``, made in ``source``'s fake mode so later stages can read it."""
    return source.new_empty(tuple(index.shape) + tuple(source.shape[1:]))


def streamed_rows(context: Any, facts: CopyFacts) -> str:
    """How a reason names the rows of the streamed weight a copy moves."""
    return f"the rows of streamed host weight {context.program.constants[facts.value.name]!r}"


def copy_handler(move: Callable[..., None]) -> Callable[..., None]:
    """A handler that times ``move(exec, dst, x, index, stream)`` as one copy of ``dst``'s bytes."""

    def handler(run: Any, entry: Any, record: CopyRecord, dst: torch.Tensor, x: torch.Tensor, index: Any) -> None:
        step, nbytes = entry.step, dst.numel() * dst.element_size()
        run.clock.before(step)
        if nbytes:
            move(run, dst, x, index, run.exec.copy_stream(entry.lane_device))
        run.clock.after(step, lambda: copy_cost(run.model, step, nbytes), nbytes)

    return handler


def _record_bytes_cost(model: Any, step: Any, node: torch.fx.Node, record: CopyRecord, workload: Any) -> Callable[[], tuple[float, int, int]]:
    """``estimate``: the bytes the record says the copy moves."""
    nbytes = int(round(record.expected_nbytes()))
    return lambda: copy_cost(model, step, nbytes)


def _pageable(src: torch.Tensor) -> bool:
    """A host source the cuda kernels cannot read through a mapping (rule 4)."""
    return src.device.type == "cpu" and bool(src.numel()) and pointer_kind(src.data_ptr()) != "pinned"


# -- plain (rule 1) ------------------------------------------------------------------------------


def _plain_run(run: Any, entry: Any, record: CopyRecord, dst: torch.Tensor, x: torch.Tensor, index: Any) -> None:
    step, nbytes = entry.step, dst.numel() * dst.element_size()
    run.clock.before(step)
    run.router.transfer(str(record.kind), dst, x, run.exec.copy_stream(entry.lane_device))
    run.clock.after(step, lambda: copy_cost(run.model, step, nbytes), nbytes)


PLAIN = register_copy_variant(
    CopyVariant(
        role=str(CopyRole.PLAIN),
        ops={H2D: CopyKind.H2D, D2H: CopyKind.D2H, D2D: CopyKind.D2D},
        inputs=("value",),
        handlers={"sim": _plain_run, "cuda": _plain_run},
        cost=_record_bytes_cost,
        render=lambda record: f"{record.kind} copy of {record.value}",
    )
)


# -- gather (rules 2, 4) -------------------------------------------------------------------------


def _sim_gather(run: Any, dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor, stream: Any) -> None:
    """An index_select from host memory straight into the device slot."""
    rows = dst.view((-1,) + tuple(src.shape[1:]))
    torch.index_select(src, 0, index.reshape(-1).to(torch.long), out=rows)


def _cuda_gather(run: Any, dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor, stream: Any) -> None:
    """One gather kernel over pinned, mapped host memory; a pageable source falls back to torch."""
    if _pageable(src):
        rows = torch.index_select(src, 0, index.reshape(-1).to(torch.long).cpu())
        run.exec.torch_copy(dst.view(rows.shape), rows, stream)
        return
    run.exec.engine(dst.device.index).gather_rows(dst.data_ptr(), src, index.reshape(-1), stream)


def _rewrite_gather(context: Any, old: torch.fx.Node, target: Device) -> Any:
    """Rule 2."""
    if old.target is not torch.ops.aten.index_select.default or not context.is_streamed(old.args[0]) or old.args[1] != 0:
        return None
    source = context.new_node(node_arg(old, 0))
    name = context.fresh_name(f"{old.name}_gather")
    index = context.read(node_arg(old, 2), target, name)  # the gather is the index's consumer
    new = context.emit_copy(
        GATHER_H2D, (source, index, str(CPU), str(target)), name,
        CopyFacts(CopyKind.H2D, CPU, target, source, CopyRole.GATHER, index=index, serves=[old.name]),
    )  # fmt: skip
    return context.with_meta_of(new, old)


def _gather_reason(context: Any, facts: CopyFacts, readers: list[str]) -> str:
    assert facts.index is not None  # a gather always has its index
    return (
        f"{', '.join(readers)} on {facts.dst} {reads(readers)} {streamed_rows(context, facts)} selected by "
        f"{facts.index.name!r} ({facts.serves[0]} gathered to {facts.dst})"
    )


# A gather and a prefetch run the same op the same way; they differ in why they exist.
_ROW_GATHER: dict[str, Any] = dict(
    ops={GATHER_H2D: CopyKind.H2D},
    inputs=("value", "index"),
    handlers={"sim": copy_handler(_sim_gather), "cuda": copy_handler(_cuda_gather)},
    cost=_record_bytes_cost,
)

GATHER = register_copy_variant(
    CopyVariant(
        role=str(CopyRole.GATHER),
        **_ROW_GATHER,
        render=lambda record: f"gather of the rows {record.index} selects from {record.value}",
        rewrite=_rewrite_gather,
        reason=_gather_reason,
    )
)


# -- prefetch and reuse (rule 3) -----------------------------------------------------------------


def _prefetch_reason(context: Any, facts: CopyFacts, readers: list[str]) -> str:
    assert facts.index is not None  # a prefetch always has its hint
    return (
        f"prefetches {streamed_rows(context, facts)} predicted by {facts.index.name!r} for {', '.join(facts.serves)} "
        f"on {facts.dst}, before its router has chosen, so the copy overlaps earlier compute"
    )


PREFETCH = register_copy_variant(
    CopyVariant(
        role=str(CopyRole.PREFETCH),
        **_ROW_GATHER,
        render=lambda record: f"prefetch of the rows {record.index} predicts from {record.value}",
        reason=_prefetch_reason,
    )
)


def _copy_hits(rows: torch.Tensor, cached: torch.Tensor, hit: torch.Tensor, position: torch.Tensor) -> None:
    """The hit rows: ``rows[k] = cached[position[k]]`` wherever ``hit[k]``."""
    hit_rows = hit.nonzero().reshape(-1)
    if hit_rows.numel():
        held = cached.reshape((-1,) + tuple(rows.shape[1:]))  # (C, *row), the prefetched rows
        rows.index_copy_(0, hit_rows, held.index_select(0, position[hit_rows].to(torch.long)))


def sim_reuse_rows(dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor, cached: torch.Tensor, cached_index: torch.Tensor, run: Any, stream: Any) -> Callable[[], int]:
    """Hit rows from the device buffer ``cached``, missed rows from host ``src``."""
    rows = dst.view((-1,) + tuple(src.shape[1:]))  # (N, *row), the device slot
    hit, position = reuse_sources(index, cached_index)
    _copy_hits(rows, cached, hit, position)
    ids = index.reshape(-1).to(torch.long)
    miss_rows = (~hit).nonzero().reshape(-1)
    if miss_rows.numel():
        rows.index_copy_(0, miss_rows, src.index_select(0, ids[miss_rows]))
    hits = int(hit.sum())
    return lambda: hits


def _cuda_reuse(dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor, cached: torch.Tensor, cached_index: torch.Tensor, run: Any, stream: Any) -> Callable[[], int]:
    """One reuse-gather kernel over mapped host memory and the prefetched buffer; a
    pageable source falls back to torch (hits found on the device)."""
    if _pageable(src):
        with torch.cuda.stream(stream):
            hit, position = reuse_sources(index, cached_index)
            hit_host = hit.cpu()  # the host must know which rows to read
            rows = dst.view((-1,) + tuple(src.shape[1:]))
            ids = index.reshape(-1).to(torch.long)
            _copy_hits(rows, cached, hit, position)
            miss_ids = ids.cpu()[~hit_host]
            if miss_ids.numel():
                fetched = torch.index_select(src, 0, miss_ids).to(dst.device, non_blocking=True)
                rows.index_copy_(0, (~hit).nonzero().reshape(-1), fetched)
        hits = int(hit_host.sum())
        return lambda: hits
    flags = run.exec.engine(dst.device.index).gather_reuse_rows(
        dst.data_ptr(), src, index.reshape(-1), cached, cached_index.reshape(-1), stream
    )
    return functools.cache(lambda: int(flags.sum()))  # read once, after the call has synchronized


def _reuse_handler(move: Callable[..., Callable[[], int]]) -> Callable[..., None]:
    """A reuse copy's handler: rows its prefetch holds come from the device; its event's
    bytes are those that crossed, and the call's ``stats("reuse")`` counts its hits."""

    def handler(run: Any, entry: Any, record: CopyRecord, dst: torch.Tensor, x: torch.Tensor, index: Any) -> None:
        step, node = entry.step, entry.node
        assert record.prefetch is not None and record.prefetch_index is not None  # a reuse copy has both
        cached = run.value(record.prefetch, record.dst)
        cached_index = run.value(record.prefetch_index, record.dst)
        if run.validate:
            run.check_reads(node, cached, record.dst, "reuse copy reading its prefetched rows")
        rows = index.numel()
        row_bytes = (dst.numel() * dst.element_size()) // rows if rows else 0
        run.clock.before(step)
        if rows and row_bytes:
            hits = move(dst, x, index, cached, cached_index, run, run.exec.copy_stream(entry.lane_device))
        else:
            hits = lambda: 0  # noqa: E731
        model = run.model
        link = lambda: (rows - hits()) * row_bytes  # noqa: E731  (cuda: known once the call finished)
        run.clock.after(step, lambda: reuse_cost(model, step, link(), hits() * row_bytes), link)
        run.stats(str(CopyRole.REUSE)).append((node.name, rows, row_bytes, hits))

    return handler


def _reuse_cost(model: Any, step: Any, node: torch.fx.Node, record: CopyRecord, workload: Any) -> Callable[[], tuple[float, int, int]]:
    total = node_nbytes(node, unbounded="hint")  # every selected row
    link = expected_link_bytes(workload, total)
    return lambda: reuse_cost(model, step, link, total - link)


def _rewrite_select(context: Any, old: torch.fx.Node, target: Device) -> Any:
    """Rule 3: the prefetch of the hinted rows (shared per weight, hint and device) and the
    reuse copy that completes the selected rows from it."""
    if old.target is not SELECT_ROWS or not context.is_streamed(old.args[0]):
        return None
    source = context.new_node(node_arg(old, 0))
    name = context.fresh_name(f"{old.name}_gather")
    index = context.read(node_arg(old, 1), target, name)  # consumers are the new copy nodes
    hint = context.read(node_arg(old, 2), target, name)
    prefetches = context.state(str(CopyRole.PREFETCH))
    key = (source, hint, target)
    prefetch = prefetches.get(key)
    if prefetch is None:
        prefetch_name = context.fresh_name(f"{old.name}_prefetch")
        context.read(node_arg(old, 2), target, prefetch_name)  # the prefetch reads the hint too
        prefetch = context.emit_copy(
            GATHER_H2D, (source, hint, str(CPU), str(target)), prefetch_name,
            CopyFacts(CopyKind.H2D, CPU, target, source, CopyRole.PREFETCH, index=hint),
        )  # fmt: skip
        prefetch.meta["val"] = rows_like(value_of(source), value_of(hint))
        prefetches[key] = prefetch
    context.facts_of(prefetch).serves.append(old.name)
    new = context.emit_copy(
        GATHER_REUSE, (source, index, prefetch, hint, str(CPU), str(target)), name,
        CopyFacts(
            CopyKind.H2D, CPU, target, source, CopyRole.REUSE,
            index=index, prefetch=prefetch, prefetch_index=hint, serves=[old.name],
        ),
    )  # fmt: skip
    new.meta = copy.copy(old.meta)
    return new


def _reuse_reason(context: Any, facts: CopyFacts, readers: list[str]) -> str:
    assert facts.index is not None and facts.prefetch is not None  # a reuse copy has both
    return (
        f"{', '.join(readers)} on {facts.dst} {reads(readers)} {streamed_rows(context, facts)} selected by "
        f"{facts.index.name!r} ({facts.serves[0]}); rows the prefetch {facts.prefetch.name!r} already holds are "
        f"copied on {facts.dst}, only the rows it missed cross the link (nbytes is the upper bound: every selected "
        "row missed)"
    )


REUSE = register_copy_variant(
    CopyVariant(
        role=str(CopyRole.REUSE),
        ops={GATHER_REUSE: CopyKind.H2D},
        inputs=("value", "index", "prefetch", "prefetch_index"),
        handlers={"sim": _reuse_handler(sim_reuse_rows), "cuda": _reuse_handler(_cuda_reuse)},
        cost=_reuse_cost,
        render=lambda record: f"rows {record.index} selects from {record.value}, reusing those {record.prefetch} holds",
        rewrite=_rewrite_select,
        reason=_reuse_reason,
        capturable=False,  # its hit flags are made per call, and a pageable source reads hits on the host
    )
)
