"""Routing traces: which experts each token chose in each layer, as plain data.

A ``RoutingTrace`` is an integer array ``experts`` ``(T, L, k)``: for token ``t`` (in
decode order) and MoE layer ``l``, the ``k`` experts the router chose. Traces come from
real runs of a model (``RoutingRecorder``: the built-in decoder or any MoE whose experts
``find_experts`` finds; ``record_decode``) or from a
generator with a stated popularity skew and temporal locality (``synthetic_trace``);
``cache_policies.replay`` runs any of them through an expert cache without the model.

Rules:
  1. ``experts[t, l]`` holds ``k`` distinct ids in ``[0, num_experts)``. A trace is
     valid or it does not exist: ``__post_init__`` checks shape, range and distinctness.
  2. A recorded trace keeps the order the model saw its tokens: call after call, and
     within one call the batch rows in order (a batch of B sequences is B consecutive
     tokens). ``record_decode`` decodes one sequence, so consecutive tokens are
     consecutive positions of one text, which is what an expert cache sees.
  3. ``synthetic`` is True for generated traces and their ``label`` starts with
     ``"synthetic"``; tables and plots print the label, so a synthetic figure can never
     pass for a measured one.
  4. ``synthetic_trace``: in layer ``l`` expert popularity follows a Zipf law of
     exponent ``zipf[l]`` over a per-layer random ranking of the experts (``p(rank r) ∝
     (r + 1) ** -zipf``; 0 is uniform). For ``t > 0`` each of token ``t - 1``'s experts
     in that layer is chosen again with probability ``reuse`` (temporal locality); the
     remaining slots are drawn without replacement from the popularity law among the
     experts not yet chosen (an exponential race). Same arguments, same trace, on every machine.
  5. ``save`` writes one ``.npz`` (the ids array plus a JSON header) atomically (the old
     file stays whole if the write fails); ``load`` reads only a regular file, checks each
     array's declared shape and dtype against its bytes before allocating, checks the
     header's format version and re-validates the ids (rule 1).
  6. ``num_experts`` is at most ``MAX_EXPERTS``, so every id fits the stored dtype and
     per-expert tables stay allocatable; a larger count is refused, never truncated.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ..atomic_files import FileWriteError, atomic_path
from ..errors import ArgumentTypeError, WorkbenchError
from ..file_reading import open_zip, parse_json, read_regular_file, read_zip_member
from ..models import MoEConfig, QwenMoEDecoder
from .discovery import ExpertLayer, ExpertMap, config_ints, expert_map, expert_modules

__all__ = [
    "RoutingRecorder",
    "RoutingTrace",
    "TraceError",
    "TraceWriteError",
    "record_decode",
    "synthetic_trace",
    "synthetic_trace_for",
]

FORMAT = "workbench.routing_trace/1"
#: Rule 6: far above any mixture of experts built (hundreds of experts per layer).
MAX_EXPERTS = 1 << 20
#: A trace file's arrays inflate to at most this many bytes (a billion ids of int16).
_MAX_ARRAY_BYTES = 2 << 30


class TraceError(WorkbenchError, ValueError):
    """A routing trace (or the arguments to make one) is malformed."""


class TraceWriteError(FileWriteError):
    """A routing trace that cannot be written where asked (the target is left untouched)."""


def _npy_array(data: bytes, name: str, path: Path) -> np.ndarray:
    """The array a ``.npy`` member holds, its declared shape and dtype checked against its
    bytes before anything is allocated (rule 5); never unpickles."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(stream)
    except Exception as exc:  # numpy raises ValueError, SyntaxError, TypeError on a bad header
        raise TraceError(f"{path}: member {name!r} is not a numpy array ({type(exc).__name__}: {exc})") from None
    if dtype.hasobject or dtype.kind not in "iuU":
        raise TraceError(f"{path}: member {name!r} holds dtype {dtype}, not integer ids or text")
    count = 1
    for size in shape:
        count *= int(size)
    body = len(data) - stream.tell()
    if count * dtype.itemsize != body:
        raise TraceError(
            f"{path}: member {name!r} declares shape {tuple(shape)} of {dtype} "
            f"({count * dtype.itemsize} bytes) but holds {body} bytes"
        )
    array = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
    return array.reshape(shape, order="F" if fortran else "C")


def _read_trace_arrays(path: Path) -> tuple[np.ndarray, str]:
    """The ids array and the header text of the trace file at ``path`` (rule 5)."""
    data = read_regular_file(path, "routing trace file (.npz)", TraceError, max_bytes=_MAX_ARRAY_BYTES)
    problem = f"{path} is not a routing trace file (not an .npz archive; corrupt or another format)"
    archive = open_zip(data, problem, TraceError)
    arrays = {}
    with archive:
        for name in ("experts", "header"):
            try:
                member = read_zip_member(archive, f"{name}.npy", _MAX_ARRAY_BYTES, str(path), TraceError)
            except KeyError:
                raise TraceError(f"{path} is not a routing trace file: it has no {name!r} array") from None
            arrays[name] = _npy_array(member, name, path)
    header = arrays["header"]
    if header.dtype.kind != "U" or header.shape != ():
        raise TraceError(f"{path}: the header must be one text value, got {header.dtype} of shape {header.shape}")
    return arrays["experts"], str(header)


def _id_dtype(num_experts: int) -> np.dtype:
    """The smallest integer dtype that holds every expert id (small files, fast replay)."""
    for dtype in (np.int16, np.int32, np.int64):
        if num_experts - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise TraceError(f"num_experts={num_experts} has ids beyond int64")


@dataclass(frozen=True, eq=False)
class RoutingTrace:
    """Per token, per MoE layer, the experts chosen (module rules)."""

    experts: np.ndarray  # (T, L, k) expert ids, distinct along k (rule 1)
    num_experts: int  # E: ids lie in [0, E)
    synthetic: bool  # generated (True) or recorded from a model run (False)
    label: str  # one line for tables and plots; "synthetic ..." when synthetic (rule 3)

    def __post_init__(self) -> None:
        e = self.num_experts
        if isinstance(e, bool) or not isinstance(e, int) or not 1 <= e <= MAX_EXPERTS:
            raise TraceError(f"num_experts must be an integer in [1, {MAX_EXPERTS}], got {e!r}")
        if not isinstance(self.synthetic, bool):
            raise TraceError(f"synthetic must be True or False, got {self.synthetic!r}")
        if not isinstance(self.label, str) or not self.label:
            raise TraceError("a trace needs a label (one line saying where it comes from)")
        if self.synthetic and not self.label.startswith("synthetic"):
            raise TraceError(f"a synthetic trace's label must start with 'synthetic', got {self.label!r}")
        ids = np.asarray(self.experts)
        if ids.ndim != 3 or 0 in ids.shape:
            raise TraceError(f"experts must be a non-empty (tokens, layers, k) array, got shape {ids.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise TraceError(f"experts must hold integer expert ids, got dtype {ids.dtype}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= e:
            raise TraceError(f"expert ids must lie in [0, num_experts={e}), found ids from {lo} to {hi}")
        k = ids.shape[2]
        if k > e:
            raise TraceError(f"k={k} experts per token cannot exceed num_experts={e}")
        if k > 1:
            ordered = np.sort(ids, axis=2)
            repeated = np.argwhere((ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=2))
            if len(repeated):
                t, layer = repeated[0]
                raise TraceError(
                    f"token {t} layer {layer} chose expert(s) {ids[t, layer].tolist()}: the k experts of "
                    "one token in one layer must be distinct (top-k never repeats an expert)"
                )
        ids = np.ascontiguousarray(ids, dtype=_id_dtype(e))
        ids.setflags(write=False)  # a frozen trace: nobody edits the ids under a replay
        object.__setattr__(self, "experts", ids)

    @property
    def num_tokens(self) -> int:
        return int(self.experts.shape[0])

    @property
    def num_layers(self) -> int:
        return int(self.experts.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    def counts(self) -> np.ndarray:
        """How often each expert was chosen, per layer: ``(L, E)`` int64."""
        L, E = self.num_layers, self.num_experts
        flat = (np.arange(L)[None, :, None] * E + self.experts).reshape(-1)
        return np.bincount(flat, minlength=L * E).reshape(L, E)

    def reuse_rate(self) -> float:
        """Share of a token's experts that the previous token chose too (same layer):
        the temporal locality an expert cache can exploit (0.0 for a one-token trace)."""
        if self.num_tokens < 2:
            return 0.0
        now, before = self.experts[1:], self.experts[:-1]  # (T-1, L, k)
        again = (now[:, :, :, None] == before[:, :, None, :]).any(axis=3)
        return float(again.mean())

    def head(self, tokens: int) -> "RoutingTrace":
        """The first ``tokens`` tokens (a shorter trace with the same label)."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= self.num_tokens:
            raise TraceError(f"tokens must be an integer in [1, {self.num_tokens}], got {tokens!r}")
        return RoutingTrace(self.experts[:tokens], self.num_experts, self.synthetic, self.label)

    # -- files ---------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace to ``path`` (``.npz``; rule 5); returns the path written."""
        p = Path(path)
        if p.suffix != ".npz":
            raise TraceError(f"a trace file ends in .npz, got {p.name!r}")
        header = {"format": FORMAT, "num_experts": self.num_experts, "synthetic": self.synthetic, "label": self.label}
        try:
            with atomic_path(p, "a routing trace") as tmp, open(tmp, "wb") as f:
                # a file object: numpy would otherwise append its own suffix
                np.savez_compressed(f, experts=self.experts, header=np.array(json.dumps(header)))
        except FileWriteError as exc:
            raise TraceWriteError(str(exc)) from None
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "RoutingTrace":
        """Read a trace written by ``save`` (rule 5)."""
        p = Path(path)
        experts, text = _read_trace_arrays(p)
        header = parse_json(text, f"{p}: the trace header", TraceError)
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            found = header.get("format") if isinstance(header, dict) else header
            raise TraceError(f"{p}: format {found!r} is not {FORMAT!r}")
        try:
            return cls(experts, header["num_experts"], header["synthetic"], header["label"])
        except (OverflowError, MemoryError) as exc:
            raise TraceError(f"{p}: a trace of impossible size ({type(exc).__name__})") from None
        except KeyError as exc:
            raise TraceError(f"{p}: header is missing {exc}") from None
        except TraceError as exc:
            raise TraceError(f"{p}: {exc}") from None

    def __repr__(self) -> str:
        return (
            f"RoutingTrace({self.label!r}: {self.num_tokens} tokens × {self.num_layers} layers, "
            f"top-{self.top_k} of {self.num_experts})"
        )


# -- recording -----------------------------------------------------------------------------------


class RoutingRecorder:
    """Records the experts each token chose, per layer, from eager runs of a model.

    ::

        with RoutingRecorder(model) as rec:
            model(*inputs)            # any number of calls, any batch size
        trace = rec.trace()

    It hooks the routed-expert containers (``experts.expert_modules``: the built-in
    decoder's and transformers models' alike) and reads the expert ids each is called
    with — its second argument, ``(N,)`` or ``(T, k)``; experts held as rows of lookup
    tables (``discovery`` rule 1e) are recorded from the first table's lookup module,
    whose first argument is the ids. Every call must pass through every MoE layer once
    (rule 2).
    """

    def __init__(self, model: torch.nn.Module, label: Optional[str] = None) -> None:
        self.model = model
        experts = expert_map(model) if isinstance(model, torch.nn.Module) else None  # else expert_modules refuses it
        self.layers = expert_modules(model, experts)  # (layer index, module), in layer order
        assert experts is not None
        self._hooked = [_ids_source(model, index, module, layer) for (index, module), layer in zip(self.layers, experts.layers)]
        self.top_k, self.num_experts = _routing_shape(model, experts)
        self.label = label or f"recorded from {type(model).__name__}"
        self._seen: dict[int, list[np.ndarray]] = {i: [] for i, _ in self.layers}
        self._hooks: list[Any] = []

    def __enter__(self) -> "RoutingRecorder":
        if self._hooks:
            raise TraceError("this recorder is already recording")
        for index, module, position in self._hooked:
            self._hooks.append(module.register_forward_hook(self._hook(index, position), with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _hook(self, layer: int, position: int):
        k = self.top_k

        def record(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            chosen = args[position] if len(args) > position else next(iter(kwargs.values()), None)
            if not isinstance(chosen, torch.Tensor) or chosen.dtype.is_floating_point:
                raise TraceError(
                    f"layer {layer}'s experts were called without expert ids as their second argument; "
                    "RoutingRecorder reads (x, expert ids, ...)"
                )
            self._seen[layer].append(chosen.detach().reshape(-1, k).cpu().numpy())  # (B, k)

        return record

    def trace(self) -> RoutingTrace:
        """Everything recorded so far, ``(T, L, k)`` (rule 2)."""
        per_layer = [np.concatenate(chunks) if chunks else np.zeros((0, self.top_k)) for chunks in self._seen.values()]
        lengths = {len(a) for a in per_layer}
        if lengths == {0}:
            raise TraceError("nothing recorded: run the model inside `with RoutingRecorder(model):`")
        if len(lengths) != 1:
            raise TraceError(
                f"layers saw different numbers of tokens ({sorted(lengths)}); every call must run every MoE layer"
            )
        experts = np.stack(per_layer, axis=1)  # (T, L, k)
        return RoutingTrace(experts, self.num_experts, False, self.label)


def _ids_source(model: torch.nn.Module, index: int, container: torch.nn.Module, layer: ExpertLayer) -> tuple[int, torch.nn.Module, int]:
    """(layer index, module to hook, position of the ids among its arguments): the first
    table's lookup module for lookup-table experts, else the container (ids second)."""
    owner = model.get_submodule(layer.weights[0].rpartition(".")[0])
    if isinstance(owner, torch.nn.Embedding):
        return index, owner, 0
    return index, container, 1


def _routing_shape(model: torch.nn.Module, experts: ExpertMap) -> tuple[int, int]:
    """(k, E): experts per token from the model's config, experts per layer as found."""
    k = next(config_ints(getattr(model, "config", None), ("num_experts_per_tok",)), None)
    if k is None:
        raise TraceError(f"cannot record routing of {type(model).__name__}: its config gives no num_experts_per_tok")
    num_experts = experts.num_experts
    assert num_experts is not None  # expert_map never returns an empty map
    return k, num_experts


def record_decode(
    model: QwenMoEDecoder, n_tokens: int, *, first_token: int = 0, label: Optional[str] = None
) -> tuple[RoutingTrace, list[int]]:
    """Greedy-decode one sequence for ``n_tokens`` steps (eager, batch 1, caches carried)
    and record its routing; returns ``(trace, tokens fed)``. Needs ``n_tokens <=
    max_seq_len`` (the full-attention KV cache has that many slots)."""
    if not isinstance(model, QwenMoEDecoder):
        raise ArgumentTypeError(
            f"record_decode drives the built-in QwenMoEDecoder, got {type(model).__name__}; for another MoE, run it "
            "inside `with RoutingRecorder(model) as rec:` and take rec.trace()"
        )
    limit = model.config.max_seq_len
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or not 1 <= n_tokens <= limit:
        raise TraceError(f"n_tokens must be an integer in [1, max_seq_len={limit}], got {n_tokens!r}")
    caches = model.init_caches(1)
    token = int(first_token)
    fed = []
    default = f"recorded: greedy decode of {n_tokens} tokens, {type(model).__name__}"
    with RoutingRecorder(model, label or default) as rec, torch.no_grad():
        for position in range(n_tokens):
            fed.append(token)
            logits, *caches = model(torch.tensor([[token]]), torch.tensor([position]), *caches)
            token = int(logits[0].argmax())
    return rec.trace(), fed


# -- synthetic -----------------------------------------------------------------------------------


def _zipf_per_layer(zipf: float | Sequence[float], layers: int) -> np.ndarray:
    values = np.full(layers, zipf, dtype=np.float64) if np.isscalar(zipf) else np.asarray(zipf, dtype=np.float64)
    if values.shape != (layers,):
        raise TraceError(f"zipf must be one number or one per layer ({layers}), got {len(values)} values")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise TraceError(f"zipf exponents must be finite and >= 0 (0 = uniform), got {values.tolist()}")
    return values


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise TraceError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def synthetic_trace(
    num_tokens: int,
    num_layers: int,
    num_experts: int,
    top_k: int,
    *,
    zipf: float | Sequence[float] = 1.0,
    reuse: float = 0.0,
    seed: int = 0,
) -> RoutingTrace:
    """A generated trace with a stated popularity skew and temporal locality (rule 4)."""
    T, L = _positive_int("num_tokens", num_tokens), _positive_int("num_layers", num_layers)
    E, k = _positive_int("num_experts", num_experts), _positive_int("top_k", top_k)
    if k > E:
        raise TraceError(f"top_k={k} cannot exceed num_experts={E}")
    exponents = _zipf_per_layer(zipf, L)
    if isinstance(reuse, bool) or not isinstance(reuse, (int, float)) or not 0.0 <= reuse <= 1.0:
        raise TraceError(f"reuse must be a probability in [0, 1], got {reuse!r}")
    rng = np.random.default_rng(seed)
    ranks = np.argsort(rng.random((L, E)), axis=1)  # (L, E): the rank of each expert, per layer
    # Exponential race: the k smallest Exp(1) / p are k draws without replacement ∝ p (the
    # Gumbel top-k trick in another form, cheaper to draw).
    inv_p = np.exp(exponents[:, None] * np.log1p(ranks)).astype(np.float32)  # (L, E) 1 / p, unnormalised
    out = np.empty((T, L, k), dtype=_id_dtype(E))
    rows = np.arange(L)[:, None]
    chunk = max(1, min(T, 2_000_000 // (L * E)))  # noise drawn a chunk of tokens at a time
    previous: Optional[np.ndarray] = None
    for start in range(0, T, chunk):
        keys = rng.standard_exponential((min(chunk, T - start), L, E), dtype=np.float32) * inv_p  # (C, L, E)
        if reuse == 0.0:  # independent tokens: one vectorised top-k for the chunk
            out[start : start + len(keys)] = np.argpartition(keys, k - 1, axis=2)[:, :, :k]
            continue
        keep = rng.random((len(keys), L, k)) < reuse  # (C, L, k): which previous experts recur
        for i, key in enumerate(keys):
            if previous is not None:
                key[rows, previous] = np.where(keep[i], -1.0, key[rows, previous])  # kept experts come first
            previous = np.argpartition(key, k - 1, axis=1)[:, :k]  # (L, k)
            out[start + i] = previous
    parts = ", ".join(
        [f"zipf {exponents[0]:g}" if np.all(exponents == exponents[0]) else f"zipf {exponents.min():g}-{exponents.max():g}",
         f"reuse {reuse:g}", f"seed {seed}"]
    )
    return RoutingTrace(out, E, True, f"synthetic ({parts})")


def synthetic_trace_for(
    config: MoEConfig, num_tokens: int, *, zipf: float | Sequence[float] = 1.0, reuse: float = 0.0, seed: int = 0
) -> RoutingTrace:
    """``synthetic_trace`` shaped like ``config`` (its layers, experts and top-k)."""
    if not isinstance(config, MoEConfig):
        raise ArgumentTypeError(f"config must be a MoEConfig (e.g. MoEConfig.full()), got {type(config).__name__}")
    return synthetic_trace(
        num_tokens, config.num_hidden_layers, config.num_experts, config.num_experts_per_tok,
        zipf=zipf, reuse=reuse, seed=seed,
    )
