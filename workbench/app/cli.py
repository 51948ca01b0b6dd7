"""Command line: ``python -m workbench <command>``.

Commands:
  walkthrough  the MoE walkthrough: every placement strategy on a Qwen-3.5-MoE-shaped
               decoder (tiny model run; full-size model analysed shape-only; the best
               strategy per memory budget and link: sweep.csv, sweep_best.csv, pareto.png;
               published batch-1 decode runs against the decode model, held out by
               source: anchors.csv),
               or on a transformers model with --model hf:FAMILY (its tiny configuration
               run, its published one shape-only, and for hf:qwen3_5_moe the built-in
               decoder side by side)
  propagate    place and propagate a built-in example; print its graph and copies
  plan         the fastest placement of a model (GGUF, config.json, shipped name) that
               fits a machine of parts, ranked by predicted tok/s, with the flags to paste
  prospective  predictions logged before their runs were measured, and how they fared

Rules:
1. Every argument is checked before any work starts (the configs, both of them, the
   output folder, the backend, the placement rules); a bad one is one line on stderr,
   ``python -m workbench <command>: error: ...``, and exit status 2 — no traceback, and
   nothing written.
2. The output folder is created only once every argument is good; every file in it is
   written atomically (``atomic_files``): complete, or not there.
3. An error of the work itself (a ``WorkbenchError``) is one line on stderr and exit
   status 1; outputs that differ from eager PyTorch also exit 1. Ctrl-C is one line and
   exit status 130 (the files written so far are whole: every write is atomic).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
from tqdm import tqdm

from .. import hf
from . import walkthrough as wt
from .anchors import modeled_vs_published
from .cli_arguments import PROG, build_parser, one_line
from .plan_command import plan_main
from ..speed.validation import ordering, regime_table
from ..speed.regime_model import regime_model
from ..speed import prospective as pro
from ..atomic_files import atomic_path
from ..capture import capture
from ..csv_files import write_csv
from ..errors import WorkbenchError
from ..memory_limits import check_weights_fit
from ..models.examples import EXAMPLES, example
from ..hf.side_by_side import side_by_side
from ..models import MoEConfig, param_count
from ..place import PlacementError, parse_rules, place
from ..propagate import propagate
from ..runtime import cuda_available, cuda_unavailable_reason
from ..machine import default_cost_model
from ..sweeps import SIMPLICITY, TIE_RTOL
from ..views import BufferView, GraphView, TimelineView, to_chrome_trace

__all__ = ["UsageError", "main", "write_published_anchors"]

#: The largest model the walkthrough runs with real weights (parameters).
MAX_RUN_PARAMETERS = 2e9


class UsageError(WorkbenchError, ValueError):
    """A command-line argument that is not valid (rule 1)."""


def _parse_placements(items: Sequence[str]) -> dict[str, list[str]]:
    """``["cuda:0=aten.linear,aten.relu", ...]`` → ``{"cuda:0": ["aten.linear", "aten.relu"]}``,
    checked by ``place.parse_rules``."""
    rules: dict[str, list[str]] = {}
    for item in items:
        device, sep, patterns = item.partition("=")
        if not sep or not device.strip() or not patterns.strip():
            raise UsageError(
                f"--place takes DEVICE=PATTERN[,PATTERN...], e.g. cuda:0=aten.linear,aten.relu; got {item!r}"
            )
        rules.setdefault(device.strip(), []).extend(p.strip() for p in patterns.split(",") if p.strip())
    try:
        parse_rules(rules)
    except PlacementError as exc:
        raise UsageError(f"--place: {exc}") from None
    return rules


def _check_propagate(args: argparse.Namespace) -> dict[str, list[str]]:
    """Rule 1 for ``propagate``: the example and the rules."""
    if args.example not in EXAMPLES:
        raise UsageError(f"--example: unknown example {args.example!r}; valid ones are {', '.join(EXAMPLES)}")
    return _parse_placements(args.place) if args.place else {"cuda:0": ["aten.linear", "aten.addmm"]}


def _cmd_propagate(args: argparse.Namespace) -> int:
    rules = _check_propagate(args)
    model, inputs = example(args.example)
    prog = capture(model, inputs, decompose=args.decompose)
    try:
        placed = place(prog, rules, strict=args.strict)
    except PlacementError as exc:
        raise UsageError(f"--place: placement failed: {exc}") from None
    dg = propagate(
        placed,
        skip_h2d_for_method_inputs=args.skip_h2d,
        skip_d2h_for_method_outputs=args.skip_d2h,
    )
    with pd.option_context("display.width", 160, "display.max_colwidth", 90, "display.max_rows", 500):
        print(f"# {args.example}: {prog.num_ops()} ops, rules {rules}")
        print(f"# skip_h2d_for_method_inputs={args.skip_h2d} skip_d2h_for_method_outputs={args.skip_d2h}")
        print("\n## placed and propagated graph")
        print(dg.to_dataframe().to_string(index=False))
        print("\n## delegates")
        for d in placed.delegates:
            print(f"{d.name} on {d.device}: {', '.join(d.nodes)}")
        print("\n## copies")
        if dg.copies:
            print(dg.copies_dataframe()[["name", "kind", "src", "dst", "nbytes", "reason"]].to_string(index=False))
        else:
            print("(none)")
        counts, moved = dg.copy_counts(), dg.copy_bytes()
        print("\n## summary")
        print(", ".join(f"{k}: {counts[k]} copies, {moved[k]} B" for k in counts))
        print("resident constants: " + ", ".join(f"{d} {b} B" for d, b in dg.constant_bytes.items()))
        expected = model(*inputs)
        got = dg.module()(*inputs)
        got, expected = (got if isinstance(got, tuple) else (got,)), (expected if isinstance(expected, tuple) else (expected,))
        same = all(g.shape == e.shape and bool((g - e).abs().max() <= 1e-5) for g, e in zip(got, expected))
        print(f"propagated graph equals eager: {same}")
    return 0 if same else 1


def _progress(enabled: bool) -> Callable[..., Any]:
    """A progress bar over the long steps (tqdm on stderr) when asked for and stderr is a
    terminal (in a log, bars redrawn in place interleave with the tables), or nothing."""
    shown = enabled and sys.stderr.isatty()

    def wrap(items: Any, desc: str, unit: str = "strategy") -> Any:
        if not shown:
            return items
        return tqdm(list(items), desc=desc, unit=unit, leave=False, file=sys.stderr)

    return wrap


def _load_config(option: str, spec: str) -> MoEConfig:
    """``tiny``, ``full`` or a JSON config file; anything else is a ``UsageError`` naming ``option``."""
    if spec == "tiny":
        return MoEConfig.tiny()
    if spec == "full":
        return MoEConfig.full()
    if not Path(spec).exists():
        raise UsageError(f"{option}: no file {spec!r}; give 'tiny', 'full' or the path of a JSON config file")
    try:
        return MoEConfig.from_json(spec)
    except WorkbenchError as exc:
        raise UsageError(f"{option}: {exc}") from None


def _check_out(option: str, spec: str) -> Path:
    """An output folder that exists or can be made: named (an empty or blank name would
    spill the outputs into whatever folder the command runs in), not a file, under a
    writable folder."""
    if not spec.strip():
        raise UsageError(f"{option}: {spec!r} names no folder; give a folder for the tables, figures and traces "
                         "('.' for this one)")
    if "\x00" in spec:
        raise UsageError(f"{option}: {spec!r} holds a NUL character; give a folder name without one")
    out = Path(spec)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{option}: {spec!r} is a file; give a folder for the tables, figures and traces")
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option}: {spec!r} cannot be made: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option}: {spec!r} is not writable ({existing} does not let this user write)")
    return out


def _make_out(option: str, spec: str) -> Path:
    """The output folder, checked, then made (rule 2: once every other argument is good)."""
    out = _check_out(option, spec)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option}: {spec!r} cannot be made: {exc.strerror or exc}") from None
    return out


@dataclass(frozen=True)
class _WalkthroughJob:
    """The walkthrough's arguments, checked (rule 1)."""

    run_config: MoEConfig  # the model that is run
    params: int  # its parameters
    full_config: Optional[MoEConfig]  # the model analysed shape-only, unless --skip-full
    out: Path  # the output folder (made once every argument is good)


def _check_walkthrough(args: argparse.Namespace) -> _WalkthroughJob:
    """Rule 1 for ``walkthrough``: every argument before any work."""
    if args.backend == "cuda" and not cuda_available():
        raise UsageError(f"--backend cuda: {cuda_unavailable_reason()}")
    run_config = _load_config("--config", args.config)
    params = param_count(run_config)["total"]
    check_weights_fit(
        params, params * run_config.torch_dtype.itemsize, f"--config {args.config}", UsageError,
        "run a small configuration and analyse large ones shape-only with --full-config", max_params=MAX_RUN_PARAMETERS,
    )
    full_config = None if args.skip_full else _load_config("--full-config", args.full_config)
    if args.sweep_workers is not None and args.sweep_workers < 1:
        raise UsageError(f"--sweep-workers: {args.sweep_workers} processes; give 1 or more (default: none, in this process)")
    out = _make_out("--out", args.out)
    return _WalkthroughJob(run_config, params, full_config, out)


def _cost_model_line(backend: str) -> str:
    """The lines naming the cost models the walkthrough's figures come from."""
    run = "" if backend == "cuda" else f"# simulated run of the small model: {default_cost_model().name}\n"
    return (run + f"# full-size tokens/s and the capacity answer: one decode token timed on {wt.deployment_cost_model().name} "
            f"(runtime profile {wt.DEPLOYMENT_RUNTIME}, terms fitted to published runs; each link swapped in where links "
            "are compared)")


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    write_csv(table, path, "a table")  # atomic; text a spreadsheet would evaluate is marked as text


def _cmd_walkthrough(args: argparse.Namespace) -> int:
    if args.model != "builtin":
        return _cmd_walkthrough_hf(args)
    job = _check_walkthrough(args)
    run_config, params, out = job.run_config, job.params, job.out
    progress = _progress(not args.no_progress)
    started = time.perf_counter()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 40)

    print(_cost_model_line(args.backend))
    results = wt.tiny_results(run_config, backend=args.backend, progress=progress)
    table = wt.strategy_table(results)
    _write_csv(table, out / "strategies_tiny.csv")
    print(f"# MoE decode step, {args.config} model ({params:,} parameters), backend {args.backend}")
    print("# copies and bytes per token; arenas and resident weights per device; time per token")
    print(table.to_string(index=False))
    _write_figures(results, out, progress)

    if job.full_config is not None:
        full_config = job.full_config
        rate = wt.full_size_hit_rate(full_config)  # the full-size weights are not there to measure
        full = wt.full_size_results(full_config, prefetch_hit_rate=rate, progress=progress)
        full_table = wt.full_size_table(full)
        _write_csv(full_table, out / "strategies_full_size.csv")
        counted = param_count(full_config)
        print(f"\n# full size, shape-only: {counted['total'] / 1e9:.2f} B parameters "
              f"({counted['active_per_token'] / 1e9:.2f} B active per token), modeled on an H200")
        print(full_table.to_string(index=False))
        sensitivity = wt.prefetch_sensitivity(full, hit_rates=[0.0, rate, 1.0])
        _write_csv(sensitivity, out / "prefetch_sensitivity.csv")
        print(f"\n# expert prefetch at full size: hit rate 0, {rate:.3f} (measured on the tiny model widened to the full "
              f"configuration's {full_config.num_experts} experts, top-{full_config.num_experts_per_tok}, random weights, "
              "256 tokens), 1")
        print(sensitivity.to_string(index=False))
        breakeven = wt.streaming_breakeven(full_config)
        _write_csv(breakeven, out / "streaming_breakeven.csv")
        print("\n# tokens per expert at which a streamed expert's copy hides behind its compute")
        print(breakeven.to_string(index=False))
        if full_config == MoEConfig.full():  # the published anchors are of this configuration
            anchors = wt.anchors_table(wt.full_size_plan(full_config, formats=wt.ANCHOR_FORMATS))
            _write_csv(anchors, out / "executorch_anchors.csv")
            print("\n# ExecuTorch's published decode times vs one decode physics: this graph (all on device, int4 "
                  "as ExecuTorch ran it) and the run's facts, each timed on the A100 with ExecuTorch's runtime profile")
            print(anchors.to_string(index=False))
        write_published_anchors(out)
        if not args.skip_sweep:
            _write_sweep(full_config, rate, out, args.sweep_workers, args.full_grid)
    return _finish(out, started, results)


def write_published_anchors(out: Path) -> None:
    """anchors.csv: every published batch-1 decode run beside the decode model's speed for
    it, in sample and held out (its terms fitted without the run's source, and without its
    engine), with the interval it earned; printed: the held-out figures per regime —
    leave-one-runtime-out, the headline, then leave-one-source-out — the ordering of
    pairs that differ in one setting, and each fitted term."""
    table = modeled_vs_published()
    _write_csv(table, out / "anchors.csv")
    model = regime_model()
    print(f"\n# published batch-1 decode runs vs the decode model, held out by engine (leave one runtime out): each "
          f"engine's runs predicted by terms fitted without any of them ({int(table['LORO ratio'].notna().sum())} of "
          f"{len(table)} runs modeled; anchors.csv has every run, in sample and held out by source too, the interval "
          "each earned and on what evidence, and why a run is not modeled)")
    print(regime_table(model.out_of_runtime, "engine").to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print("# held out by source (leave one source out): the runtime's other sources stay in the fit")
    print(regime_table(model.out_of_sample).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    pairs = ordering(model.out_of_sample)
    if len(pairs):
        print(f"pairs that differ in one setting, ordered as published: {int(pairs['ordered'].sum())} of {len(pairs)}")
    for term in model.terms:
        how = "prior (too few runs)" if term.prior else f"median leave-one-out error {term.median_loo_error:.0%}"
        print(f"fitted {term.name}: {term.value:.3g} on {len(term.rows)} runs, {how}")


def _cmd_prospective(args: argparse.Namespace) -> int:
    """Predictions logged before their runs were measured, judged once they are."""
    if args.log_runs is not None:
        added = pro.log_predictions(args.log_runs, args.log)
        print(f"logged {len(added)} new predictions (model version {pro.model_version()})")
    for item in args.measured or ():
        run_id, _, figure = item.partition("=")
        try:
            tok_s = float(figure)
        except ValueError:
            raise UsageError(f"--measured takes ID=TOK_S (a number of tok/s), got {item!r}") from None
        pro.record_measured(run_id, tok_s, log=args.log)
        print(f"recorded {run_id}: {tok_s:g} tok/s")
    summary = pro.prospective_summary(args.log)
    pd.set_option("display.width", 200)
    print(f"# prospective: {summary.logged} predictions logged before their runs were measured, {summary.measured} "
          f"measured since (by model versions {', '.join(summary.versions) or '-'}; current {pro.model_version()}); "
          "none of these runs is in any fit, and none is in leave-one-source-out or leave-one-runtime-out")
    if summary.measured:
        print(f"within 0.5-2: {summary.within:.0%}; inside their logged interval: {summary.covered:.0%}; "
              f"median predicted / measured {summary.median_ratio:.2f}")
    print(summary.table.drop(columns=["model_version"]).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


def _finish(out: Path, started: float, results: Any) -> int:
    """List what the walkthrough wrote; exit status 1 when a strategy's outputs differ from eager."""
    print(f"\nwrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out} "
          f"in {time.perf_counter() - started:.1f} s")
    bad = [r.strategy.label for r in results if not r.matches_eager]
    if bad:
        print(f"outputs differ from eager for: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


#: Decode step of a transformers model in the walkthrough: tokens already in its static
#: cache, and the cache's positions (the built-in decoder's tiny and full max_seq_len).
HF_PAST, HF_TINY_CACHE, HF_FULL_CACHE = 8, 32, 4096


@dataclass(frozen=True)
class _HFJob:
    """The walkthrough's arguments for a transformers model, checked (rule 1)."""

    family: hf.Family  # the architecture
    run_config: Any  # the transformers config that is run
    full_config: Any  # the one analysed shape-only, unless --skip-full
    out: Path  # the output folder (made once every argument is good)


def _hf_config(option: str, family: str, spec: str) -> Any:
    """``tiny``, ``full`` (the family's shipped configurations) or a config JSON file."""
    if spec in ("tiny", "full"):
        return hf.tiny_config(family) if spec == "tiny" else hf.published_config(family)
    if not Path(spec).exists():
        raise UsageError(f"{option}: no file {spec!r}; give 'tiny', 'full' or the path of a transformers config.json")
    try:
        return hf.load_config(spec)
    except WorkbenchError as exc:
        raise UsageError(f"{option}: {exc}") from None


def _check_walkthrough_hf(args: argparse.Namespace) -> _HFJob:
    """Rule 1 for ``walkthrough --model hf:FAMILY``: every argument before any work."""
    if args.backend == "cuda" and not cuda_available():
        raise UsageError(f"--backend cuda: {cuda_unavailable_reason()}")
    if not args.model.startswith("hf:"):
        raise UsageError(f"--model: {args.model!r}; give 'builtin' or hf:FAMILY, FAMILY one of {', '.join(hf.FAMILIES)}")
    try:
        family = hf.family(args.model)
    except hf.HFError as exc:
        raise UsageError(f"--model: {exc}; or 'builtin' for the built-in decoder") from None
    run_config = _hf_config("--config", family.name, args.config)
    full_config = None if args.skip_full else _hf_config("--full-config", family.name, args.full_config)
    out = _make_out("--out", args.out)
    return _HFJob(family, run_config, full_config, out)


def _cmd_walkthrough_hf(args: argparse.Namespace) -> int:
    """The walkthrough's strategy tables for a transformers model (``--model hf:FAMILY``):
    its tiny configuration run, its published one analysed shape-only, and for
    Qwen3.5-MoE the side-by-side with the built-in decoder."""
    job = _check_walkthrough_hf(args)
    import transformers

    # its notices that optional fused kernels are absent: the reference code is what is captured
    transformers.logging.set_verbosity_error()
    family, out = job.family, job.out
    progress = _progress(not args.no_progress)
    started = time.perf_counter()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 40)
    pd.set_option("display.max_colwidth", 200)  # the side-by-side's notes

    print(_cost_model_line(args.backend))
    model = hf.load_model(job.run_config)
    step = hf.capture_decode(model, "static", past=HF_PAST, max_cache_len=max(HF_TINY_CACHE, HF_PAST + 1))
    params = sum(p.numel() for p in model.parameters())
    results = wt.tiny_results(captured=step, backend=args.backend, progress=progress)
    table = wt.strategy_table(results)
    _write_csv(table, out / "strategies_tiny.csv")
    print(f"# {family.title} ({type(model).__name__}), {args.config} config ({params:,} parameters), "
          f"one decode step after {HF_PAST} tokens, backend {args.backend}")
    print(table.to_string(index=False))
    _write_figures(results, out, progress)

    if job.full_config is not None:
        full_model = hf.load_model(job.full_config, shape_only=True)
        full_step = hf.capture_decode(full_model, "static", past=HF_PAST, max_cache_len=HF_FULL_CACHE)
        full = wt.full_size_results(captured=full_step, progress=progress)
        full_table = wt.full_size_table(full)
        _write_csv(full_table, out / "strategies_full_size.csv")
        total = sum(p.numel() for p in full_model.parameters())
        print(f"\n# full size, shape-only: {total / 1e9:.2f} B parameters, static cache of {HF_FULL_CACHE} "
              "positions, modeled on an H200")
        print(full_table.to_string(index=False))
    if family.name == "qwen3_5_moe":
        configs = [("tiny", MoEConfig.tiny())] + ([] if job.full_config is None else [("full", MoEConfig.full())])
        for label, config in configs:
            compared = side_by_side(config)
            _write_csv(compared, out / f"builtin_vs_transformers_{label}.csv")
            print(f"\n# the built-in QwenMoEDecoder vs transformers' Qwen3.5-MoE, same {label} config "
                  "(ratio = transformers / built-in; agree = within 5%)")
            print(compared.to_string(index=False))
    return _finish(out, started, results)


def _write_sweep(config: MoEConfig, rate: float, out: Path, workers: Optional[int], full_grid: bool) -> None:
    """The answer table: best strategy per budget and link (sweep.csv: every point;
    sweep_best.csv: the answers; pareto.png)."""
    matplotlib.use("Agg")  # files only
    result = wt.capacity_sweep(config, prefetch_hit_rate=rate, workers=workers, full_grid=full_grid)
    _write_csv(result.points, out / "sweep.csv")
    answers = wt.answer_table(result)
    _write_csv(answers, out / "sweep_best.csv")
    with atomic_path(out / "pareto.png", "a figure") as tmp:
        result.pareto_figure().savefig(tmp, dpi=120, format="png")
    plt.close("all")
    grid = "every setting of sweeps.default_grid" if full_grid else "sweeps.quick_grid; --full-grid for every setting"
    print(f"\n# capacity planning, shape-only, modeled on an H200: {len(result.points)} points ({grid}) in "
          f"{result.seconds:.0f} s on {len(result.workers)} worker(s); best strategy per budget and link")
    print(answers.to_string(index=False))
    print(f"# a tie (tok/s within {TIE_RTOL:.1%}) goes to the simpler strategy: {' < '.join(SIMPLICITY)}")


def _write_figures(results: Any, out: Path, progress: Callable[..., Any]) -> None:
    """Graph, buffer and timeline figures and a Chrome trace for the streaming strategy;
    a timeline comparing every strategy; each file written atomically (rule 2)."""
    matplotlib.use("Agg")  # files only: no window, whatever backend the environment names

    focus = next((r for r in results if r.strategy.label == "expert_streaming+skip"), results[-1])
    views = {
        "graph.png": lambda: GraphView(focus.device_graph, collapse="layers"),
        "buffers.png": lambda: BufferView(focus.plan, algorithms=[focus.plan.algorithm]),
        "timeline.png": lambda: TimelineView(
            focus.run,
            compare={r.strategy.label: r.run for r in results if r is not focus},
            label=focus.strategy.label,
        ),
    }
    for name, make in progress(views.items(), "figures", "figure"):
        with atomic_path(out / name, "a figure") as tmp:
            make().save(tmp)
        plt.close("all")
    for r in results:
        with atomic_path(out / f"trace_{r.strategy.label.replace('+', '_')}.json", "a trace") as tmp:
            to_chrome_trace(r.run, tmp)


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The handler of command ``name``, looked up when it runs (so a test may replace one)."""
    return {"walkthrough": _cmd_walkthrough, "propagate": _cmd_propagate, "prospective": _cmd_prospective}[name]


def run_command(args: argparse.Namespace) -> int:
    """Run the command ``build_parser`` parsed (module rules 2, 3); its exit status: 0, 1
    (the work failed), 2 (a bad argument) or 130 (interrupted with Ctrl-C: one line, no
    traceback)."""
    prog = f"{PROG} {args.command}"
    try:
        return _command(args.command)(args)
    except UsageError as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except WorkbenchError as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # every file is written atomically: nothing half-written stays
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run a command (module rules); ``plan`` runs its own two stages."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["plan"]:
        return plan_main(given[1:])
    return run_command(build_parser().parse_args(given))  # argparse's own errors: one line, status 2


if __name__ == "__main__":
    sys.exit(main())
