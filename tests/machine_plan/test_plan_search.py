"""Planning a machine: every plan fits every device, the ranking is by predicted speed,
the best llama.cpp plan is the fitting one with the fewest expert layers on the CPU, and a
machine that cannot hold the model says what is missing where."""

import json
import math

import pytest

from workbench.machine_plan.gguf_writing import write_shape_gguf as write_gguf
from plan_machines import parts_file
from workbench.machine_plan.budgets import GPU_MARGIN_BYTES, machine_budgets
from workbench.machine_plan.llama_cpp import LlamaCppPlacement, placement_memory
from workbench.machine_plan.model_tensors import model_from_gguf
from workbench.machine_plan.plan_errors import MachineError, MachinePlanError, PlacementDoesNotFit
from workbench.machine_plan.search import VLLM_GPU_UTILIZATION, plan_machine

GIB = 2**30


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """16 layers x 64 experts, hidden 1024: about 1.7 GiB of Q4_K experts."""
    folder = tmp_path_factory.mktemp("model")
    return model_from_gguf(write_gguf(folder / "m.gguf", layers=16, experts=64, top_k=4, hidden=1024, expert_ff=512,
                                      vocab=4096, heads=8, kv_heads=2, head_dim=128)[0])


@pytest.fixture()
def parts(tmp_path):
    return parts_file(tmp_path, ram_gib=32, gpus={"gpu_2g": 2.0, "gpu_1g6": 1.6, "gpu_1g1": 1.1, "gpu_8g": 8.0})


def test_every_plan_fits_and_the_ranking_is_by_speed(model, parts):
    """Each plan's bytes are within each device's usable bytes; tok/s never rises down
    the list (ties within 0.1% may swap for fewer GPU bytes)."""
    plan = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, context=2048)
    assert plan.plans and plan.considered == 17
    for p in plan.plans:
        assert all(used <= usable for _, used, usable in p.memory)
    speeds = [p.tok_s for p in plan.plans]
    assert all(b <= a * 1.001 for a, b in zip(speeds, speeds[1:]))


def test_the_best_llama_cpp_plan_keeps_the_most_experts_on_the_gpu(model, parts):
    """More expert layers on the host is slower (its DRAM is slower than the GPU's), so the
    first plan is the smallest --n-cpu-moe that fits — and one layer fewer does not fit."""
    plan = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, context=2048)
    best = dict(plan.plans[0].settings)["n_cpu_moe"]
    assert 0 < best < model.layers
    usable = {b.device: b.usable_bytes for b in machine_budgets(gpus=["gpu_1g6"], host="test_host", parts=parts)}
    tighter = placement_memory(model, LlamaCppPlacement(best - 1, (model.layers,)), 2048)
    assert tighter["CUDA0"] > usable["CUDA0"]
    assert plan.plans[0].runtime_args[:4] == ("-ngl", "99", "--n-cpu-moe", str(best))


def test_a_longer_context_moves_experts_to_the_host(model, parts):
    """The KV cache grows with the context and takes GPU memory: the best plan keeps
    fewer expert layers on the GPU at a long context than at a short one."""
    def best(context):
        plan = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, context=context)
        return dict(plan.plans[0].settings)["n_cpu_moe"]
    assert best(16384) > best(512)


def test_everything_on_the_gpu_when_it_fits(model, parts):
    """A GPU that holds the whole model gets no --n-cpu-moe and no host link traffic."""
    plan = plan_machine(model, gpus=["gpu_8g"], host="test_host", parts=parts, context=2048)
    assert dict(plan.plans[0].settings)["n_cpu_moe"] == 0 and "--n-cpu-moe" not in plan.plans[0].runtime_args
    assert plan.plans[0].link_bytes == 0 and plan.plans[0].regime == "all_on_gpu"


def test_a_gpu_too_small_for_the_dense_part_says_what_is_missing(model, parts):
    """When even every expert on the host leaves too much for the GPU, the error names the
    device and how many GiB are missing — the least-GPU placement's excess."""
    usable = 1.1 * GIB - GPU_MARGIN_BYTES
    least = placement_memory(model, LlamaCppPlacement(model.layers, (model.layers,)), 2048)["CUDA0"]
    assert least > usable
    with pytest.raises(PlacementDoesNotFit, match=rf"CUDA0 needs {(least - usable) / GIB:.2f} GiB more"):
        plan_machine(model, gpus=["gpu_1g1"], host="test_host", parts=parts, context=2048)


def test_a_host_without_room_for_the_experts_is_refused(model, tmp_path):
    """A host whose usable RAM cannot take the experts the GPU cannot hold: no plan fits."""
    small = parts_file(tmp_path, ram_gib=4.2, gpus={"gpu_1g6": 1.6})
    with pytest.raises(PlacementDoesNotFit, match="CPU needs"):
        plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=small, context=2048)


def test_a_part_without_memory_is_refused_naming_the_row_to_add(model, parts):
    """A shipped host states no RAM: the error gives the parts-file row to add."""
    with pytest.raises(MachineError, match="host,x86_server,memory_bytes"):
        plan_machine(model, gpus=["gpu_2g"], host="x86_server", parts=parts)
    with pytest.raises(MachineError, match="unknown gpu part 'no_such_gpu'"):
        plan_machine(model, gpus=["no_such_gpu"], host="test_host", parts=parts)


def test_a_users_part_shadows_the_shipped_one(model, tmp_path):
    """A user's rtx_4090 with 1.6 GiB replaces the shipped one's figures whole."""
    parts = parts_file(tmp_path, ram_gib=32, gpus={"rtx_4090": 1.6})
    budgets = machine_budgets(gpus=["rtx_4090"], host="test_host", parts=parts)
    assert budgets[0].capacity_bytes == int(1.6 * GIB)
    shipped = machine_budgets(gpus=["rtx_4090"], host="test_host", parts=parts_file(tmp_path, ram_gib=32))
    assert shipped[0].capacity_bytes == 24 * GIB


def test_two_gpus_split_the_layers(model, parts):
    """Two small GPUs hold more than one: fewer expert layers on the host than with the
    first GPU alone, and the flags carry the split."""
    one = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, context=2048)
    two = plan_machine(model, gpus=["gpu_1g6", "gpu_1g6"], host="test_host", parts=parts, context=2048)
    settings = dict(two.plans[0].settings)
    assert settings["n_cpu_moe"] < dict(one.plans[0].settings)["n_cpu_moe"]
    assert sum(settings["layer_split"]) == model.layers and "-ts" in two.plans[0].runtime_args
    assert two.plans[0].tok_s > one.plans[0].tok_s


def test_ktransformers_more_gpu_experts_is_faster(model, parts):
    """KTransformers: the more of each layer's experts on the GPU, the faster; the best
    plan is the most that fits."""
    plan = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, runtime="ktransformers", context=2048)
    kept = [dict(p.settings)["gpu_experts"] for p in plan.plans]
    assert kept == sorted(kept, reverse=True)
    assert plan.plans[0].runtime_args[:2] == ("--kt-num-gpu-experts", str(kept[0]))


def test_vllm_offload_streams_every_offloaded_byte(model, parts):
    """vLLM's --cpu-offload-gb: the bytes over the link per token are the offloaded
    weights (every forward pass copies them in), and it keeps 10% of the GPU."""
    plan = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, runtime="vllm", context=2048)
    best = plan.plans[0]
    offload = dict(best.settings)["cpu_offload_gb"]
    assert best.link_bytes == pytest.approx(min(offload * GIB, model.bytes_where(expert=True)), rel=0.02)
    assert plan.budgets[0].reserved_bytes == pytest.approx((1 - VLLM_GPU_UTILIZATION) * 1.6 * GIB, rel=1e-6)


def test_json_has_the_documented_shape(model, parts):
    """--json: model, machine, runtime, and ranked plans with placement, memory,
    tok_s {predicted, low, high, evidence} and runtime_args; strict JSON (no NaN)."""
    plan = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, context=2048)
    body = json.loads(json.dumps(plan.to_json(3), allow_nan=False))
    assert set(body) >= {"model", "machine", "runtime", "plans"} and len(body["plans"]) == 3
    first = body["plans"][0]
    assert set(first) >= {"placement", "memory", "tok_s", "runtime_args"}
    assert set(first["memory"]["CUDA0"]) == {"used_bytes", "capacity_bytes"}
    tok = first["tok_s"]
    assert tok["low"] < tok["predicted"] < tok["high"] and tok["evidence"]
    assert all(isinstance(a, str) for a in first["runtime_args"])


def test_bad_requests_are_refused(model, parts):
    """An unknown runtime, a context out of range: each refused saying what is valid."""
    with pytest.raises(MachinePlanError, match="valid: llama.cpp"):
        plan_machine(model, gpus=["gpu_2g"], host="test_host", parts=parts, runtime="tensorrt")
    with pytest.raises(MachinePlanError, match="context"):
        plan_machine(model, gpus=["gpu_2g"], host="test_host", parts=parts, context=0)


def test_predicted_speed_carries_the_runtimes_evidence(model, parts):
    """The interval and label come from the runtime profile's held-out evidence for the
    plan's regime (the same as the decode model states for that profile)."""
    from workbench.speed.regime_model import regime_model
    plan = plan_machine(model, gpus=["gpu_1g6"], host="test_host", parts=parts, context=2048)
    p = plan.plans[0]
    earned = regime_model().interval("ggml", p.regime)
    assert p.evidence == earned.evidence and (p.low, p.high) == pytest.approx(earned.bounds(p.tok_s))
    assert math.isfinite(p.low)


def test_a_machine_without_a_gpu_runs_everything_on_the_host(model, parts):
    """No GPU: one llama.cpp plan, -ngl 0, every byte in host RAM, its speed the host
    reading every active weight; its label says no host-only run backs it."""
    plan = plan_machine(model, gpus=[], host="test_host", parts=parts, context=2048)
    (only,) = plan.plans
    assert only.runtime_args[:2] == ("-ngl", "0") and [d for d, _, _ in only.memory] == ["CPU"]
    assert only.memory[0][1] > model.bytes_where()
    assert "unvalidated placement" in only.evidence and 0 < only.tok_s
    facts, bits = model.facts(), model.bits()
    read = facts.other_active * bits.other / 8 + facts.expert_active * bits.experts / 8
    assert only.tok_s <= 2.0e11 / read  # never faster than the host's DRAM (test_host: 200 GB/s) can stream it
    with pytest.raises(MachineError, match="needs one"):
        plan_machine(model, gpus=[], host="test_host", parts=parts, runtime="ktransformers")


def test_a_placement_beyond_the_card_is_timed_not_refused(tmp_path):
    """Every candidate is timed, those that do not fit as if the GPU were as large as they
    need: a model whose every-tensor-on-the-GPU placement misses the card by less than its
    token embedding (which llama.cpp keeps on the host, and a decode layout would count on
    the GPU) is planned, not refused by the layout's own capacity check."""
    from workbench.machine_plan.model_tensors import model_from_facts
    from workbench.speed.published_runs import published_runs
    run = next(r for r in published_runs() if r.id == "lucebox289_qwen36_2080ti_allcold")
    model = model_from_facts(run.model, run.formats)
    plan = plan_machine(model, gpus=[run.gpu], host="test_host", parts=parts_file(tmp_path, ram_gib=256, gpus={}),
                        context=4096)  # fmt: skip
    assert plan.plans and all(dict(p.settings)["n_cpu_moe"] > 0 for p in plan.plans)
    assert any(dict(p.settings)["n_cpu_moe"] == 0 and p.tok_s > plan.plans[0].tok_s for p in plan.unfit)
