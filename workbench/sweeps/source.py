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
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Union

import torch

from ..capture import Program, capture
from ..models import MoEConfig, QwenMoEDecoder

__all__ = ["ModelSource", "ProgramSource", "Source"]

_CACHE: dict[tuple["ModelSource", bool], Program] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class ModelSource:
    """Rule 1: the built-in decoder of ``config``, captured shape-only where it is used."""

    config: MoEConfig

    def program(self, hinted: bool) -> Program:
        key = (self, bool(hinted))
        with _LOCK:  # threads of one worker share the capture
            found = _CACHE.get(key)
            if found is None:
                with torch.device("meta"):  # build only: export must not run under the meta device
                    model = QwenMoEDecoder(self.config, expert_prefetch=bool(hinted))
                    inputs = model.example_inputs()
                found = _CACHE[key] = capture(model, inputs, shape_only=True)
        return found

    @property
    def label(self) -> str:
        c = self.config
        return f"QwenMoEDecoder({c.num_hidden_layers} layers, {c.num_experts} experts, {c.dtype})"


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
