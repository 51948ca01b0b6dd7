"""``python -m workbench``'s arguments: the parser of every command, and nothing heavy.

``python -m workbench`` parses its arguments with this module before it imports the
commands (``cli``), so ``--help`` and a bad argument are answered without loading torch,
the walkthrough, the views or matplotlib.

Rules:
1. This module imports only the standard library and ``plan_arguments`` (itself light).
2. An argparse error is one line, ``python -m workbench <command>: error: ...``, exit
   status 2: no usage block.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from .plan_arguments import add_plan_arguments

__all__ = ["OneLineParser", "PROG", "build_parser", "one_line"]

PROG = "python -m workbench"


def one_line(text: object) -> str:
    """``text`` with its whitespace runs, newlines included, as single spaces."""
    return " ".join(str(text).split())


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors in one line (rule 2): no usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """Every command's arguments (rule 1: argparse's own errors in one line, status 2)."""
    parser = OneLineParser(prog=PROG, description="device placement of ML inference graphs, made visible")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("walkthrough", help="the MoE walkthrough: strategies compared, tables, figures, traces")
    w.add_argument(
        "--model",
        default="builtin",
        help="builtin (the Qwen-3.5-MoE-shaped decoder, default) or a transformers family: hf:qwen3_5_moe, "
        "hf:qwen3_moe, hf:qwen3_next, hf:mixtral, hf:deepseek_v3, hf:deepseek_v2, hf:gpt_oss, hf:olmoe, hf:qwen3, hf:llama",
    )
    w.add_argument("--config", default="tiny", help="model that is run: tiny (default), full, or a JSON config path")
    w.add_argument("--full-config", default="full", help="model analysed shape-only (default: the published 35B-A3B)")
    w.add_argument("--backend", choices=["sim", "cuda"], default="sim", help="sim (modeled time) or cuda (measured)")
    w.add_argument("--out", default="out/walkthrough", help="folder for CSV tables, PNG figures and Chrome traces")
    w.add_argument("--skip-full", action="store_true", help="skip the full-size shape-only analysis (and the sweep)")
    w.add_argument("--skip-sweep", action="store_true", help="skip the full-size budget sweep (sweep.csv, pareto.png)")
    w.add_argument(
        "--sweep-workers",
        type=int,
        default=None,
        help="processes for the budget sweep (default: none, it runs here and reuses the full-size capture)",
    )
    w.add_argument(
        "--full-grid",
        action="store_true",
        help="sweep every setting of sweeps.default_grid (three times the default's; same answers at these budgets)",
    )
    w.add_argument("--no-progress", action="store_true", help="no progress bars")
    p = sub.add_parser("propagate", help="place and propagate a built-in example, print graph and copies")
    p.add_argument("--example", default="residual", help="built-in example (mlp, residual, fanout, attention)")
    p.add_argument(
        "--place",
        action="append",
        metavar="DEVICE=PATTERNS",
        help="placement rule, repeatable: cuda:0=aten.linear,aten.relu (default cuda:0=aten.linear,aten.addmm)",
    )
    p.add_argument("--skip-h2d", action="store_true", help="inputs are supplied on their device")
    p.add_argument("--skip-d2h", action="store_true", help="device outputs stay on their device")
    p.add_argument("--decompose", action="store_true", help="capture core ATen ops (aten.addmm, ...)")
    p.add_argument("--strict", action="store_true", help="a pattern that matches nothing is an error")
    q = sub.add_parser("prospective", help="predictions logged before their runs were measured, and how they fared")
    q.add_argument("--log-runs", type=Path, metavar="RUNS.csv",
                   help="predict and log every run of this table not yet logged (the published table's columns, "
                        "decode_tok_s empty)")  # fmt: skip
    q.add_argument("--measured", action="append", metavar="ID=TOK_S", help="enter a logged run's measured tok/s (once)")
    q.add_argument("--log", type=Path, default=None, help="the log (default: the shipped data/published/prospective.csv)")
    add_plan_arguments(sub.add_parser("plan", help="the fastest placement of a GGUF or config that fits your machine, "
                                                   "with the runtime's flags"))
    return parser
