"""Decode of the full-size Qwen3.5-35B-A3B (seeded random weights made on the device):
the workbench per-op and with graph replay, torch eager and torch's own CUDA-graph replay
on the same weights and inputs, expert streaming and an expert cache with the experts in
pinned host memory.

    python benchmarks/fullsize_decode.py --backend cuda --scale full --out h200_fullsize_decode.csv
    python benchmarks/fullsize_decode.py --backend sim --scale tiny --out /tmp/x.csv   # dry run

The model has no prefill: the "prompt" is a synthetic state, the caches of ``--prompt``
positions drawn with a fixed seed, and decoding starts at position ``--prompt``. Every
row decodes ``--tokens`` greedy tokens from the same first token and prompt state.

Per row: ``measured_ms`` (median host wall ms per token, each token's call synchronized),
``span_ms`` (median measured span of a call's timeline), ``modeled_ms`` (``estimate``
with the measured preset, ``--preset``, else the H200 datasheet preset, in the row's
launch mode), ``torch_graph_ms`` (torch's CUDA-graph replay of the same step, per token;
the same figure on every row), ``link_GBps`` (bytes over the host link per token over
the median measured span; ``copy_GBps`` the same bytes over the time the h2d copies were
busy, the rate the link reached while it was used; in a replayed CUDA graph copies are
not timed one by one, so graph rows count only the copies launched on their own),
``strategy``, ``launch``, ``equal_to_eager`` (the row's
greedy tokens equal torch eager's), ``logits_max_diff`` (largest difference of the first
step's logits from torch eager's: bf16 sums in another order differ by a few ulps).
Rows are appended to the CSV as each finishes, so a timeout keeps what was measured.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import workbench as wb  # noqa: E402
from workbench.models import MoEConfig, QwenMoEDecoder  # noqa: E402
from workbench.moe.strategies import expert_cache  # noqa: E402
from workbench.runtime import cuda_available, cuda_unavailable_reason, device_of, to_device, to_host
from workbench.machine import CostModel  # noqa: E402
from workbench.runtime.executor import ExecutorError, estimate  # noqa: E402
from workbench.runtime.materialise import SeededWeights, module_with_weights  # noqa: E402
from workbench.moe.strategies import all_on_device, expert_streaming  # noqa: E402

COLUMNS = [
    "strategy", "launch", "measured_ms", "span_ms", "modeled_ms", "torch_graph_ms", "link_GBps", "copy_GBps", "h2d_MB_per_token",
    "equal_to_eager", "logits_max_diff", "tokens", "segments", "scale", "prompt", "decode_tokens", "preset", "error",
]


def config_for(scale: str, prompt: int, tokens: int) -> MoEConfig:
    base = MoEConfig.full() if scale == "full" else MoEConfig.tiny(dtype="bfloat16")
    return dataclasses.replace(base, max_seq_len=prompt + tokens)


def meta_model(config: MoEConfig) -> QwenMoEDecoder:
    with torch.device("meta"):
        return QwenMoEDecoder(config)


def prompt_state(model: QwenMoEDecoder, prompt: int, device: Any) -> list[torch.Tensor]:
    """Seeded caches standing for ``prompt`` decoded positions (positions >= prompt zero)."""
    gen = torch.Generator().manual_seed(1234)
    caches = []
    for spec in model.cache_specs(1):
        c = (torch.randn(spec.shape, generator=gen) * 0.1).to(model.config.torch_dtype)
        if len(spec.shape) == 4 and spec.shape[2] == model.config.max_seq_len:  # a KV cache: zero the future
            c[:, :, prompt:] = 0
        caches.append(c.to(device))
    return caches


class Writer:
    """Appends each row to the CSV as soon as it exists (and prints it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, fieldnames=COLUMNS).writeheader()

    def add(self, row: dict) -> None:
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore").writerow(row)
            f.flush()
            os.fsync(f.fileno())
        print(" | ".join(f"{k}={row.get(k, '')}" for k in COLUMNS), flush=True)


def sync(backend: str) -> None:
    if backend == "cuda":
        torch.cuda.synchronize()


def torch_rows(reference: torch.nn.Module, first: int, prompt: int, caches: list, n: int, backend: str) -> dict:
    """Greedy decode with eager torch, then with torch's CUDA-graph replay of one step."""
    dev = "cuda" if backend == "cuda" else "cpu"
    out: dict[str, Any] = {}
    with torch.no_grad():
        tokens, logits0, walls = [], None, []
        token, state = first, [c.clone() for c in caches]
        for i in range(n):
            t = time.perf_counter()
            logits, *state = reference(torch.tensor([[token]], device=dev), torch.tensor([prompt + i], device=dev), *state)
            token = int(logits.reshape(-1)[: logits.shape[-1]].argmax())
            sync(backend)
            walls.append((time.perf_counter() - t) * 1e3)
            logits0 = logits.float().cpu() if logits0 is None else logits0
            tokens.append(token)
        out["eager"] = (tokens, logits0, statistics.median(walls[1:] or walls))
        if backend != "cuda":
            return out
        try:
            out["graph"] = _torch_graph(reference, first, prompt, caches, n, dev)
        except Exception as exc:  # e.g. an op the capture refuses: the eager figures stand
            out["graph_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return out


def _torch_graph(reference: torch.nn.Module, first: int, prompt: int, caches: list, n: int, dev: str) -> tuple:
    """Greedy decode with one decode step captured by torch and replayed per token."""
    with torch.no_grad():
        static_tok = torch.tensor([[first]], device=dev)
        static_pos = torch.tensor([prompt], device=dev)
        static_caches = [c.clone() for c in caches]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up before capture
                reference(static_tok, static_pos, *static_caches)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = reference(static_tok, static_pos, *static_caches)
        tokens, walls = [], []
        token = first
        for c, s in zip(static_caches, caches):
            c.copy_(s)
        for i in range(n):
            t = time.perf_counter()
            static_tok.fill_(token)
            static_pos.fill_(prompt + i)
            graph.replay()
            for c, new in zip(static_caches, static_out[1:]):
                c.copy_(new)
            token = int(static_out[0].reshape(-1).argmax())
            walls.append((time.perf_counter() - t) * 1e3)
            tokens.append(token)
        return (tokens, None, statistics.median(walls[1:] or walls))


def workbench_row(
    plan: Any, session: Any, first: int, prompt: int, caches: list, n: int, backend: str, model: CostModel,
) -> dict:
    """Greedy decode through a loaded session: per-token wall, span, link bytes."""
    dg = plan.device_graph
    names = dg.program.user_inputs
    walls, spans, h2d, busy, tokens, logits0 = [], [], [], [], [], None
    note = ""
    token, state = first, list(caches)
    for i in range(n):
        host = [torch.tensor([[token]]), torch.tensor([prompt + i]), *state]
        staged = [
            v if device_of(v, backend) == dg.input_devices[name] else to_device(to_host(v), dg.input_devices[name], backend)
            for name, v in zip(names, host)
        ]
        t = time.perf_counter()
        try:
            res = session.run(*staged)
        except ExecutorError:
            replay = session.graph_replay
            if replay is None or not replay.disabled:
                raise
            note = f"graph capture failed, later calls per op: {replay.disabled}"
            print(note, flush=True)
            t = time.perf_counter()
            res = session.run(*staged)  # the session launches per op now (graph_replay rule 7)
        walls.append((time.perf_counter() - t) * 1e3)
        spans.append(res.time_us / 1e3)
        h2d.append(res.copy_bytes_by_kind()["h2d"])
        busy.append(sum(e.duration_us for e in res.timeline if e.kind == "h2d"))
        logits, *state = res.outputs
        logits = to_host(logits)
        if logits0 is None:
            logits0 = logits.float()
        token = int(logits.reshape(-1)[: logits.shape[-1]].argmax())
        tokens.append(token)
        state = [to_host(s) if device_of(s, backend).is_host else s for s in state]
    steady = slice(min(3, n - 1), None)  # past the warm-up and the captures
    span = statistics.median(spans[steady])
    link = statistics.median(h2d[steady])
    return {
        "measured_ms": round(statistics.median(walls[steady]), 3),
        "span_ms": round(span, 3),
        "link_GBps": round(link / (span * 1e6), 2) if span and link else 0.0,
        "h2d_MB_per_token": round(link / 1e6, 2),
        "copy_GBps": round(link / (statistics.median(busy[steady]) * 1e3), 2) if link and statistics.median(busy[steady]) else 0.0,
        "tokens_list": tokens,
        "logits0": logits0,
        "segments": len(session.segments.segments) if session.launch == "graph" else "",
        "error": note,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["sim", "cuda"], default="cuda")
    ap.add_argument("--scale", choices=["tiny", "full"], default="full")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--cache-slots", type=int, default=64, help="expert cache slabs per layer")
    ap.add_argument("--preset", default="", help="a measured preset (JSON); default the H200 datasheet preset")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--stream-launches", default="eager",
        help="launch modes of the streaming and cache rows (each loads the experts into pinned host memory again)",
    )
    ap.add_argument("--only", default="", help="comma-separated row names to run (default all)")
    args = ap.parse_args()
    if args.backend == "cuda" and not cuda_available():
        print(cuda_unavailable_reason())
        return 0
    if args.tokens < 4:
        ap.error("--tokens must be at least 4 (the median skips the warm-up calls)")
    preset = CostModel.load(args.preset) if args.preset else CostModel.preset("h200", link="pcie_gen5")
    writer = Writer(args.out)
    config = config_for(args.scale, args.prompt, args.tokens)
    t0 = time.perf_counter()
    meta = meta_model(config)
    with torch.device("meta"):
        example = meta.example_inputs()
    program = wb.capture(meta, example, shape_only=True)
    print(f"captured {args.scale} model in {time.perf_counter() - t0:.1f} s", flush=True)
    dev = "cuda" if args.backend == "cuda" else "cpu"
    caches_host = prompt_state(meta, args.prompt, "cpu")
    first = 1
    common = {"scale": args.scale, "prompt": args.prompt, "decode_tokens": args.tokens, "preset": preset.name}
    wanted = set(args.only.split(",")) if args.only else None

    def plan_of(strategy: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return wb.plan(strategy.apply(program), "greedy")

    def modeled(plan: Any, launch: str) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return round(estimate(plan, preset, launch=launch).span_us / 1e3, 3)

    eager: dict[str, Any] = {}
    torch_graph_ms: Any = ""

    def equal(row: dict) -> bool:
        if "eager" not in eager:
            return False
        tokens, logits0, _ = eager["eager"]
        same_tokens = row["tokens_list"] == tokens
        row["logits_max_diff"] = round(float((row["logits0"].reshape(logits0.shape) - logits0).abs().max()), 4)
        return bool(same_tokens)

    def guarded(name: str, strategy_label: str, launch: str, body: Callable[[], dict]) -> None:
        if wanted is not None and name not in wanted:
            return
        row = {"strategy": strategy_label, "launch": launch, **common}
        t = time.perf_counter()
        try:
            row.update(body())
            row["equal_to_eager"] = equal(row) if "tokens_list" in row else ""
            row["tokens"] = " ".join(map(str, row.get("tokens_list", [])[:8]))
            row["torch_graph_ms"] = torch_graph_ms
        except Exception as exc:  # one row failing must not hide the others
            row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            traceback.print_exc()
        print(f"# {name}: {time.perf_counter() - t:.1f} s", flush=True)
        writer.add(row)

    # -- all on the device: workbench per op and graph replay, torch eager and CUDA graph --------
    plan = plan_of(all_on_device(skip_copies=True))
    with wb.load(plan, args.backend, weights=SeededWeights(0)) as session:
        caches = [c.to(dev) for c in caches_host]
        try:
            reference = module_with_weights(session, meta_model(config)).eval()
            eager.update(torch_rows(reference, first, args.prompt, caches, args.tokens, args.backend))
            if "graph" in eager:
                torch_graph_ms = round(eager["graph"][2], 3)
            row = {"strategy": "torch", "launch": "eager", "measured_ms": round(eager["eager"][2], 3), **common}
            row.update(torch_graph_ms=torch_graph_ms, equal_to_eager=True, tokens=" ".join(map(str, eager["eager"][0][:8])))
            writer.add(row)
            if "graph" in eager:
                writer.add({**row, "launch": "graph", "measured_ms": torch_graph_ms, "equal_to_eager": eager["graph"][0] == eager["eager"][0]})
            elif "graph_error" in eager:
                writer.add({**row, "launch": "graph", "measured_ms": "", "equal_to_eager": "", "error": eager["graph_error"]})
        except Exception as exc:
            traceback.print_exc()
            writer.add({"strategy": "torch", "launch": "eager", "error": f"{type(exc).__name__}: {exc}"[:300], **common})
        del caches
        guarded("all_on_device", "all_on_device", "eager", lambda: {
            **workbench_row(plan, session, first, args.prompt, caches_host, args.tokens, args.backend, preset),
            "modeled_ms": modeled(plan, "eager"),
        })
    with wb.load(plan, args.backend, weights=SeededWeights(0), launch="graph") as session:
        guarded("all_on_device_graph", "all_on_device", "graph", lambda: {
            **workbench_row(plan, session, first, args.prompt, caches_host, args.tokens, args.backend, preset),
            "modeled_ms": modeled(plan, "graph"),
        })
    del plan

    # -- experts in pinned host memory: streaming, and a device cache of expert slabs ----------
    for name, strategy in (
        ("expert_streaming", lambda: expert_streaming()),
        ("expert_cache", lambda: expert_cache(args.cache_slots, "lru")),
    ):
        if wanted is not None and not any(w.startswith(name) for w in wanted):
            continue
        try:
            splan = plan_of(strategy())
        except Exception as exc:
            writer.add({"strategy": name, "launch": "eager", "error": f"{type(exc).__name__}: {exc}"[:300], **common})
            continue
        for launch in args.stream_launches.split(","):
            def body(splan: Any = splan, launch: str = launch) -> dict:
                with wb.load(splan, args.backend, weights=SeededWeights(0), launch=launch) as s:
                    return {
                        **workbench_row(splan, s, first, args.prompt, caches_host, args.tokens, args.backend, preset),
                        "modeled_ms": modeled(splan, launch),
                    }
            guarded(f"{name}_{launch}", name, launch, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
