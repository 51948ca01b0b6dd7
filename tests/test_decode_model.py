"""The decode model of published runs: one physics, its fits, and its held-out errors."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.app.anchors import MODELED_COLUMNS, PUBLISHED_REGIMES, AnchorError, modeled_vs_published, published_decode_runs
from workbench.speed.evidence import regime_factors
from workbench.speed.regime_model import (
    fit_regime_model,
    leave_one_source_out,
    predict_decode,
    regime_model,
)
from workbench.speed.model_families import model_families
from workbench.speed.published_runs import TraceRouting, published_runs, read_run
from workbench.machine.runtime_profiles import fitted_terms, runtime_profiles
from workbench.moe.locality import locality_trace
from workbench.speed.layout import ModelFacts, ExpertPlacement
from workbench.speed.timer import time_decode

from published_fixtures import model, runs  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table():
    return published_decode_runs()


def _row(table, run_id):
    return table.set_index("id").loc[run_id].to_dict() | {"id": run_id}


def test_every_regime_is_modeled_and_every_row_names_profile_and_parts(model):
    """The default table models rows of every regime; a modeled row names its runtime
    profile and its GPU part, a row left out says why; at most 8 terms are fitted, each on
    at least 3 runs with one leave-one-out error per run, or kept at its prior and marked."""
    table = modeled_vs_published()
    assert tuple(table.columns) == MODELED_COLUMNS
    modeled = table[table["modeled tok/s"].notna()]
    assert set(modeled["regime"]) == set(PUBLISHED_REGIMES)
    assert (modeled["runtime profile"] != "").all() and modeled["parts"].str.startswith("gpu=").all()
    assert (table.loc[table["modeled tok/s"].isna(), "not modeled because"].str.len() > 0).all()
    assert 1 <= len(model.terms) <= 8
    for term in model.terms:
        assert term.prior or (len(term.rows) >= 3 and len(term.loo_errors) == len(term.rows))


def test_doubling_gpu_bandwidth_raises_an_all_on_gpu_run_by_less_than_twice(runs, model):
    """An all-on-GPU run goes faster on a GPU with twice the bandwidth, but less than twice
    as fast: its kernels' fixed time does not shrink."""
    layout, machine = model.machine(runs["lucebox332_qwen36_3090_graphs"])
    base = time_decode(layout, machine).tok_s
    faster = time_decode(layout, dataclasses.replace(machine, device_memory_bandwidth=2 * machine.device_memory_bandwidth)).tok_s
    assert base < faster < 2 * base
    assert model.predict(runs["lucebox332_qwen36_3090_graphs"]).tok_s == pytest.approx(base)


def test_moving_layers_experts_to_the_host_lowers_the_speed(table, model):
    """With one more layer's experts on the host (--n-cpu-moe N+1) a partial-offload run is
    slower, and faster with one fewer; all experts on the host is slower still."""
    row = _row(table, "llmfit778_dscoderv2lite_2080_ncmoe16")
    speeds = [model.predict(row | {"offload_detail": row["offload_detail"].replace("--n-cpu-moe 16", f"--n-cpu-moe {n}")}).tok_s
              for n in (15, 16, 17, 27)]  # fmt: skip
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == 4


def test_the_host_part_is_a_roofline_of_memory_and_the_runtimes_matvec_rate(runs, model):
    """A host-compute run's host part halves when the host's bandwidth doubles while memory
    binds; with one thread the runtime's matvec rate binds instead, and the part is the
    host's weights over one core's rate for their format."""
    run = runs["llamafit_qcnext_4060_ncmoe48_tg128"]
    layout, machine = model.machine(run)
    base = time_decode(layout, machine)
    assert base.host_bound == "memory" and layout.host_format in dict(machine.host_matvec_rates)
    doubled = time_decode(layout, dataclasses.replace(machine, host_memory_bandwidth=2 * machine.host_memory_bandwidth))
    calls = layout.host_calls * machine.host_op_overhead
    assert doubled.host - calls == pytest.approx((base.host - calls) / 2) and doubled.gpu == pytest.approx(base.gpu)
    one_thread = model.machine(dataclasses.replace(run, threads=1))[1]
    rate = dict(one_thread.host_matvec_rates)[layout.host_format]
    assert rate * 16 == pytest.approx(dict(machine.host_matvec_rates)[layout.host_format])  # the run's -t 16
    slow_cores = dataclasses.replace(one_thread, host_matvec_rates=((layout.host_format, rate / 100),))
    slow = time_decode(layout, slow_cores)
    assert slow.host_bound == "compute" and slow.host - calls == pytest.approx(layout.host_weights / (rate / 100))


def test_copy_time_follows_the_link_and_the_cache(runs, model):
    """A copied-experts run's copy part falls with a faster link and vanishes when the
    cache holds every expert; Mixtral fp16 (93 GB) on a 24 GB card holds part of it."""
    run = runs["moeinf_mixtral_a5000"]
    layout, machine = model.machine(run)
    base = time_decode(layout, machine)
    faster = time_decode(layout, dataclasses.replace(machine, h2d_bandwidth=2 * machine.h2d_bandwidth))
    assert faster.copy < base.copy and faster.link_bytes == base.link_bytes
    assert time_decode(dataclasses.replace(layout, expert_loads=0.0, expert_copies=0.0), machine).copy < 0.01 * base.copy
    assert 0 < layout.cache_share < 1 and 0 < layout.hit_rate < 1


def test_leave_one_out_predicts_the_held_out_run(runs, model):
    """Runs published at exactly the modeled speed (every run at the speed some fits give)
    refit those fits with no leave-one-out error; a run published at twice its modeled
    speed gets the largest error."""
    term = next(t for t in model.terms if not t.prior and len(t.rows) >= 4)
    name = term.name.split(" ")[0]
    fits = dict(model.fits, **{name: model.fits[name] * 1.3})
    exact = [dataclasses.replace(r, tok_s=predict_decode(r, fits).tok_s) for r in runs.values()
             if predict_decode(r, fits).tok_s is not None]  # fmt: skip
    refit = next(t for t in fit_regime_model(exact).terms if t.name == term.name)
    assert refit.value == pytest.approx(fits[name], rel=1e-4) and max(refit.loo_errors) == pytest.approx(0, abs=1e-3)
    off = [dataclasses.replace(r, tok_s=2 * r.tok_s) if r.id == term.rows[0] else r for r in exact]
    errors = next(t for t in fit_regime_model(off).terms if t.name == term.name).loo_errors
    assert errors[0] > 0.3 and errors[0] > max(errors[1:])


def test_a_term_with_fewer_than_three_runs_keeps_its_prior(runs):
    """Without enough runs that depend on a fitted term, the term keeps its physical prior
    and says so (a leave-one-source-out fold must still predict)."""
    only_gpu = [r for r in runs.values() if r.regime == "all_on_gpu"]
    model = fit_regime_model(only_gpu, loo=False)
    host = next(t for t in model.terms if t.name.startswith("ggml_host_bandwidth_fraction"))
    assert host.prior and host.value == fitted_terms()["ggml_host_bandwidth_fraction"].prior
    assert not next(t for t in model.terms if t.name.startswith("kernel_time")).prior


def test_rows_the_model_cannot_express_say_why(table, model):
    """An unknown GPU, an unstated host, unknown bits, several GPUs, storage-backed experts
    and an all-on-GPU model larger than the card are not modeled, each with its reason."""
    reasons = {r["id"]: model.predict(r).why for r in table.to_dict("records")}
    assert "host CPU not stated" in reasons["lucebox289_qwen36_2080ti_allcold"]
    assert "bits per weight not stated" in reasons["moeinf_legacy_accel_mixtral_a5000"]
    assert "several GPUs" in reasons["lcpp15077_gptoss120b_2x5090_ncmoe3"]
    assert "do not fit" in reasons["lucebox289_qwen36_2080ti_allgpu"]
    storage = _row(table, "paddock8_qwen36_5060ti_hostmapped_lru") | {"offload_detail": "experts streamed from NVMe"}
    assert "storage" in model.predict(storage).why
    assert "no GPU part" in model.predict(storage | {"gpu": "NVIDIA Imaginary 9"}).why


def test_weight_bits_follow_the_stated_file_then_the_family_file(runs):
    """A file size the run states sets every weight's bits; gpt-oss's MXFP4 experts keep
    4.25 bits and its other weights take what the family's GGUF file leaves."""
    stated = runs["ik1593_qwen35_5060ti_q4km_ncmoe14_ik"]
    assert stated.formats.experts == stated.formats.other == pytest.approx(21e9 * 8 / 35e9)
    assert stated.formats.expert_format == "q4_k"
    gpt = runs["lcpp16834_gptoss20b_4090"].formats
    assert gpt.experts == 4.25 and 4.25 < gpt.other < 16 and "MXFP4" in gpt.how and gpt.expert_format == "mxfp4"


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
    top-k, hidden size and expert size (three hidden × intermediate projections)."""
    data = json.loads((ROOT / config).read_text())
    data = data.get("text_config", data)
    facts = next(f for f in model_families() if f.name == family)
    experts, top_k, inner = (data[k] for k in keys)
    assert (facts.layers, facts.num_experts, facts.top_k, facts.hidden) == (data["num_hidden_layers"], experts, top_k,
                                                                           data["hidden_size"])  # fmt: skip
    assert facts.expert_params == 3 * data["hidden_size"] * inner


def test_the_expert_cache_names_its_routing_and_a_recorded_trace_plugs_in(runs, model):
    """A copied run's cache replays a trace matching its family's published routing
    statistics (Mixtral has them), and says so; a trace with more reuse (a recorded or
    generated one, passed as the placement's routing) raises its hit rate and speed."""
    run = runs["moeinf_mixtral_a5000"]
    p = model.predict(run)
    assert "mixtral_8x7b" in p.routing and "LRU" in p.routing
    sticky = locality_trace("mixtral_8x7b", 512, seed=1).trace
    assert 0 <= TraceRouting(sticky, "a generated trace").hit_rate(0.25) <= 1

    class Always:  # every token routed like the last: a cache holding top-k experts always hits
        label = "every token routed like the last"

        def hit_rate(self, share):
            return 1.0 if share > 0 else 0.0

    repeated = dataclasses.replace(run, placement=dataclasses.replace(run.placement, routing=Always()))
    assert model.predict(repeated).tok_s > p.tok_s and model.predict(repeated).routing == Always.label


def test_held_out_predictions_never_see_their_own_source(runs):
    """Leave-one-source-out: a source's runs are predicted by terms fitted without any of
    them — dividing every published speed of one source by ten leaves their held-out
    predictions unchanged, while every other source's may move."""
    chosen = next(s for s in dict.fromkeys(r.source for r in runs.values())
                  if sum(1 for r in runs.values() if r.source == s and not r.why) >= 3)  # fmt: skip
    base = {o.id: o for o in leave_one_source_out(list(runs.values()))}
    scaled = [dataclasses.replace(r, tok_s=r.tok_s / 10) if r.source == chosen else r for r in runs.values()]
    moved = {o.id: o for o in leave_one_source_out(scaled)}
    for run_id, o in base.items():
        if o.source == chosen and o.predicted is not None:
            assert moved[run_id].predicted == pytest.approx(o.predicted)
            assert moved[run_id].ratio == pytest.approx(o.ratio * 10)


def test_a_regimes_factor_is_the_conformal_quantile_of_its_held_out_errors():
    """A regime's factor at the nominal 80% is exp of the ⌈(n + 1)·0.8⌉-th smallest
    |log(predicted / published)| of its n held-out runs (from two engines); a regime whose
    own errors are too few for that rank takes every regime's errors."""
    from workbench.speed.regime_model import OutOfSample

    ratios = [1.0, 1.1, 0.8, 2.0, 1.25]
    made = [OutOfSample(f"r{i}", "all_on_gpu", f"s{i}", 10.0, 10.0 * q, engine=f"e{i % 2}") for i, q in enumerate(ratios)]
    made.append(OutOfSample("x", "experts_copied", "sx", 10.0, 40.0))
    factors = regime_factors(made)
    own = sorted(np.abs(np.log(ratios)))
    assert factors["all_on_gpu"] == pytest.approx(math.exp(own[math.ceil(6 * 0.8) - 1]))  # the 5th of 5: log 2
    pooled = sorted([*own, math.log(4)])
    assert factors["experts_copied"] == pytest.approx(math.exp(pooled[math.ceil(7 * 0.8) - 1]))


def test_a_machine_of_your_own_is_predicted_from_parts(tmp_path, runs, model):
    """``predict_machine`` takes parts — named shipped parts, or your own parts file by
    path — and gives what the same setup as a published run gives, with its interval."""
    run = runs["ik1593_qwen35_5060ti_q4km_ncmoe14_ik"]
    own = model.predict_machine(gpu=run.gpu, host=run.host, model=run.model, formats=run.formats, placement=run.placement,
                                runtime=run.runtime)  # fmt: skip
    assert own.tok_s == pytest.approx(model.predict(run).tok_s) and math.isfinite(own.interval)
    assert "80% interval" in str(own) and own.evidence in str(own) and own.low < own.tok_s < own.high
    h200 = model.predict_machine(gpu="h200", host="x86_server", link="pcie_gen5", model=run.model, formats="q4_k",
                                 placement=ExpertPlacement("experts_on_host_compute"), runtime="ggml")  # fmt: skip
    assert h200.tok_s > 0 and "host=x86_server" in h200.parts
    parts = tmp_path / "parts.csv"
    parts.write_text("kind,name,field,value,source\n" + "".join(
        f"host,my_box,{f},{v},my spec sheet\n" for f, v in (("host_flops", "2e12"), ("host_memory_bandwidth", "80e9"),
                                                            ("host_op_overhead", "2e-6"), ("cores", "16"), ("sockets", "1"),
                                                            ("dram_peak_bandwidth", "100e9"))))  # fmt: skip
    mine = model.predict_machine(gpu="rtx_4090", host="my_box", parts=parts, model=run.model, formats="q4_k",
                                 placement=ExpertPlacement("partial_offload", host_layers=20), runtime="ggml")  # fmt: skip
    assert mine.tok_s > 0 and "host=my_box" in mine.parts


def test_facts_with_impossible_sizes_and_bad_runs_are_refused_by_name(table, model):
    """A run whose sizes no model has (active above total), text in a numeric cell, or a
    mapping lacking a column is refused naming the run and what is valid; a prediction is
    never negative, zero or NaN."""
    row = _row(table, "llmfit778_dscoderv2lite_2080_ncmoe16")
    with pytest.raises(AnchorError, match="active parameters .* exceed the total"):
        read_run(row | {"active_params_b": 400.0})
    with pytest.raises(AnchorError, match="decode_tok_s must be a number in"):
        read_run(row | {"decode_tok_s": "fast"})
    with pytest.raises(AnchorError, match=r"lacks \['regime'\]"):
        read_run({k: v for k, v in row.items() if k != "regime"})
    with pytest.raises(AnchorError, match="a mapping of the table's columns"):
        read_run(["id", "regime"])  # type: ignore[arg-type]
    for bits in (1e9, -4.25, math.nan, "many"):
        if isinstance(bits, float) and math.isnan(bits):  # an empty cell: the format's own bits
            assert model.predict(row | {"bits_per_weight": bits}).tok_s > 0
            continue
        with pytest.raises(AnchorError, match=r"bits_per_weight must be a number in \(0, 64\]"):
            read_run(row | {"bits_per_weight": bits})
    with pytest.raises(ValueError, match="must be a finite number"):
        ModelFacts("x", 10, math.inf, 1e9)


def test_table_rows_and_runs_read_alike(table, model):
    """A table row (a mapping) and the same run read into parts predict the same speed."""
    for row in table.to_dict("records")[:8]:
        assert model.predict(row).tok_s == model.predict(read_run(row)).tok_s


def test_profiles_cite_or_fit_every_term_and_fit_at_most_eight():
    """Every profile field has a source; the fitted terms are terms of the fitted-terms
    table, at most 8; a run of the table without a profile says why it is not modeled."""
    profiles = runtime_profiles()
    assert all(s.strip() for p in profiles for s in p.sources.values())
    terms = {t for p in profiles for t in p.fitted.values()}
    assert 1 <= len(terms) <= 8 and terms <= set(fitted_terms())
    runs = published_runs()
    assert all(r.runtime or r.why for r in runs)
    assert sum(bool(r.runtime) for r in runs) >= 0.9 * len(runs)


def test_a_run_table_of_your_own_fits_and_is_judged(tmp_path, table):
    """A copy of the table with fewer rows fits and predicts; every ratio of its in-sample
    fit is finite and positive."""
    path = tmp_path / "runs.csv"
    table.head(30).to_csv(path, index=False)
    fitted = fit_regime_model(published_runs(path), loo=False)
    for run in published_runs(path):
        p = fitted.predict(run)
        assert p.tok_s is None or (math.isfinite(p.tok_s) and p.tok_s > 0)
    assert isinstance(pd.DataFrame(), pd.DataFrame)
