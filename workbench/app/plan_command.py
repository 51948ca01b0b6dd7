"""``python -m workbench plan``: the fastest placement of a model that fits a machine, with the flags to paste.

The command reads a model (a GGUF file, a ``config.json`` with ``--format``, or a shipped
name), sizes the machine from parts (``--gpu``, ``--host``, ``--parts``), and prints the
ranked placements of ``workbench.machine_plan.search`` — tok/s with its interval and the
evidence behind it, each device's memory, the bytes over the link per token, and the
runtime's arguments — or, with ``--json``, one JSON object.

Rules:
1. It imports only what planning needs: ``python -m workbench plan`` never loads the
   walkthrough, the views or transformers.
2. A bad argument — a model file that is not a whole GGUF, an unknown part, a figure a part
   lacks, a context out of range — is one line on stderr and exit status 2, within a
   second; a machine no placement fits is one line saying what is missing where, exit
   status 1. Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import NoReturn, Optional, Sequence

from ..errors import WorkbenchError
from ..machine_plan.model_tensors import PlanModel, model_from_config, model_from_gguf, shipped_config_path
from ..machine_plan.plan_errors import ModelFileError, PlacementDoesNotFit
from ..machine_plan.search import RUNTIMES, MachinePlan, plan_machine

__all__ = ["add_plan_arguments", "load_plan_model", "plan_main", "plan_report"]

_PROG = "python -m workbench plan"


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


def load_plan_model(spec: str, weight_format: Optional[str]) -> PlanModel:
    """``--model``: a GGUF file, a config.json (with a format), or a shipped name."""
    path = Path(spec)
    if spec.endswith(".gguf") or (path.exists() and not spec.endswith(".json")):
        return model_from_gguf(path)
    if weight_format is None:
        raise ModelFileError(f"--model {spec!r} is a configuration: give --format (a weight format such as q4_k or "
                             "bf16, or bits per weight)")
    fmt: object = weight_format
    try:
        fmt = float(weight_format)
    except ValueError:
        pass
    config = path if spec.endswith(".json") else shipped_config_path(spec)
    return model_from_config(config, fmt)  # type: ignore[arg-type]


def _gib(value: float) -> str:
    return f"{value / 2**30:.2f}"


def plan_report(plan: MachinePlan, top: int, model_path: str) -> str:
    """The plan as text: the ranked table, the best plan's memory, link bytes and flags."""
    m = plan.model
    lines = [f"# {m.name}: {m.architecture}, {m.layers} layers, {m.num_experts} experts (top-{m.top_k}), "
             f"{_gib(m.bytes_where())} GiB ({_gib(m.bytes_where(expert=True))} GiB routed experts)",
             "# machine: " + "; ".join(f"{b.device} {b.part} {_gib(b.capacity_bytes)} GiB ({_gib(b.usable_bytes)} usable)"
                                       for b in plan.budgets) + (f"; link {plan.link}" if plan.link else ""),
             f"# {plan.runtime} (runtime profile {plan.profile}), context {plan.context}: {plan.considered} placements "
             f"tried, {len(plan.plans)} fit; ranked by predicted decode tok/s", ""]  # fmt: skip
    devices = [d for d, _, _ in plan.plans[0].memory]
    header = f"{'rank':>4} {'tok/s':>7} {'80% interval':>14}  " + " ".join(f"{d + ' GiB':>10}" for d in devices)
    lines += [header + f" {'link KB/tok':>11}  evidence / placement"]
    for i, p in enumerate(plan.plans[:top]):
        interval = f"{p.low:.3g}–{p.high:.3g}" if p.low == p.low else "none"
        used = " ".join(f"{_gib(u):>10}" for _, u, _ in p.memory)
        lines.append(f"{i + 1:>4} {p.tok_s:>7.3g} {interval:>14}  {used} {p.link_bytes / 1e3:>11.1f}  "
                     f"{p.evidence}; {p.placement}")  # fmt: skip
    best = plan.plans[0]
    lines += ["", "## best plan: " + best.placement]
    lines += [f"  {d}: {_gib(u)} GiB used of {_gib(c)} GiB usable" for d, u, c in best.memory]
    lines.append(f"  bytes over the host link per token: {best.link_bytes:,.0f}")
    command = {"llama.cpp": ["llama-server", "-m", model_path], "ktransformers": ["python", "-m", "sglang.launch_server",
               "--model-path", model_path], "vllm": ["vllm", "serve", model_path]}.get(plan.runtime)  # fmt: skip
    if command is not None and best.runtime_args:
        lines.append("  paste: " + shlex.join(command + list(best.runtime_args)))
        if best.alternative_args:
            lines.append("  or:    " + shlex.join(command + list(best.alternative_args)))
    elif not best.runtime_args:
        lines.append("  (no runtime flags: the exported program holds the placement)")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    if not 1 <= args.top <= 10_000:
        raise ModelFileError(f"--top must be in [1, 10000], got {args.top}")
    if not 1 <= args.context <= 10_000_000:
        raise ModelFileError(f"--context must be in [1, 10000000] tokens, got {args.context}")
    gpus = [g.strip() for g in args.gpu.split(",") if g.strip()]
    model = load_plan_model(args.model, args.format)
    plan = plan_machine(model, gpus=gpus, host=args.host, runtime=args.runtime, context=args.context, parts=args.parts,
                        link=args.link)  # fmt: skip
    if args.json:
        print(json.dumps(plan.to_json(args.top), indent=1, allow_nan=False))
    else:
        print(plan_report(plan, args.top, args.model if Path(args.model).is_file() else "MODEL.gguf"))
    return 0


def plan_main(argv: Sequence[str] | None = None) -> int:
    """Rules 1, 2: plan, print, and say what was wrong in one line."""
    parser = _Parser(prog=_PROG, description=__doc__.splitlines()[0])
    add_plan_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except PlacementDoesNotFit as exc:
        print(f"{_PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except WorkbenchError as exc:
        print(f"{_PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{_PROG}: interrupted", file=sys.stderr)
        return 130
