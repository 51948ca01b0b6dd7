"""Where a sweep's program comes from: a picklable recipe, built once per process.

Rules:
  1. ``ModelSource(config)`` names the built-in MoE decoder of ``config``; ``program(hinted)``
     captures it shape-only (``QwenMoEDecoder(config, expert_prefetch=hinted)`` under the
     meta device: no weights), once per process and recipe, and returns the cached
     ``Program`` afterwards. Workers therefore receive a few hundred bytes and capture
     the program themselves, once.
  2. ``ProgramSource(program)`` wraps a ``Program`` captured by the caller. It lives in
     the caller's process only (an exported program is not shipped to workers); it has
     no hinted twin, so prefetching strategies need a program captured with hints.
  4. ``weights`` (``((format, (pattern, ...)), ...)``: ``quantize`` rules, hashable) stores
     the program's constants in those weight formats; the capture is shared with the
     same config's unquantized recipe and quantized per call (a few milliseconds).
  3. A shape-only capture whose exported program lists a fake tensor among its constants
     (``lifted_tensor_N``: a value traced inside ``forward`` lifted as a constant) is not
     the model's program: it was seen in Dask workers, whose sampling profiler thread
     holds the capturing thread's frames, about once in 15 captures. The capture is
     deterministic, so it is made again, at most ``CAPTURE_ATTEMPTS`` times in all; any
     other capture error, or the same one every time, is raised.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Union

import torch

from ..capture import CaptureError, Program, capture
from ..models import MoEConfig, QwenMoEDecoder
from ..weight_formats import quantize

__all__ = ["ModelSource", "ProgramSource", "Source"]

CAPTURE_ATTEMPTS = 3
_CACHE: dict[tuple["ModelSource", bool], Program] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class ModelSource:
    """Rule 1: the built-in decoder of ``config``, captured shape-only where it is used."""

    config: MoEConfig
    weights: tuple[tuple[str, tuple[str, ...]], ...] = ()  # rule 4

    def program(self, hinted: bool) -> Program:
        key = (ModelSource(self.config), bool(hinted))
        with _LOCK:  # threads of one worker share the capture
            found = _CACHE.get(key)
            if found is None:
                found = _CACHE[key] = self._capture(bool(hinted))
        return quantize(found, {f: list(p) for f, p in self.weights}) if self.weights else found

    def _capture(self, hinted: bool) -> Program:
        """Rule 3."""
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
        return capture(model, inputs, shape_only=True)

    @property
    def label(self) -> str:
        c = self.config
        stored = "".join(f", {f}: {', '.join(p)}" for f, p in self.weights)
        return f"QwenMoEDecoder({c.num_hidden_layers} layers, {c.num_experts} experts, {c.dtype}{stored})"


def _lifted_fake_constant(exc: CaptureError) -> bool:
    """Rule 3: the capture error of a traced value lifted as a (fake) constant."""
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


Source = Union[ModelSource, ProgramSource]
