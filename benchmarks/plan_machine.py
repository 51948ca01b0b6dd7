"""The plan command against its targets, and against the placements people published.

    python benchmarks/plan_machine.py

Prints:

- refusing a bad model file: CPU seconds of the reader on each kind of hostile GGUF (a
  truncated file, a count of 2^60 tensors, an array longer than the file, a 2^80-element
  tensor, a text file), median of 5; and of the whole command on each in a fresh
  interpreter (``python -m workbench plan``, the interpreter's start and imports
  included), median of 3 — target: 2 s of CPU; and of ``python -m workbench --help``;
- planning a 94-layer, 128-expert GGUF (a Qwen3-235B-A22B-shaped Q4_K file, its data a
  hole): CPU seconds in process, and of the whole command — target: 10 s of CPU;
- the published llama.cpp runs that state their placement (``--n-cpu-moe N``, every
  expert on the CPU, or all on the GPU): for each, the planner's first choice on the
  run's GPU, host and model, and the run's own placement, both predicted by the same
  decode model; how often the first choice is predicted at least as fast, and by how
  much (median and range of the ratio), and how many of the published placements fit by
  the planner's own memory accounting. A host's RAM is not stated in the runs: taken as
  ample (2 TiB), so the GPU's memory is what binds.
"""

from __future__ import annotations

import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout


import gguf  # noqa: E402

from workbench.machine_plan.gguf_writing import write_shape_gguf as write_gguf  # noqa: E402
from workbench.machine.parts import part_facts, parts  # noqa: E402
from workbench.machine_plan.model_tensors import model_from_facts, model_from_gguf  # noqa: E402
from workbench.machine_plan.plan_errors import MachinePlanError  # noqa: E402
from workbench.machine_plan.search import plan_machine  # noqa: E402
from workbench.speed.published_runs import published_runs  # noqa: E402

Q = gguf.GGMLQuantizationType


def _hostile_files(folder: Path) -> dict[str, Path]:
    made = {}
    base = write_gguf(folder / "truncated.gguf", layers=8, tokens=1000)[0]
    os.truncate(base, os.path.getsize(base) // 2)
    made["truncated"] = base
    for name, offset in (("2^60 tensors", 8), ("2^60 keys", 16)):
        path = write_gguf(folder / f"count{offset}.gguf", layers=8)[0]
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(struct.pack("<Q", 1 << 60))
        made[name] = path
    path = write_gguf(folder / "array.gguf", layers=8, tokens=1000)[0]
    at = path.read_bytes().index(b"tokenizer.ggml.tokens") + len(b"tokenizer.ggml.tokens") + 8
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<Q", 1 << 58))
    made["array of 2^58"] = path
    text = folder / "text.gguf"
    text.write_text("this is not a model\n" * 100)
    made["not a GGUF"] = text
    return made


def _command_cpu(args: list[str], command: str = "plan") -> tuple[float, int]:
    """CPU seconds (user + system) of ``python -m workbench COMMAND ARGS`` in a fresh interpreter."""
    before = os.times()
    done = subprocess.run([sys.executable, "-m", "workbench", *([command] if command else []), *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system), done.returncode


def _host_parts(folder: Path) -> Path:
    """Every shipped host again, with 2 TiB of RAM (the runs do not state it)."""
    table = parts()
    hosts = table[table["kind"] == "host"]
    rows = ["kind,name,field,value,source"]
    for row in hosts.itertuples(index=False):
        if row.field != "memory_bytes":
            rows.append(",".join([row.kind, row.name, row.field, f'"{row.value}"' if "," in row.value else row.value,
                                  "shipped"]))  # fmt: skip
    rows += [f"host,{name},memory_bytes,{2 * 2**40},not stated by the run: taken as ample" for name in sorted(set(hosts["name"]))]
    path = folder / "hosts.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _published_comparison(folder: Path) -> None:
    host_parts = _host_parts(folder)
    rows = []
    for run in published_runs():
        if run.runtime != "ggml" or run.model is None or run.formats is None or run.placement is None or not run.gpu:
            continue
        if "memory_bytes" not in part_facts("gpu", run.gpu):
            continue
        stated = {"all_on_gpu": 0, "experts_on_host_compute": run.model.layers if run.placement.gpu_experts == 0 else None,
                  "partial_offload": run.placement.host_layers}.get(run.regime)  # fmt: skip
        if stated is None:
            continue
        model = model_from_facts(run.model, run.formats)
        try:
            plan = plan_machine(model, gpus=[run.gpu], host=run.host or "x86_server", parts=host_parts,
                                context=max(1, run.placement.context_tokens or 4096), link=run.link)  # fmt: skip
        except MachinePlanError as exc:
            rows.append((run.id, None, None, f"no plan: {str(exc)[:80]}"))
            continue
        stated = min(stated, model.layers)
        theirs = next((p for p in plan.plans if dict(p.settings)["n_cpu_moe"] in (stated, *(
            [model.layers] if stated >= model.layers else []))), None)  # fmt: skip
        best = plan.plans[0]
        if theirs is None:
            rows.append((run.id, best.tok_s, None, f"their --n-cpu-moe {stated} exceeds the planner's memory accounting"))
        else:
            rows.append((run.id, best.tok_s, theirs.tok_s, f"plan --n-cpu-moe {dict(best.settings)['n_cpu_moe']}, "
                                                           f"theirs {stated}"))  # fmt: skip
    compared = [(i, b, t) for i, b, t, _ in rows if b is not None and t is not None]
    ratios = [b / t for _, b, t in compared]
    print(f"\n## published llama.cpp runs with a stated placement: {len(rows)}")
    for run_id, best, theirs, note in rows:
        ratio = f"{best / theirs:6.3f}" if best and theirs else "     -"
        print(f"  {run_id[:44]:44} plan {best or float('nan'):7.2f} tok/s  theirs {theirs or float('nan'):7.2f}  "
              f"ratio {ratio}  {note}")  # fmt: skip
    if ratios:
        faster = sum(r >= 1 - 1e-9 for r in ratios)
        print(f"first choice predicted at least as fast as the published placement: {faster} of {len(ratios)} "
              f"({faster / len(ratios):.0%}); ratio median {statistics.median(ratios):.3f}, range "
              f"{min(ratios):.3f}-{max(ratios):.3f}")
    print(f"published placements that fit by the planner's accounting: {len(compared)} of {len(rows)}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("## refusing a bad model file (target: 2 s of CPU)")
        for name, path in _hostile_files(folder).items():
            times = []
            for _ in range(5):
                started = time.process_time()
                try:
                    model_from_gguf(path)
                except MachinePlanError:
                    pass
                times.append(time.process_time() - started)
            print(f"  {name:16} reader {statistics.median(times) * 1e3:8.2f} ms CPU (median of 5)")
        parts_path = folder / "parts.csv"
        parts_path.write_text("kind,name,field,value,source\n" + "\n".join(
            f"host,bench_host,{f},{v},benchmark machine" for f, v in (("host_flops", "2e12"), ("host_memory_bandwidth", "3e11"),
                                                                       ("host_op_overhead", "2e-5"), ("sockets", "1"),
                                                                       ("memory_bytes", str(384 * 2**30))))
            + "\n")  # fmt: skip
        base = ["--gpu", "rtx_4090", "--host", "bench_host", "--parts", str(parts_path)]
        print("  whole command, fresh interpreter (start and imports included), median of 3:")
        for name, path in _hostile_files(folder).items():
            runs = [_command_cpu(["--model", str(path), *base]) for _ in range(3)]
            print(f"  {name:16} command {statistics.median(c for c, _ in runs):6.2f} s CPU, exit status {runs[0][1]}")
        help_cpu = _command_cpu(["--help"], command="")[0]
        print(f"  python -m workbench --help: {help_cpu:.2f} s CPU (the light parser; no command is imported)")
        good = write_gguf(folder / "small.gguf", layers=4, experts=8, top_k=2, hidden=256, expert_ff=256, vocab=512,
                          heads=4, kv_heads=2, head_dim=64)[0]  # fmt: skip
        runs = [_command_cpu(["--model", str(good), "--gpu", "no_such_gpu", *base[2:]]) for _ in range(3)]
        print(f"  (for comparison, a good file and an unknown GPU part, refused by the second stage once the decode "
              f"model is loaded: {statistics.median(c for c, _ in runs):.2f} s CPU, exit status {runs[0][1]})")
        print("\n## planning a 94-layer, 128-expert GGUF (target: 10 s of CPU)")
        big = write_gguf(folder / "qwen3_235b_shaped.gguf", layers=94, experts=128, top_k=8, hidden=4096, expert_ff=1536,
                         vocab=151936, heads=64, kv_heads=4, head_dim=128, expert_type=Q.Q4_K, other_type=Q.Q8_0,
                         tokens=151936)[0]  # fmt: skip
        started = time.process_time()
        model = model_from_gguf(big)
        plan = plan_machine(model, gpus=["rtx_4090"], host="bench_host", parts=parts_path, context=8192)
        spent = time.process_time() - started
        print(f"  {len(model.tensors)} tensors, {model.bytes_where() / 2**30:.1f} GiB; {plan.considered} placements, "
              f"{len(plan.plans)} fit; in process: {spent:.2f} s CPU")
        cpu, code = _command_cpu(["--model", str(big), "--gpu", "rtx_4090", "--host", "bench_host", "--parts",
                                  str(parts_path), "--context", "8192", "--json"])  # fmt: skip
        print(f"  whole command: {cpu:.2f} s CPU, exit status {code}")
        best = plan.plans[0]
        print(f"  best: {best.tok_s:.2f} tok/s ({best.low:.2f}-{best.high:.2f}, {best.evidence}); "
              f"{' '.join(best.runtime_args)}")
        _published_comparison(folder)


if __name__ == "__main__":
    main()

