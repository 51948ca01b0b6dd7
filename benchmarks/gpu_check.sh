#!/usr/bin/env bash
# One-shot check of the runtime on a machine with a CUDA GPU (written for one H200).
#
#   OUT=/some/dir PYTHONPATH=. bash benchmarks/gpu_check.sh      # from the repository root
#
# Parts (each guarded: a failure or timeout is logged and the next part still runs), with
# their time limits; the limits add up to 450 s (7.5 minutes), plus the set-up (three Python
# start-ups and two nvidia-smi calls for env.txt), so the whole script stays under 8 minutes:
#   1. pytest -m gpu on every test file with gpu tests (90 s) -> $OUT/gpu_tests.log
#   2. benchmarks/copy_bandwidth.py up to 256 MiB (50 s)
#                                                     -> $OUT/copy_bandwidth.csv
#   3. workbench.calibrate(backend="cuda"), benchmarks/calibrate.py (70 s)
#                                                     -> $OUT/measured/<gpu>.json (the measured
#                                                        preset to commit as data/measured/<gpu>.json)
#   4. the tiny MoE decode step on backend="cuda" for every placement strategy: measured
#      vs modeled (the H200 datasheet preset, and the preset part 3 measured) (60 s)
#                                                     -> $OUT/moe_cuda_vs_sim.csv,
#                                                        $OUT/moe_timelines.csv (measured events)
#   5. benchmarks/executor_overhead.py on cuda: the executor's cost per step against eager
#      torch, with a cProfile of the MoE step (30 s) -> $OUT/run.log
#   6. benchmarks/fullsize_decode.py: Qwen3.5-35B-A3B bf16 (the shipped config), seeded
#      weights made on the GPU, 32 decode tokens after a 512-token (synthetic) prompt:
#      all_on_device per op and with graph replay, torch eager and torch CUDA-graph
#      replay on the same weights and inputs, expert_streaming and an expert cache with
#      the experts in pinned host memory; modeled with the preset part 3 measured (else
#      the committed data/measured/h200.json) (150 s)
#                                                     -> $OUT/h200_fullsize_decode.csv
#                                                        (one row appended as each finishes)
# The output of parts 2-5 and each part's exit code and seconds go to $OUT/run.log (part 1
# writes only its own log); $OUT/env.txt holds versions, the GPU as nvidia-smi reports it
# and, at the end, each part's exit code and seconds. Eight files in all, each truncated
# to 15 MiB (small enough to copy back from a remote GPU machine).
set -u

OUT="${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT/measured"
PY="${PYTHON:-python}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
ENV="$OUT/env.txt"
LOG="$OUT/run.log"
: > "$LOG"

cap() {  # keep every output file at most 15 MiB
    for f in "$@"; do [ -f "$f" ] && truncate -s '<15M' "$f"; done
    return 0
}

log_code() {  # part name, exit code, seconds
    echo "$1 exit=$2 seconds=$3" | tee -a "$LOG" >> "$ENV"
}

{
    date -u
    "$PY" -c 'import sys, torch, numpy; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda); print("numpy", numpy.__version__)'
    "$PY" -c 'import cupy; print("cupy", cupy.__version__)'
    "$PY" -c 'from workbench.runtime import cuda_available, cuda_unavailable_reason; print("cuda_available", cuda_available(), cuda_unavailable_reason())'
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1
    echo "# parts: name exit=code seconds=s"
} > "$ENV" 2>&1

# -- 1. GPU tests ---------------------------------------------------------------------------
t0=$SECONDS
# Only the files that hold gpu tests are collected, and without the notebook options of the
# project's pytest configuration (nbval need not be installed on the GPU machine).
mapfile -t GPU_TESTS < <(grep -rl "mark.gpu" tests --include='*.py' | sort)
timeout 90 "$PY" -m pytest -o addopts="" -m gpu "${GPU_TESTS[@]}" -rA -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
log_code gpu_tests "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT/gpu_tests.log"

# -- 2. copy bandwidth ----------------------------------------------------------------------
t0=$SECONDS
echo "## copy bandwidth" >> "$LOG"
timeout 50 "$PY" benchmarks/copy_bandwidth.py --max-size 256MiB --repeats 10 --out "$OUT/copy_bandwidth.csv" 2>&1 | tee -a "$LOG"
log_code copy_bandwidth "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT/copy_bandwidth.csv"

# -- 3. calibration -------------------------------------------------------------------------
t0=$SECONDS
echo "## calibration" >> "$LOG"
timeout 70 "$PY" benchmarks/calibrate.py --backend cuda --out "$OUT/measured" 2>&1 | tee -a "$LOG"
log_code calibrate "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT"/measured/*.json

# -- 4. MoE decode step: measured on cuda vs modeled -------------------------------------------
SCRIPT="$(mktemp "${TMPDIR:-/tmp}/moe_cuda_vs_sim.XXXXXX.py")"
cat > "$SCRIPT" <<'PYEOF'
"""Tiny MoE decode step per placement strategy: measured time per token on a backend
(CUDA events, median of repeats after a warm-up call) vs the cost model (estimate) with
the H200 datasheet preset and, when part 3 wrote one, the measured preset."""
import csv
import dataclasses
import glob
import statistics
import sys
import time
import warnings

import torch

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.runtime import CostModel, cuda_available, cuda_unavailable_reason, stage_inputs, to_host
from workbench.runtime.executor import estimate, load
from workbench.moe.strategies import strategy_variants

out_dir, backend = sys.argv[1], sys.argv[2]
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 20
measured_files = sorted(glob.glob(f"{out_dir}/measured/*.json"))
if backend == "cuda" and not cuda_available():
    print(cuda_unavailable_reason())
    sys.exit(0)
torch.backends.cudnn.allow_tf32 = False

model = QwenMoEDecoder(MoEConfig.tiny()).eval()
inputs = model.example_inputs()
program = wb.capture(model, inputs)
expected = model(*inputs)

models = {"h200": CostModel.preset("h200", link="pcie_gen5")}
if measured_files:
    models["measured"] = CostModel.load(measured_files[0])
    # the same machine with a compiled runtime's issue cost: what the executor's own work adds
    models["measured_no_executor"] = dataclasses.replace(models["measured"], executor_overhead=0.0)
    print(f"measured preset: {measured_files[0]}", flush=True)
rows, events = [], []
for strategy in strategy_variants():
    label = strategy.label
    row = {"strategy": label}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dg = strategy.apply(program)
        plan = wb.plan(dg, "best")
        staged = stage_inputs(dg, inputs, backend)
        modeled = {k: estimate(plan, m) for k, m in models.items()}
        with load(plan, backend) as session:
            session.run(*staged)  # warm-up: kernels, cuBLAS handles, op costs
            spans, walls = [], []
            for _ in range(repeats):
                t = time.perf_counter()
                res = session.run(*staged)
                walls.append((time.perf_counter() - t) * 1e6)
                spans.append(res.time_us)
        equal = all(
            torch.allclose(to_host(g), w, atol=1e-4, rtol=1e-4) for g, w in zip(res.outputs, expected)
        )
        measured = statistics.median(spans)
        totals = res.timeline.totals_by_kind()
        mtotals = modeled["h200"].totals_by_kind()
        row.update(
            events=len(res.timeline),
            measured_span_us=round(measured, 2),
            measured_wall_us=round(statistics.median(walls), 2),
            wall_us_per_event=round(statistics.median(walls) / len(res.timeline), 2),
            modeled_h200_us=round(modeled["h200"].span_us, 2),
            modeled_over_measured=round(modeled["h200"].span_us / measured, 3) if measured else "",
            modeled_measured_us=round(modeled["measured"].span_us, 2) if "measured" in modeled else "",
            measured_preset_over_measured=round(modeled["measured"].span_us / measured, 3) if "measured" in modeled and measured else "",
            modeled_measured_no_executor_us=round(modeled["measured_no_executor"].span_us, 2) if "measured" in modeled else "",
            measured_compute_us=round(totals["compute"], 2),
            modeled_compute_us=round(mtotals["compute"], 2),
            measured_copy_us=round(totals["h2d"] + totals["d2h"] + totals["d2d"], 2),
            modeled_copy_us=round(mtotals["h2d"] + mtotals["d2h"] + mtotals["d2d"], 2),
            measured_host_us=round(totals["host"], 2),
            modeled_host_us=round(mtotals["host"], 2),
            h2d_bytes=res.copy_bytes_by_kind()["h2d"],
            d2h_bytes=res.copy_bytes_by_kind()["d2h"],
            overlap_measured=round(res.overlap_fraction, 3),
            overlap_modeled=round(modeled["h200"].overlap_fraction(), 3),
            outputs_equal_eager=equal,
            error="",
        )
        for e in res.timeline:
            events.append({"strategy": label, **e.__dict__})
    except Exception as exc:  # one strategy failing must not hide the others
        row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    rows.append(row)
    print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)

columns = list(dict.fromkeys(k for r in rows for k in r))
with open(f"{out_dir}/moe_{backend}_vs_sim.csv", "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
if events:
    with open(f"{out_dir}/moe_timelines.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(events[0]))
        writer.writeheader()
        writer.writerows(events)
sys.exit(1 if any(r.get("error") for r in rows) else 0)
PYEOF
t0=$SECONDS
echo "## MoE decode step, measured vs modeled" >> "$LOG"
timeout 60 "$PY" "$SCRIPT" "$OUT" cuda 20 2>&1 | tee -a "$LOG"
log_code moe_cuda_vs_sim "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT/moe_cuda_vs_sim.csv" "$OUT/moe_timelines.csv" "$LOG" "$ENV"
rm -f "$SCRIPT"

# -- 5. executor overhead per step ---------------------------------------------------------------
t0=$SECONDS
echo "## executor overhead" >> "$LOG"
timeout 30 "$PY" benchmarks/executor_overhead.py --backend cuda --repeats 20 --profile 30 2>&1 | tee -a "$LOG"
log_code executor_overhead "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$LOG" "$ENV"

# -- 6. full-size decode -------------------------------------------------------------------------
t0=$SECONDS
echo "## full-size decode" >> "$LOG"
PRESET="$(ls "$OUT"/measured/*.json 2>/dev/null | head -n 1)"
PRESET="${PRESET:-data/measured/h200.json}"
timeout 150 "$PY" benchmarks/fullsize_decode.py --backend cuda --scale full --prompt 512 --tokens 32 \
    --preset "$PRESET" --out "$OUT/h200_fullsize_decode.csv" 2>&1 | tee -a "$LOG"
log_code fullsize_decode "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT/h200_fullsize_decode.csv" "$LOG" "$ENV"

echo "done; results in $OUT:"
ls -la "$OUT"
exit 0
