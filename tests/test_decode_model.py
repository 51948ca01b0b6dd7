"""The regime decode model of published runs: its physics, its fits and its data files."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.anchors import AnchorError, MODELED_COLUMNS, PUBLISHED_REGIMES, modeled_vs_published, published_decode_runs
from workbench.app.decode_model import (
    decode_layout,
    fit_regime_model,
    model_families,
    predict_decode,
    regime_model,
    time_decode,
    weight_bits,
)
from workbench.errors import WorkbenchError
from workbench.moe.routing import RoutingTrace
from workbench.runtime.parts import part_facts
from workbench.app.runtime_profiles import (
    FIT_PREFIX,
    RuntimeProfileError,
    profile_for,
    runtime_profiles,
    runtime_profiles_path,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runs():
    return published_decode_runs()


@pytest.fixture(scope="module")
def model():
    return regime_model()


def _run(runs, run_id):
    return runs.set_index("id").loc[run_id].to_dict() | {"id": run_id}


def test_every_regime_is_modeled_and_every_row_names_profile_and_parts(model):
    """The default table models rows of every regime; a modeled row names its runtime
    profile and its GPU part, a row left out says why; at most 8 terms are fitted, each on
    at least 3 runs with one leave-one-out error per run."""
    table = modeled_vs_published()
    assert tuple(table.columns) == MODELED_COLUMNS
    modeled = table[table["modeled tok/s"].notna()]
    assert set(modeled["regime"]) == set(PUBLISHED_REGIMES)
    assert (modeled["runtime profile"] != "").all() and modeled["parts"].str.startswith("gpu=").all()
    left = table[table["modeled tok/s"].isna()]
    assert (left["not modeled because"].str.len() > 0).all()
    assert 1 <= len(model.terms) <= 8
    for term in model.terms:
        assert len(term.rows) >= 3 and len(term.loo_errors) == len(term.rows)


def test_doubling_gpu_bandwidth_raises_an_all_on_gpu_run_by_less_than_twice(runs, model):
    """An all-on-GPU run goes faster on a GPU with twice the bandwidth, but less than twice
    as fast: its kernels' fixed time does not shrink."""
    run = _run(runs, "lucebox332_qwen36_3090_graphs")
    layout, _ = decode_layout(run)
    profile = profile_for(run["runtime"])
    base = time_decode(layout, profile, model.fits).tok_s
    faster = time_decode(dataclasses.replace(layout, gpu_bandwidth=2 * layout.gpu_bandwidth), profile, model.fits).tok_s
    assert base < faster < 2 * base


def test_moving_layers_experts_to_the_host_lowers_the_speed(runs, model):
    """With one more layer's experts on the host (--n-cpu-moe N+1) a partial-offload run is
    slower, and faster with one fewer; all experts on the host is slower still."""
    run = _run(runs, "llmfit778_dscoderv2lite_2080_ncmoe16")
    speeds = []
    for n in (15, 16, 17, 27):
        changed = run | {"offload_detail": run["offload_detail"].replace("--n-cpu-moe 16", f"--n-cpu-moe {n}")}
        speeds.append(predict_decode(changed, model.fits).tok_s)
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == 4


def test_host_compute_time_scales_with_host_bandwidth(runs, model):
    """The host part of a host-compute run's time halves when the host's DRAM peak doubles;
    the GPU part does not change."""
    run = _run(runs, "kt_issue1914_qwen3_30b_bf16_5090")
    layout, _ = decode_layout(run)
    profile = profile_for(run["runtime"])
    base = time_decode(layout, profile, model.fits)
    doubled = time_decode(dataclasses.replace(layout, host_peak=2 * layout.host_peak), profile, model.fits)
    assert doubled.seconds["host"] == pytest.approx(base.seconds["host"] / 2)
    assert doubled.seconds["gpu"] == pytest.approx(base.seconds["gpu"]) and doubled.tok_s > base.tok_s


def test_host_part_is_the_longer_of_memory_and_dequantization(runs, model):
    """The host part is a roofline: on the published host the memory term binds (the
    dequantization rate leaves it unchanged); with one core the host time is the experts'
    weights over one core's dequant_rate, and it halves with two cores."""
    run = _run(runs, "llamafit_qcnext_4060_ncmoe48_tg128")
    layout, _ = decode_layout(run)
    profile = profile_for(run["runtime"])
    rate = profile.value("dequant_rate", model.fits)
    assert rate > 0 and layout.host_cores > 1 and layout.expert_weights > 0
    base = time_decode(layout, profile, model.fits)
    memory = layout.host_share * layout.expert_bytes / (layout.host_peak * profile.value("host_bandwidth_fraction", model.fits))
    assert base.host_bound == "memory" and base.seconds["host"] == pytest.approx(memory)
    one = time_decode(dataclasses.replace(layout, host_cores=1), profile, model.fits)
    assert one.host_bound == "dequant_rate"
    assert one.seconds["host"] == pytest.approx(layout.host_share * layout.expert_weights / rate)
    two = time_decode(dataclasses.replace(layout, host_cores=2), profile, model.fits)
    assert two.seconds["host"] == pytest.approx(max(memory, one.seconds["host"] / 2))
    assert one.tok_s < base.tok_s


def test_a_profile_without_a_dequant_rate_is_bound_by_memory_alone(runs, model):
    """dequant_rate 0 (not known) leaves only the memory term, however few the cores."""
    run = _run(runs, "llamafit_qcnext_4060_ncmoe48_tg128")
    layout, _ = decode_layout(run)
    profile = profile_for(run["runtime"])
    unknown = dataclasses.replace(profile, values={**profile.values, "dequant_rate": 0.0})
    one = time_decode(dataclasses.replace(layout, host_cores=1), unknown, model.fits)
    assert one.host_bound == "memory" and one.seconds["host"] == pytest.approx(time_decode(layout, profile, model.fits).seconds["host"])


def test_copy_time_follows_the_link_and_the_cache(runs, model):
    """A copied-experts run's copy part halves with twice the link bandwidth when the fixed
    per-copy cost is zero, and vanishes when the cache holds every expert."""
    run = _run(runs, "moeinf_mixtral_a5000")
    layout, _ = decode_layout(run)
    profile = profile_for(run["runtime"])
    fits = dict(model.fits, offloader_per_copy_cost=0.0)
    base = time_decode(layout, profile, fits)
    assert time_decode(dataclasses.replace(layout, link_bandwidth=2 * layout.link_bandwidth), profile, fits).seconds[
        "copy"] == pytest.approx(base.seconds["copy"] / 2)
    assert time_decode(dataclasses.replace(layout, copy_miss=0.0), profile, fits).seconds["copy"] == 0.0
    assert 0 < layout.copy_miss < 1  # Mixtral fp16 (93 GB) does not fit a 24 GB card, part of it does


def test_leave_one_out_predicts_the_held_out_run(runs, model):
    """Runs published at exactly the modeled speed refit their own term with no
    leave-one-out error; a run published at twice its modeled speed gets a leave-one-out
    error of 0.5 (the term refitted on the two others predicts half its speed)."""
    term = next(t for t in model.terms if t.name.startswith("offloader_per_copy_cost"))
    fits = dict(model.fits, offloader_per_copy_cost=1e-4)
    exact = runs.copy()
    for run_id in term.rows:
        i = exact.index[exact["id"] == run_id][0]
        exact.loc[i, "decode_tok_s"] = predict_decode(exact.loc[i].to_dict(), fits).tok_s
    refit = next(t for t in fit_regime_model(exact).terms if t.name == term.name)
    assert refit.value == pytest.approx(1e-4, rel=1e-6) and max(refit.loo_errors) == pytest.approx(0, abs=1e-6)
    off = exact.copy()
    i = off.index[off["id"] == term.rows[0]][0]
    off.loc[i, "decode_tok_s"] *= 2
    errors = next(t for t in fit_regime_model(off).terms if t.name == term.name).loo_errors
    assert errors[0] == pytest.approx(0.5, rel=1e-4) and errors[0] > max(errors[1:])


def test_a_fit_on_fewer_than_three_runs_is_refused(runs):
    """Without enough runs that depend on a fitted term, the fit is refused by name."""
    fewer = runs[~runs["id"].isin(["moeinf_qwen3_30b_a5000", "moeinf_mixtral_a5000"])]
    with pytest.raises(AnchorError, match=r"'offloader_per_copy_cost' has 1 modeled runs.*at least 3"):
        fit_regime_model(fewer)


def test_rows_the_model_cannot_express_say_why(runs, model):
    """An unknown GPU, an unstated host, unknown bits, several GPUs, storage-backed
    experts and an all-on-GPU model larger than the card are not modeled, each with its
    reason."""
    reasons = {r["id"]: model.predict(r.to_dict()).why for _, r in runs.iterrows()}
    assert "host CPU not stated" in reasons["codacus5_qwen36_3060_ncmoe99"]
    assert "bits per weight not stated" in reasons["moeinf_legacy_accel_mixtral_a5000"]
    assert "several GPUs" in reasons["lcpp15077_gptoss120b_2x5090_ncmoe3"]
    assert "cannot all be on" in reasons["lucebox289_qwen36_2080ti_allgpu"]
    storage = _run(runs, "paddock8_qwen36_5060ti_hostmapped_lru") | {"offload_detail": "experts streamed from NVMe"}
    assert "storage" in predict_decode(storage, model.fits).why
    assert "no GPU part" in predict_decode(storage | {"gpu": "NVIDIA Imaginary 9"}, model.fits).why


def test_weight_bits_follow_the_stated_file_then_the_family_file(runs):
    """A file size the run states sets every weight's bits; gpt-oss's MXFP4 experts keep
    4.25 bits and its other weights take what the family's GGUF file leaves (between 4.25
    and 16 bits)."""
    stated = _run(runs, "ik1593_qwen35_5060ti_q4km_ncmoe14_ik")
    family = next(f for f in model_families() if f.name == "qwen3_5_moe_35b_a3b")
    experts = family.moe_layers * family.num_experts * family.expert_params
    bits = weight_bits(stated, family, experts, 35e9 - experts)
    assert bits[0] == bits[1] == pytest.approx(21e9 * 8 / 35e9)
    gpt = _run(runs, "lcpp16834_gptoss20b_4090")
    family = next(f for f in model_families() if f.name == "gpt_oss_20b")
    experts = family.moe_layers * family.num_experts * family.expert_params
    expert_bits, other_bits, how = weight_bits(gpt, family, experts, 20.9e9 - experts)
    assert expert_bits == 4.25 and 4.25 < other_bits < 16 and "MXFP4" in how


@pytest.mark.parametrize(
    "family, config, keys",
    [
        ("qwen3_5_moe_35b_a3b", "data/qwen3_5_moe_35b_a3b.json", ("num_experts", "num_experts_per_tok", "moe_intermediate_size")),
        ("qwen3_next_80b_a3b", "data/hf/qwen3_next_80b_a3b.json", ("num_experts", "num_experts_per_tok", "moe_intermediate_size")),
        ("mixtral_8x7b", "data/hf/mixtral_8x7b.json", ("num_local_experts", "num_experts_per_tok", "intermediate_size")),
        ("gpt_oss_120b", "data/hf/gpt_oss_120b.json", ("num_local_experts", "num_experts_per_tok", "intermediate_size")),
        ("deepseek_v3", "data/hf/deepseek_v3_671b.json", ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")),
    ],
)
def test_family_facts_match_the_shipped_configs(family, config, keys):
    """A family whose facts cite a shipped config has that config's layers, experts,
    top-k and expert size (three hidden × intermediate projections)."""
    data = json.loads((ROOT / config).read_text())
    data = data.get("text_config", data)
    facts = next(f for f in model_families() if f.name == family)
    experts, top_k, inner = (data[k] for k in keys)
    assert (facts.layers, facts.num_experts, facts.top_k) == (data["num_hidden_layers"], experts, top_k)
    assert facts.expert_params == 3 * data["hidden_size"] * inner


def test_profiles_cite_or_fit_every_term_and_fit_at_most_eight():
    """Every profile field has a source; the fitted terms are named ``fit:<term>`` and at
    most 8 distinct; the runs' runtimes all find a profile."""
    profiles = runtime_profiles()
    assert all(s.strip() for p in profiles for s in p.sources.values())
    terms = {t for p in profiles for t in p.fitted.values()}
    assert 1 <= len(terms) <= 8
    assert all(profile_for(r) is not None for r in published_decode_runs()["runtime"])


def _write_profiles(tmp_path, edit):
    rows = pd.read_csv(runtime_profiles_path(), dtype=str, keep_default_na=False)
    rows = edit(rows)
    path = tmp_path / "profiles.csv"
    rows.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t[~((t.profile == "ggml") & (t.field == "overlap"))], r"profile 'ggml' lacks overlap"),
        (lambda t: t.assign(value=t.value.where(~((t.profile == "ggml") & (t.field == "overlap")), "1.5")),
         r"outside \[0, 1\]"),
        (lambda t: t.assign(value=t.value.where(~((t.profile == "ggml") & (t.field == "matches")), "(unclosed")),
         r"not a regular expression"),
        (lambda t: t.assign(value=t.value.where(~((t.profile == "ggml") & (t.field == "launch_mode")), "warp")),
         r"launch_mode must be one of eager, graph"),
        (lambda t: t.assign(source=t.source.where(~((t.profile == "ggml") & (t.field == "overlap")), ""),), r"no source"),
        (lambda t: t.assign(value=t.value.where(~((t.profile == "ggml") & (t.field == "overlap")), "fast")),
         r"neither a number nor fit:<term>"),
        (lambda t: pd.concat([t, t.iloc[[0]]]), r"given twice"),
    ],
)
def test_a_bad_profile_table_is_refused(tmp_path, edit, message):
    """Each broken rule of a profile table is refused with a RuntimeProfileError (a
    WorkbenchError) naming the row and what is valid."""
    with pytest.raises(RuntimeProfileError, match=message) as info:
        runtime_profiles(_write_profiles(tmp_path, edit))
    assert isinstance(info.value, WorkbenchError)
    with pytest.raises(RuntimeProfileError, match="not a regular file|directory"):
        runtime_profiles(tmp_path)


def test_a_profile_field_fitted_but_not_given_is_refused():
    """A fitted field asked for without its term's value says which term is missing."""
    profile = next(p for p in runtime_profiles() if p.fitted)
    field, term = next(iter(profile.fitted.items()))
    assert FIT_PREFIX + term
    with pytest.raises(RuntimeProfileError, match=repr(term)):
        profile.value(field, {})


def test_new_gpu_parts_state_memory_and_interface():
    """GPU parts used by the copy and all-on-GPU rows state their memory size and PCIe
    interface (what a cache's size and a run's link are derived from)."""
    for name in ("rtx_5090", "rtx_5060_ti_16gb", "rtx_a5000", "rtx_2080", "rtx_2080_ti", "radeon_pro_w7800", "rtx_4090"):
        facts = part_facts("gpu", name)
        assert facts["memory_bytes"] > 1e9 and facts["pcie_gen"] in (3, 4, 5) and facts["pcie_lanes"] in (8, 16)


def test_a_facts_file_that_is_not_a_regular_file_or_not_json_is_refused(tmp_path):
    """The model facts file is read as data: a directory or a named pipe is refused without
    being opened for reading, text that is not JSON or lacks a field is refused by name."""
    import os

    fifo = tmp_path / "facts.json"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo):
        with pytest.raises(AnchorError, match="not a regular file|directory|named pipe"):
            model_families(path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"families": [{"name": "x"}]}')
    with pytest.raises(AnchorError, match="not a readable model facts file"):
        model_families(bad)


def test_the_expert_cache_names_its_routing_and_uses_published_locality(runs, model):
    """A copied-regime run of a family with published routing statistics (Mixtral) takes
    its cache hit rate from an LRU replayed over a trace matching them, and says so; a
    family without statistics says it assumed uniform routing; runs without a cache name
    none."""
    mixtral = model.predict(_run(runs, "moeinf_mixtral_a5000"))
    assert "mixtral_8x7b's published routing statistics" in mixtral.routing
    qwen = model.predict(_run(runs, "moeinf_qwen3_30b_a5000"))
    assert qwen.routing.startswith("uniform routing")
    assert model.predict(_run(runs, "lcpp16834_gptoss20b_4090")).routing == ""
    table = modeled_vs_published(runs)
    assert table.set_index("id").loc["moeinf_mixtral_a5000", "routing"] == mixtral.routing


def test_a_recorded_trace_plugs_in_and_its_reuse_sets_the_copies(runs, model):
    """A trace the caller passes (recorded, not generated) sets the cache's hit rate: on a
    trace whose tokens keep choosing the same two experts, an LRU of c experts per layer
    (1 < c < 2) hits exactly on the share c - 1 of layers that hold two (each expert
    comes back after one other), more than on independent uniform routing, so the run
    copies less and is faster; the prediction names the trace."""
    run = _run(runs, "moeinf_mixtral_a5000")
    T, L, k, E = 256, 32, 2, 8
    steady = RoutingTrace(np.tile(np.array([3, 5]), (T, L, 1)), E, False, "recorded: same experts every token")
    rng = np.random.default_rng(0)
    uniform = RoutingTrace(np.argsort(rng.random((T, L, E)), axis=2)[:, :, :k], E, False, "recorded: uniform")
    fast, slow = model.predict(run, routing=steady), model.predict(run, routing=uniform)
    assert "recorded: same experts every token" in fast.routing
    c = decode_layout(run)[0].cache_share * E
    assert 1 < c < 2
    assert decode_layout(run, steady)[0].copy_miss == pytest.approx(1 - (c - 1) * (1 - 2 / (T * k)))  # first requests miss
    assert fast.seconds["copy"] < 0.6 * slow.seconds["copy"]
    assert fast.tok_s > slow.tok_s


def test_a_routing_trace_of_another_model_is_refused(runs, model):
    """A trace whose layers, experts or top-k are not the run's model's is an AnchorError
    naming both shapes; a non-trace is refused too."""
    run = _run(runs, "moeinf_mixtral_a5000")
    other = RoutingTrace(np.zeros((4, 48, 8), dtype=np.int64) + np.arange(8), 128, False, "recorded: another model")
    with pytest.raises(AnchorError, match="48 layers of 128 experts, top-8; mixtral_8x7b has 32 MoE layers of 8"):
        model.predict(run, routing=other)
    with pytest.raises(AnchorError, match="RoutingTrace"):
        model.predict(run, routing=np.zeros((4, 32, 2)))
