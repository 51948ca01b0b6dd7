#!/usr/bin/env bash
# One-shot check of the runtime on a machine with a CUDA GPU (written for one H200).
#
#   OUT=/some/dir PYTHONPATH=. bash benchmarks/gpu_check.sh      # from the repository root
#
# Parts (each guarded: a failure or timeout is logged and the next part still runs):
#   1. pytest -m gpu on the runtime tests        -> $OUT/gpu_tests.log
#   2. benchmarks/copy_bandwidth.py              -> $OUT/copy_bandwidth.csv, copy_bandwidth.log
#   3. the tiny MoE decode step on backend="cuda" for every placement strategy: measured
#      vs modeled (sim) time per token           -> $OUT/moe_cuda_vs_sim.csv, .log,
#                                                   $OUT/moe_timelines.csv (measured events)
# plus $OUT/env.txt (versions, GPU) and $OUT/exit_codes.txt. At most 8 files, each
# truncated to 15 MiB; the time limits below add up to 7.5 minutes.
set -u

OUT="${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
CODES="$OUT/exit_codes.txt"
: > "$CODES"

cap() {  # keep every output file at most 15 MiB
    for f in "$@"; do [ -f "$f" ] && truncate -s '<15M' "$f"; done
    return 0
}

log_code() {  # part name, exit code, seconds
    echo "$1 exit=$2 seconds=$3" | tee -a "$CODES"
}

{
    date -u
    "$PY" -c 'import sys, torch, numpy; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda); print("numpy", numpy.__version__)'
    "$PY" -c 'import cupy; print("cupy", cupy.__version__)'
    "$PY" -c 'from workbench.runtime import cuda_available, cuda_unavailable_reason; print("cuda_available", cuda_available(), cuda_unavailable_reason())'
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1
} > "$OUT/env.txt" 2>&1
cap "$OUT/env.txt"

# -- 1. GPU tests ---------------------------------------------------------------------------
t0=$SECONDS
timeout 200 "$PY" -m pytest -m gpu tests/runtime -rA -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
log_code gpu_tests "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT/gpu_tests.log"

# -- 2. copy bandwidth ----------------------------------------------------------------------
t0=$SECONDS
timeout 150 "$PY" benchmarks/copy_bandwidth.py --out "$OUT/copy_bandwidth.csv" 2>&1 | tee "$OUT/copy_bandwidth.log"
log_code copy_bandwidth "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT/copy_bandwidth.csv" "$OUT/copy_bandwidth.log"

# -- 3. MoE decode step: measured on cuda vs modeled -------------------------------------------
SCRIPT="$(mktemp "${TMPDIR:-/tmp}/moe_cuda_vs_sim.XXXXXX.py")"
cat > "$SCRIPT" <<'PYEOF'
"""Tiny MoE decode step per placement strategy: measured time per token on a backend
(CUDA events, median of repeats after a warm-up call) vs the sim model (estimate)."""
import csv
import statistics
import sys
import time
import warnings

import torch

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.runtime import CostModel, cuda_available, cuda_unavailable_reason, stage_inputs, to_host
from workbench.runtime.executor import estimate, load
from workbench.strategies import strategy_variants

out_dir, backend = sys.argv[1], sys.argv[2]
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 20
if backend == "cuda" and not cuda_available():
    print(cuda_unavailable_reason())
    sys.exit(0)
torch.backends.cudnn.allow_tf32 = False

model = QwenMoEDecoder(MoEConfig.tiny()).eval()
inputs = model.example_inputs()
program = wb.capture(model, inputs)
expected = model(*inputs)

models = {"h200": CostModel.preset("h200", link="pcie_gen5"), "h200_measured": CostModel.preset("h200_measured", link="pcie_gen5")}
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
            modeled_h200_us=round(modeled["h200"].span_us, 2),
            modeled_h200_measured_us=round(modeled["h200_measured"].span_us, 2),
            modeled_over_measured=round(modeled["h200"].span_us / measured, 3) if measured else "",
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
timeout 100 "$PY" "$SCRIPT" "$OUT" cuda 20 2>&1 | tee "$OUT/moe_cuda_vs_sim.log"
log_code moe_cuda_vs_sim "${PIPESTATUS[0]}" $((SECONDS - t0))
cap "$OUT/moe_cuda_vs_sim.csv" "$OUT/moe_cuda_vs_sim.log" "$OUT/moe_timelines.csv"
rm -f "$SCRIPT"

echo "done; results in $OUT:"
ls -la "$OUT"
exit 0
