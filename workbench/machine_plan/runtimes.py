"""The runtimes a machine plan can be written for, and the runtime profile that times each.

A table of names only, so that the ``plan`` command can check ``--runtime`` before it loads
the decode model.
"""

from __future__ import annotations

__all__ = ["RUNTIMES"]

#: ``--runtime`` → the runtime profile (``data/runtimes``) whose terms time its plans.
RUNTIMES = {"llama.cpp": "ggml", "ktransformers": "ktransformers", "vllm": "vllm", "executorch": "executorch_graph"}
