"""``python -m workbench plan``: the fastest placement of a model that fits a machine, with the flags to paste.

The command reads a model (a GGUF file, a ``config.json`` with ``--format``, or a shipped
name), sizes the machine from parts (``--gpu``, ``--host``, ``--parts``), and prints the
ranked placements of ``workbench.machine_plan.search`` — tok/s with its interval and the
evidence behind it, each device's memory, the bytes over the link per token, and the
runtime's arguments — or, with ``--json``, one JSON object.

Rules:
1. It imports only what planning needs: ``python -m workbench plan`` never loads the
   walkthrough, the views or transformers; a bad argument or model file is refused by the
   first stage (``plan_arguments``) before torch or the decode model are imported.
2. A bad argument — a model file that is not a whole GGUF, an unknown part, a figure a part
   lacks, a context out of range — is one line on stderr and exit status 2; a machine no
   placement fits is one line saying what is missing where, exit status 1. Nothing is
   written.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..errors import WorkbenchError
from ..machine_plan.gguf_files import GgufFile
from ..machine_plan.model_tensors import PlanModel, model_from_config, model_from_gguf, shipped_config_path
from ..machine_plan.plan_errors import ModelFileError
from ..machine_plan.search import MachinePlan, plan_machine
from .plan_arguments import PlanRequest, is_gguf_spec, plan_request, refusal_status

__all__ = ["load_plan_model", "plan_main", "plan_report", "run_plan_request"]


def load_plan_model(spec: str, weight_format: Optional[str], gguf: Optional[GgufFile] = None) -> PlanModel:
    """``--model``: a GGUF file (or its header, read already), a config.json (with a format),
    or a shipped name."""
    path = Path(spec)
    if gguf is not None or is_gguf_spec(spec):
        return model_from_gguf(gguf if gguf is not None else path)
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


def _run(request: PlanRequest) -> int:
    model = load_plan_model(request.model, request.weight_format, request.gguf)
    plan = plan_machine(model, gpus=request.gpus, host=request.host, runtime=request.runtime, context=request.context,
                        parts=request.parts, link=request.link)  # fmt: skip
    if request.json:
        print(json.dumps(plan.to_json(request.top), indent=1, allow_nan=False))
    else:
        print(plan_report(plan, request.top, request.model if Path(request.model).is_file() else "MODEL.gguf"))
    return 0


def run_plan_request(request: PlanRequest) -> int:
    """The second stage: plan a checked request, print it; rule 2's status on a refusal."""
    try:
        return _run(request)
    except WorkbenchError as exc:
        return refusal_status(exc)
    except KeyboardInterrupt:
        print("python -m workbench plan: interrupted", file=sys.stderr)
        return 130


def plan_main(argv: Sequence[str] | None = None) -> int:
    """Both stages in one call (rules 1, 2): plan, print, and say what was wrong in one line."""
    try:
        request = plan_request(sys.argv[1:] if argv is None else argv)
    except WorkbenchError as exc:
        return refusal_status(exc)
    return run_plan_request(request)
