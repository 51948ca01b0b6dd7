"""Multi-token decode: N steps of a planned decode step in one session, state carried.

``decode(plan, n_tokens)`` loads the plan once and calls it ``n_tokens`` times, feeding
each step the greedy token of the step before and the caches it returned; the expert
caches (``expert_cache``) live in the session's resident memory and carry over too.

Rules:
  1. The plan's program is a decode step ``(tokens (1, 1), position (1,), *caches) ->
     (logits (1, V) or (1, 1, V), *new caches)`` (the built-in ``QwenMoEDecoder``, or a
     transformers model's ``workbench.hf.capture_decode`` step). Step ``i`` runs at
     position ``i``; step 0 gets ``first_token`` and zero caches; step ``i + 1`` gets the
     argmax of step ``i``'s logits and its returned caches, wherever the plan returns
     them (a device, with the skip-copy flags). So ``n_tokens <= max_seq_len``.
  6. ``first_token`` defaults to a real token: the ``bos_token_id`` of the captured
     model's config (or ``reference``'s), else a token drawn with ``seed`` from the
     vocabulary, never the pad token. The config's ``pad_token_id`` is refused as the
     first token: the shipped transformers configs give the pad a zero embedding, so its
     logits are zeros, greedy picks the pad again, and every step would compare zeros
     with zeros.
  2. One session for all steps: arenas and constants are placed once; the load timeline
     is not part of the decode timeline.
  3. ``timeline`` is every step's events one after the other: step ``i``'s events are
     shifted by the end of step ``i - 1`` (steps do not overlap: a step needs the token
     the last one chose). ``step_bounds_us[i]`` is step ``i``'s ``(start, end)``; an event
     belongs to the step whose bounds hold its start (``step_of``).
  4. Hits per layer per step: an expert cache's marked reads (``cache_graph.cache_reads``:
     the reuse copy of each layer's first expert weight, or with ``host_compute`` the
     layer's hit mask); without a cache, the reuse copies (prefetch completions) of each
     layer's first expert weight. ``hits`` over ``rows``. Link bytes per step are the
     h2d + d2h bytes its timeline moved.
  5. With ``reference`` (the eager model the plan was captured from), every step's
     logits are compared with the eager model fed the same tokens and caches.
  7. With ``session``, the steps run in that session, which the caller loaded (its
     constants may be made on the device) and keeps open; its backend is the run's.
"""

from __future__ import annotations

import bisect
import contextlib
from dataclasses import dataclass, replace
from importlib import import_module
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from ..copy_ops import is_copy_node
from ..errors import ArgumentTypeError, WorkbenchError
from ..planning.memory_plan import MemoryPlan
from ..propagate import CopyRole
from ..runtime import Event, RunResult, Session, Timeline, device_of, load, to_device, to_host
from ..machine import CostModel
from ..runtime.timeline import Flow
from .cache_graph import cache_reads
from .discovery import expert_layers

__all__ = ["DecodeError", "DecodeResult", "decode"]


class DecodeError(WorkbenchError, ValueError):
    """A plan or argument that multi-token decode cannot run."""


@dataclass(frozen=True, eq=False)
class DecodeResult:
    """N decode steps: tokens, one timeline, hits per layer per step (module rules)."""

    tokens: tuple[int, ...]  # the token fed to each step (step 0: first_token)
    steps: tuple[RunResult, ...]  # each step's own result (its timeline starts at 0)
    timeline: Timeline  # rule 3: all steps, one after the other
    step_bounds_us: tuple[tuple[float, float], ...]  # rule 3: (start, end) of each step
    hits: pd.DataFrame  # rule 4: one row per (step, layer): hits, rows, hit_rate
    link_bytes: tuple[int, ...]  # rule 4: bytes over the link per step
    matches_eager: Optional[tuple[bool, ...]]  # rule 5, per step (None without a reference)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def step_of(self, event: Event) -> int:
        """The step an event of ``timeline`` belongs to (rule 3)."""
        starts = [b[0] for b in self.step_bounds_us]
        return max(0, bisect.bisect_right(starts, event.start_us) - 1)

    def hit_rate_matrix(self) -> np.ndarray:
        """``(layers, steps)`` hit rates; NaN where a layer read nothing through a cache."""
        if self.hits.empty:
            return np.zeros((0, self.n_tokens))
        table = self.hits.pivot(index="layer", columns="step", values="hit_rate")
        return table.reindex(columns=range(self.n_tokens)).to_numpy(dtype=float)

    def per_step(self) -> pd.DataFrame:
        """One row per step: bounds, ms, link bytes, hit rate over all layers."""
        rows = []
        for i, ((start, end), moved) in enumerate(zip(self.step_bounds_us, self.link_bytes)):
            mine = self.hits[self.hits["step"] == i]
            total = int(mine["rows"].sum())
            rows.append(
                {
                    "step": i,
                    "token": self.tokens[i],
                    "start_us": round(start, 3),
                    "end_us": round(end, 3),
                    "ms": round((end - start) / 1e3, 4),
                    "link_KiB": round(moved / 2**10, 2),
                    "hit_rate": round(int(mine["hits"].sum()) / total, 4) if total else None,
                    "equals_eager": None if self.matches_eager is None else self.matches_eager[i],
                }
            )
        return pd.DataFrame(rows)

    def figure(self) -> Any:
        """Hit-rate heat map (layer × step) over link bytes per step (``decode_figure``)."""
        # matplotlib loads on first use, like the views: decoding alone never imports it
        return import_module(".figures", __package__).decode_figure(self)


def _counted_reads(plan: MemoryPlan) -> dict[str, int]:
    """Rule 4: node name → layer, for each node whose stats are a layer's hits."""
    dg = plan.device_graph
    marked = cache_reads(dg.graph)
    if marked:
        return marked
    by_fqn = {fqn: name for name, fqn in dg.program.constants.items()}
    first = {by_fqn[layer.weights[0]]: index for index, layer in expert_layers(dg.program)}
    return {c.name: first[c.value] for c in dg.copies if c.role is CopyRole.REUSE and c.value in first}


def _hits(plan: MemoryPlan, results: list[RunResult]) -> pd.DataFrame:
    counted = _counted_reads(plan)
    rows = []
    for step, res in enumerate(results):
        per_layer: dict[int, list[int]] = {}
        stats = [(s.node, s.hits, s.rows) for s in res.prefetch] + [(m.node, m.true_rows, m.rows) for m in res.row_masks]
        for node, hits, total in stats:
            layer = counted.get(node)
            if layer is not None:
                counts = per_layer.setdefault(layer, [0, 0])
                counts[0] += hits
                counts[1] += total
        for layer, (hits, total) in sorted(per_layer.items()):
            rows.append({"step": step, "layer": layer, "hits": hits, "rows": total, "hit_rate": hits / total})
    return pd.DataFrame(rows, columns=["step", "layer", "hits", "rows", "hit_rate"])


def _shifted(timeline: Timeline, offset: float) -> tuple[list[Event], list[Flow]]:
    """The step's events ``offset`` µs later, and its flows between the moved events."""
    moved = {e: replace(e, start_us=e.start_us + offset, end_us=e.end_us + offset) for e in timeline}
    return list(moved.values()), [replace(f, src=moved[f.src], dst=moved[f.dst]) for f in timeline.flows]


def decode(
    plan: MemoryPlan,
    n_tokens: int,
    *,
    first_token: Optional[int] = None,
    backend: str = "sim",
    cost_model: Optional[CostModel] = None,
    reference: Optional[torch.nn.Module] = None,
    atol: float = 1e-4,
    seed: int = 0,
    launch: Optional[str] = None,
    session: Optional[Session] = None,
) -> DecodeResult:
    """Run ``n_tokens`` greedy decode steps of ``plan`` in one session (module rules;
    ``first_token``: rule 6). ``launch``: the session's launch mode (``"eager"`` or
    ``"graph"``, ``runtime.session`` rule 8). ``session``: a session of ``plan`` loaded
    already (e.g. with weights made on the device, ``runtime.materialise``); it stays
    open, and ``backend``, ``cost_model`` and ``launch`` are its own (rule 7)."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"decode expects a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    dg = plan.device_graph
    names = dg.program.user_inputs
    if len(names) < 2:
        raise DecodeError(f"a decode step takes (tokens, position, *caches); this program takes {list(names)}")
    specs = {n.name: n.meta.get("val") for n in dg.graph.nodes if n.op == "placeholder"}
    tokens_val, position_val = specs[names[0]], specs[names[1]]
    if tuple(tokens_val.shape) != (1, 1) or tuple(position_val.shape) != (1,):
        raise DecodeError(
            f"decode runs batch 1, one token per step: tokens must be (1, 1) and position (1,), got "
            f"{tuple(tokens_val.shape)} and {tuple(position_val.shape)}"
        )
    limit = _kv_length(dg, names)
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1 or (limit and n_tokens > limit):
        bound = f" and at most max_seq_len={limit}" if limit else ""
        raise DecodeError(f"n_tokens must be a positive integer{bound} (rule 1), got {n_tokens!r}")
    token = _first_token(first_token, _token_ids(dg, reference), _vocab(dg), seed)
    caches: list[Any] = [torch.zeros(tuple(specs[n].shape), dtype=specs[n].dtype) for n in names[2:]]
    eager_caches = [c.clone() for c in caches]
    fed, results, matches = [], [], []
    events: list[Event] = []
    flows: list[Flow] = []
    bounds = []
    clock = 0.0
    if session is not None:
        if not isinstance(session, Session) or session.plan is not plan:
            raise DecodeError(f"session must be a Session loaded from this plan, got {type(session).__name__}")
        backend = session.backend
    with (contextlib.nullcontext(session) if session is not None else load(plan, backend, cost_model, launch=launch)) as running:
        for position in range(n_tokens):
            fed.append(token)
            host = [torch.tensor([[token]]), torch.tensor([position]), *caches]
            res = running.run(*_staged(dg, host, backend))
            results.append(res)
            logits, *caches = res.outputs
            logits = to_host(logits)
            if reference is not None:
                with torch.no_grad():
                    want, *eager_caches = reference(host[0], host[1], *eager_caches)
                matches.append(bool(torch.allclose(logits.to(want.dtype), want, atol=atol, rtol=atol)))
            span = max((e.end_us for e in res.timeline), default=0.0)  # from the call's start, launches included
            step_events, step_flows = _shifted(res.timeline, clock)
            events += step_events
            flows += step_flows
            bounds.append((clock, clock + span))
            clock += span
            token = int(logits.reshape(-1, logits.shape[-1])[-1].argmax())
    return DecodeResult(
        tokens=tuple(fed),
        steps=tuple(results),
        timeline=Timeline(events, flows, results[0].timeline.source if results else ""),
        step_bounds_us=tuple(bounds),
        hits=_hits(plan, results),
        link_bytes=tuple(int(sum(r.timeline.bytes_moved()[k] for k in ("h2d", "d2h"))) for r in results),
        matches_eager=tuple(matches) if reference is not None else None,
    )


def _vocab(dg: Any) -> int:
    """Tokens in the vocabulary: the last dimension of the logits (rule 1)."""
    logits = next(n for n in dg.graph.nodes if n.name == dg.program.user_outputs[0])
    return int(logits.meta["val"].shape[-1])


def _token_ids(dg: Any, reference: Optional[torch.nn.Module]) -> tuple[Optional[int], Optional[int]]:
    """``(bos_token_id, pad_token_id)`` of the model's config (rule 6): ``reference``, else
    the model the program was captured from; a transformers decode step wraps its model."""
    source = dg.program.source
    for model in (reference, source.model if source is not None else None):
        for holder in (model, getattr(model, "hf_model", None)):
            config = getattr(holder, "config", None)
            if config is not None and hasattr(config, "bos_token_id"):
                return _one_id(config.bos_token_id), _one_id(getattr(config, "pad_token_id", None))
    return None, None


def _one_id(value: Any) -> Optional[int]:
    """A config's token id: an int, the first of a list, or None."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _first_token(given: Any, ids: tuple[Optional[int], Optional[int]], vocab: int, seed: int) -> int:
    """Rule 6."""
    bos, pad = ids
    if given is None:
        if bos is not None and 0 <= bos < vocab and bos != pad:
            return bos
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ArgumentTypeError(f"seed must be an integer, got {type(seed).__name__}")
        candidates = torch.tensor([t for t in range(vocab) if t != pad])
        return int(candidates[torch.randint(len(candidates), (1,), generator=torch.Generator().manual_seed(seed))])
    if isinstance(given, bool) or not isinstance(given, int) or not 0 <= given < vocab:
        raise DecodeError(f"first_token must be a token id in [0, {vocab}) (the logits' width), got {given!r}")
    if given == pad:
        start = f"the config's BOS ({bos})" if bos is not None and bos != pad else "a seeded token"
        raise DecodeError(
            f"first_token={given} is the pad token (pad_token_id of the model's config): a decode of pads says "
            f"nothing (with a zero pad embedding the logits are zeros, greedy picks the pad again, and every step "
            f"compares zeros with zeros). Give a real token, or leave first_token unset for {start}"
        )
    return given


def _kv_length(dg: Any, names: tuple[str, ...]) -> Optional[int]:
    """Slots of the KV caches: a cache the step writes at ``position`` with
    ``index_copy(cache, dim, position, ...)`` holds ``shape[dim]`` positions."""
    def origin(node: Any) -> Any:  # through copies of a value to the value itself
        while isinstance(node, torch.fx.Node) and is_copy_node(node):
            node = node.args[0]
        return node

    caches = set(names[2:])
    for node in dg.graph.nodes:
        if node.target is torch.ops.aten.index_copy.default:
            cache, dim, position = origin(node.args[0]), node.args[1], origin(node.args[2])
            if getattr(cache, "name", None) in caches and getattr(position, "name", None) == names[1]:
                return int(cache.meta["val"].shape[dim])
    return None


def _staged(dg: Any, values: list[Any], backend: str) -> list[Any]:
    """Each input where the plan wants it (rule 1): a host tensor for a device input is
    copied there; a tensor already where it belongs passes as is."""
    out = []
    for name, value in zip(dg.program.user_inputs, values):
        want = dg.input_devices[name]
        out.append(value if device_of(value, backend) == want else to_device(to_host(value), want, backend))
    return out
