"""The ``plan`` command's arguments and model file, checked before the planner is loaded.

``python -m workbench plan`` runs in two stages: this module parses the arguments and
reads the model file's header, then ``plan_command`` loads the decode model and plans. A
bad argument or a file that is not a whole GGUF is refused in the first stage, in the time
it takes to read a header, without importing torch, pandas or the runtime.

Rules:
1. This module and what it imports are light: the argument parser, the GGUF header reader
   and the error types; never torch, pandas, the decode model or the views.
2. ``--top``, ``--context`` and ``--runtime`` are range-checked here; a ``--model`` that is a
   GGUF (named ``.gguf``, or an existing file not named ``.json``) is read here, once; a
   config or shipped name without ``--format`` is refused here.
3. A refusal is one line on stderr with exit status 2; a machine no placement fits is one
   line with status 1 (``PlacementDoesNotFit``, raised by the second stage).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Optional, Sequence

from ..errors import WorkbenchError
from ..machine_plan.gguf_files import GgufFile, read_gguf
from ..machine_plan.plan_errors import ModelFileError, PlacementDoesNotFit
from ..machine_plan.runtimes import RUNTIMES

__all__ = ["PLAN_PROG", "PlanRequest", "add_plan_arguments", "checked_plan_request", "is_gguf_spec", "plan_request", "refusal_status"]

PLAN_PROG = "python -m workbench plan"
_MAX_TOP = 10_000
_MAX_CONTEXT = 10_000_000


@dataclass(frozen=True)
class PlanRequest:
    """A plan command whose arguments and model file passed the first stage's checks."""

    model: str  # --model as given: a GGUF path, a config.json path or a shipped name
    weight_format: Optional[str]  # --format, for a config or shipped name
    gpus: tuple[str, ...]  # GPU part names in device order (CUDA0, CUDA1, ...); empty: host only
    host: str  # the host part
    parts: Optional[Path]  # the user's parts file
    link: Optional[str]  # the host link part, None for the GPU's own interface
    context: int  # tokens the KV cache holds
    runtime: str  # a key of RUNTIMES
    top: int  # plans to print
    json: bool  # one JSON object instead of tables
    gguf: Optional[GgufFile]  # the model file's header, read once (None: a config or shipped name)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """The plan command's arguments (shared with the main parser's ``plan`` entry)."""
    p.add_argument("--model", required=True, metavar="PATH|NAME",
                   help="a .gguf file (a split one by any shard), a config.json (with --format), or a shipped name")
    p.add_argument("--format", default=None, help="weight format for a config.json or shipped name (q4_k, bf16, 4.5, ...)")
    p.add_argument("--gpu", default="", metavar="NAME[,NAME...]", help="GPU parts, in order (CUDA0, CUDA1, ...)")
    p.add_argument("--host", required=True, help="the host part (its memory_bytes is the RAM)")
    p.add_argument("--parts", default=None, type=Path, help="a parts file of your own (data/parts/parts.csv's columns)")
    p.add_argument("--link", default=None, help="the host link part (default: the GPU's own PCIe interface)")
    p.add_argument("--context", default=4096, type=int, help="context tokens the KV cache holds (default 4096)")
    p.add_argument("--runtime", default="llama.cpp", choices=list(RUNTIMES), help="whose flags to plan (default llama.cpp)")
    p.add_argument("--top", default=5, type=int, help="plans to print (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def is_gguf_spec(spec: str) -> bool:
    """Rule 2: ``--model`` names a GGUF file (``.gguf``, or an existing file not named ``.json``)."""
    return spec.endswith(".gguf") or (Path(spec).exists() and not spec.endswith(".json"))


def plan_request(argv: Sequence[str]) -> PlanRequest:
    """Rule 2: the checked request; a bad value raises ``ModelFileError`` (argparse's own
    errors exit with status 2)."""
    parser = _Parser(prog=PLAN_PROG, description="the fastest placement of a model that fits a machine")
    add_plan_arguments(parser)
    args = parser.parse_args(list(argv))
    if not 1 <= args.top <= _MAX_TOP:
        raise ModelFileError(f"--top must be in [1, {_MAX_TOP}], got {args.top}")
    if not 1 <= args.context <= _MAX_CONTEXT:
        raise ModelFileError(f"--context must be in [1, {_MAX_CONTEXT}] tokens, got {args.context}")
    gguf = read_gguf(args.model) if is_gguf_spec(args.model) else None
    if gguf is None and args.format is None:
        raise ModelFileError(f"--model {args.model!r} is a configuration: give --format (a weight format such as q4_k "
                             "or bf16, or bits per weight)")
    gpus = tuple(g.strip() for g in args.gpu.split(",") if g.strip())
    return PlanRequest(args.model, args.format, gpus, args.host, args.parts, args.link, args.context, args.runtime,
                       args.top, args.json, gguf)  # fmt: skip


def refusal_status(exc: WorkbenchError) -> int:
    """Rule 3: print ``exc`` as one line on stderr; the exit status it means."""
    print(f"{PLAN_PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
    return 1 if isinstance(exc, PlacementDoesNotFit) else 2


def checked_plan_request(argv: Sequence[str]) -> PlanRequest:
    """The first stage of ``python -m workbench plan``: the request, or exit with rule 3's status."""
    try:
        return plan_request(argv)
    except WorkbenchError as exc:
        sys.exit(refusal_status(exc))
