"""Where a sweep's program comes from: a picklable recipe, built once per process.

Rules:
  1. ``ConfigSource(config)`` names the built-in MoE decoder of ``config``; ``program(hinted)``
     captures it shape-only (``QwenMoEDecoder(config, expert_prefetch=hinted)`` under the
     meta device: no weights), once per process and recipe, and returns the cached
     ``Program`` afterwards. Workers therefore receive a few hundred bytes and capture
     the program themselves, once.
  2. ``ProgramSource(program)`` wraps a ``Program`` captured by the caller. It lives in
     the caller's process only (an exported program is not shipped to workers); it has
     no hinted twin, so prefetching strategies need a program captured with hints.
  3. The capture runs in a thread of its own, started for it and joined. A sampling
     profiler (Dask's worker samples its task threads every 10 ms) holds frame objects
     of the thread it samples; a frame that outlives its call makes every caller's
     frame outlive its call too (CPython hands the locals over to the frame object).
     Under that torch.export loses track of what ``torch.arange`` (``torch.zeros``,
     ``torch.ones_like``…) returns: the fake tensor it traced stays alive in a held
     frame while the model receives another Python object for it, which the tracer
     does not know, so it is lifted as a constant (``lifted_tensor_N``, a
     ``CaptureError``). No profiler watches the new thread, so its frames end with
     their calls. Grad mode, which is per thread, is carried over.
  4. ``weights`` (``((format, (pattern, ...)), ...)``: ``quantize`` rules, hashable) stores
     the program's constants in those weight formats; the capture is shared with the
     same config's unquantized recipe and quantized per call (a few milliseconds).
  5. A capture whose program still lists a fake constant (a sampler that reads every
     thread's frames at once can catch the capture's thread for a moment) is made
     again, at most ``CAPTURE_ATTEMPTS`` times in all: the capture is deterministic;
     any other capture error, or the same one every time, is raised.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar, Union

import torch

from ..capture import CaptureError, Program, capture
from ..models import MoEConfig, QwenMoEDecoder
from ..weight_formats import quantize

__all__ = ["ConfigSource", "ProgramSource", "Source"]

CAPTURE_ATTEMPTS = 3
_CACHE: dict[tuple["ConfigSource", bool], Program] = {}
_LOCK = threading.Lock()
_T = TypeVar("_T")


@dataclass(frozen=True)
class ConfigSource:
    """Rule 1: the built-in decoder of ``config``, captured shape-only where it is used."""

    config: MoEConfig
    weights: tuple[tuple[str, tuple[str, ...]], ...] = ()  # rule 4

    def program(self, hinted: bool) -> Program:
        key = (ConfigSource(self.config), bool(hinted))
        with _LOCK:  # threads of one worker share the capture
            found = _CACHE.get(key)
            if found is None:
                found = _CACHE[key] = self._capture(bool(hinted))
        return quantize(found, {f: list(p) for f, p in self.weights}) if self.weights else found

    def _capture(self, hinted: bool) -> Program:
        """Rule 5."""
        for _ in range(CAPTURE_ATTEMPTS - 1):
            try:
                return self._capture_once(hinted)
            except CaptureError as exc:
                if not _lifted_fake_constant(exc):
                    raise
        return self._capture_once(hinted)  # the last attempt's error is the caller's

    def _capture_once(self, hinted: bool) -> Program:
        with torch.device("meta"):  # build only: export must not run under the meta device
            model = QwenMoEDecoder(self.config, expert_prefetch=hinted)
            inputs = model.example_inputs()
        return _in_own_thread(capture, model, inputs, shape_only=True)  # rule 3

    @property
    def label(self) -> str:
        c = self.config
        stored = "".join(f", {f}: {', '.join(p)}" for f, p in self.weights)
        return f"QwenMoEDecoder({c.num_hidden_layers} layers, {c.num_experts} experts, {c.dtype}{stored})"


def _in_own_thread(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Rule 3: ``fn(*args, **kwargs)`` in a new thread, under the caller's grad mode;
    returns its result or raises its exception."""
    grad = torch.is_grad_enabled()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            with torch.set_grad_enabled(grad):
                outcome["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="workbench-capture", daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _lifted_fake_constant(exc: CaptureError) -> bool:
    """Rule 5: the capture error of a traced value lifted as a (fake) constant."""
    text = str(exc)
    return "lifted_tensor" in text and "fake tensor" in text.lower()


@dataclass(frozen=True, eq=False)
class ProgramSource:
    """Rule 2: a caller's program, used in the caller's process only."""

    captured: Program = field(repr=False)

    def program(self, hinted: bool) -> Program:
        return self.captured

    @property
    def label(self) -> str:
        return f"a captured program ({self.captured.num_ops()} ops)"


Source = Union[ConfigSource, ProgramSource]
