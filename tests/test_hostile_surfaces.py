"""Hostile inputs of the published-run surfaces: users' parts files, impossible machines and
models, the published-runs table from any origin, fits on too little.

Properties (one test per class, several cases each):
- A user's parts file is honoured where it is passed (a run read with it is laid out and
  timed on it, its parts shadowing shipped ones of the same name), and a figure in it no
  hardware has is refused naming the file, the field and the valid range.
- An odd parts file (a folder, a pipe, a symlink loop, bytes that are not UTF-8, a
  formula) is a ``WorkbenchError`` naming the file, never a raw exception.
- A machine or model that cannot exist is refused naming the figure and its limit; a
  numpy count is a count.
- A reserved source is refused however its URL is spelled, and those spellings are one
  source when runs are held out.
- Rows from any origin — a file, a DataFrame, a sequence of runs, one mapping — pass one
  validation path: impossible speeds, ids that are missing, not text or repeated, and a
  true/false speed are refused; a row of your own reusing a shipped id is not the shipped run.
- A fit on too few runs is refused; an interval is not built from too few held-out runs.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.app.anchors import modeled_vs_published
from workbench.errors import WorkbenchError
from workbench.machine.cost_model import CostModel
from workbench.machine.op_cost import CostModelError
from workbench.machine.parts import parts_path
from workbench.speed.layout import DecodeLayout, ExpertPlacement, LayoutError, ModelFacts
from workbench.speed.published_runs import (AnchorError, checked_published_table, published_decode_runs,
                                            read_run, reserved_source, source_key)
from workbench.speed.evidence import regime_factors
from workbench.speed.regime_model import OutOfSample, fit_regime_model, leave_one_source_out, predict_decode, regime_model


def _row(run_id: str) -> dict:
    table = published_decode_runs()
    return table[table["id"] == run_id].iloc[0].to_dict()


def _first_modeled_row(regime: str) -> dict:
    model = regime_model()
    for row in published_decode_runs().to_dict("records"):
        if row["regime"] == regime and model.predict(row).tok_s is not None:
            return row
    raise AssertionError(f"no modeled {regime} run")


def _parts_file(path: Path, rows: str) -> Path:
    path.write_text("kind,name,field,value,source\n" + rows)
    return path


def _gpu_rows(name: str, scale: float = 1.0, names: str = "") -> str:
    """A GPU part with the shipped H200's figures, its bandwidth scaled by ``scale``."""
    shipped = pd.read_csv(parts_path(), dtype=str, keep_default_na=False)
    h200 = shipped[(shipped["kind"] == "gpu") & (shipped["name"] == "h200") & (shipped["field"] != "names")]
    out = []
    for r in h200.itertuples(index=False):
        value = float(r.value) * scale if r.field == "device_memory_bandwidth" else r.value
        out.append(f"gpu,{name},{r.field},{value},a test\n")
    if names:
        out.append(f"gpu,{name},names,{names},a test\n")
    return "".join(out)


def test_a_users_parts_file_is_honoured_by_a_run_read_with_it(tmp_path):
    """A GPU of your own, named in a run's text, is found and timed; a part of your own
    that shadows a shipped name replaces it (a fifth of the bandwidth: a slower
    prediction), never the other way round."""
    row = _first_modeled_row("all_on_gpu")
    model = regime_model()
    shipped = model.predict(read_run(row))
    own_gpu = _parts_file(tmp_path / "own.csv", _gpu_rows("my_gpu", names="Zeta GPU 9000"))
    mine = dict(row, gpu="Zeta GPU 9000")
    assert model.predict(read_run(mine)).tok_s is None  # the shipped table has no such GPU
    found = model.predict(read_run(mine, parts=own_gpu))
    assert found.tok_s is not None and "my_gpu" in found.parts
    run = read_run(row)
    slower = _parts_file(tmp_path / "slower.csv", _gpu_rows(run.gpu or "", scale=0.2, names=str(row["gpu"])))
    shadowed = model.predict(read_run(row, parts=slower))
    assert shadowed.tok_s is not None and shipped.tok_s is not None and shadowed.tok_s < shipped.tok_s


@pytest.mark.parametrize("rows, field", [
    ("gpu,fast,device_flops_bf16,1e30,t\n", "device_flops_bf16"),
    ("runtime,many,kernels_per_layer,1e12,t\n", "kernels_per_layer"),
    ("host,wide,host_memory_bandwidth,5e15,t\n", "host_memory_bandwidth"),
    ("link,slow,h2d_latency,3600,t\n", "h2d_latency"),
    ("gpu,huge,memory_bytes,1e18,t\n", "memory_bytes"),
    ("gpu,tiny,device_memory_bandwidth,1e-3,t\n", "device_memory_bandwidth"),
])  # fmt: skip
def test_a_figure_no_hardware_has_is_refused_from_a_parts_file(tmp_path, rows, field):
    """Rates, sizes, overheads and counts beyond any machine are refused when the file is
    read, naming the file, the field and the valid range, whatever part they belong to."""
    path = _parts_file(tmp_path / "parts.csv", rows)
    with pytest.raises(CostModelError, match=rf"parts\.csv: .*{field} .* is outside what hardware can do: valid \["):
        CostModel.compose(gpu="h200", runtime="compiled", parts=path)


def _odd(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.csv"
    if kind == "folder":
        path.mkdir()
    elif kind == "pipe":
        os.mkfifo(path)
    elif kind == "symlink loop":
        path.symlink_to(path)
    elif kind == "latin-1":
        path.write_bytes("kind,name,field,value,source\ngpu,caf\xe9,memory_bytes,1e9,t\n".encode("latin-1"))
    elif kind == "formula":
        _parts_file(path, "gpu,h200,device_memory_bandwidth,=4.8e12*2,t\n")
    elif kind == "empty":
        path.write_bytes(b"")
    return path


@pytest.mark.parametrize("kind", ["folder", "pipe", "symlink loop", "latin-1", "formula", "empty"])
def test_an_odd_parts_file_is_refused_naming_it(tmp_path, kind):
    """Wherever a parts file is passed — a machine, a layout, a run — an odd one is a
    workbench error naming the file, never a raw exception from inside, and never a hang."""
    path = _odd(tmp_path, kind)
    facts = ModelFacts("m", 24, 30e9, 3e9, 64, 4, 4e6, 0, 2048)
    calls = [
        lambda: CostModel.compose(gpu="h200", runtime="compiled", parts=path),
        lambda: DecodeLayout.for_machine(gpu="h200", model=facts, formats="bf16",
                                         placement=ExpertPlacement("all_on_gpu"), parts=path),
        lambda: read_run(_first_modeled_row("all_on_gpu"), parts=path),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(WorkbenchError, match=path.name):
            call()


# 41 GB of routed experts at 4.5 bits: more than a 24 GB GPU holds
FACTS = ModelFacts("moe", np.int64(48), 100e9, 6e9, np.int64(128), 8, 1.2e7, 0, 2048)


@pytest.mark.parametrize("placement, model, message", [
    (ExpertPlacement("experts_copied", resident_expert_bytes=1e15), FACTS, "exceed the model's .* bytes of routed experts"),
    (ExpertPlacement("experts_copied", resident_expert_bytes=3e10), FACTS, "exceed the GPU's .* bytes of memory"),
    (ExpertPlacement("experts_copied"), ModelFacts("dense", 32, 8e9, 8e9), "has no routed experts to copy in"),
    (ExpertPlacement("experts_on_host_compute", gpu_experts=100_000), FACTS, "gpu_experts 100000 exceeds the model's 128"),
    (ExpertPlacement("experts_on_host_compute"), ModelFacts("dense", 32, 8e9, 8e9), "no routed experts for the host"),
])  # fmt: skip
def test_a_machine_or_model_that_cannot_exist_is_refused(placement, model, message):
    """A cache larger than the experts or than the GPU, experts a dense model does not
    have, more experts kept than a layer has: refused naming the figure and its limit."""
    with pytest.raises(LayoutError, match=message):
        DecodeLayout.for_machine(gpu="rtx_4090", host="x86_server", model=model, formats="q4_k_m", placement=placement)


def test_numpy_counts_are_counts_and_truth_values_are_not():
    """A numpy integer or float is a number wherever a plain one is; True is not a count."""
    plain = ModelFacts("moe", 48, 100e9, 6e9, 128, 8, 1.2e7, 0, 2048)
    assert FACTS == plain
    layout = DecodeLayout.for_machine(gpu="rtx_4090", model=FACTS, formats="q4_k_m",
                                      placement=ExpertPlacement("experts_copied", resident_expert_bytes=np.float64(5e9)))
    assert 0 < layout.cache_share < 1
    with pytest.raises(LayoutError, match="layers must be a finite number, got True"):
        ModelFacts("moe", True, 30e9, 3e9)


def test_a_run_that_keeps_more_experts_than_a_layer_has_is_not_modeled():
    """A run stating more GPU experts per layer than its model has is not clamped to the
    model's count and timed: it is not modeled, and says why."""
    row = _first_modeled_row("experts_on_host_compute")
    for detail in ("--kt-num-gpu-experts 100000", "100000 GPU experts", "experts on the CPU, 999999 GPU experts"):
        run = read_run(dict(row, offload_detail=detail))
        assert run.placement is None and "experts per layer kept on the GPU, of the" in run.why, detail
        assert regime_model().predict(run).tok_s is None
    kept = read_run(dict(row, offload_detail="--kt-num-gpu-experts 2"))
    assert kept.placement is not None and kept.placement.gpu_experts == 2


@pytest.mark.parametrize("spelling", [
    "https://github.com//efeslab/fiddler", "https://github.com:443/efeslab/fiddler", "https://GitHub.com/EfesLab/Fiddler",
    "https://github.com/efes%6Cab/fiddler", "https://www.github.com/efeslab/fiddler/", "https://arxiv.org/abs/2312.17238v2",
    "https://github.com/AlexsJones/llmfit/pull/755?x=1#top",
])  # fmt: skip
def test_a_reserved_source_is_refused_however_it_is_spelled(spelling):
    """The reserved-source refusal holds for every spelling of its URL, in a table and in
    one row read on its own."""
    assert reserved_source(spelling)
    table = published_decode_runs().head(3).copy()
    table.loc[table.index[0], "source_url"] = spelling
    with pytest.raises(AnchorError, match="reserved for validation"):
        checked_published_table(table)
    with pytest.raises(AnchorError, match="reserved for validation"):
        read_run(dict(table.iloc[0].to_dict()))


def test_one_source_spelled_several_ways_is_held_out_together():
    """Leave-one-source-out holds out every spelling of one source together: no run of a
    source is predicted by terms fitted on another spelling of the same source."""
    assert len({source_key(u) for u in ("https://github.com/a/b/issues/1", "https://github.com//a/b/issues/1/",
                                       "https://github.com:443/a/b/issues/1", "https://github.com/%61/b/issues/1")}) == 1
    table = published_decode_runs()
    counts = table["source_url"].map(source_key).value_counts()
    source = counts.index[counts >= 2][0]  # a source with several runs
    rows = table[table["source_url"].map(source_key) == source].index
    respelled = table.copy()
    respelled.loc[rows[0], "source_url"] = respelled.loc[rows[0], "source_url"].replace("https://", "https://WWW.", 1)
    out = {o.id: o for o in leave_one_source_out(respelled)}
    base = {o.id: o for o in leave_one_source_out(table)}
    assert out[respelled.loc[rows[0], "id"]].predicted == base[table.loc[rows[0], "id"]].predicted


@pytest.mark.parametrize("column, value, message", [
    ("decode_tok_s", "1e308", "decode_tok_s in"), ("decode_tok_s", "5e-324", "decode_tok_s in"),
    ("decode_tok_s", True, "true/false value"), ("id", None, "empty or duplicated"), ("id", "", "empty or duplicated"),
])  # fmt: skip
def test_rows_from_any_origin_pass_one_validation_path(column, value, message):
    """A table built in memory is checked as the file is: speeds no machine reaches, a
    missing id and a true/false cell are refused by the fit, the hold-out and the
    comparison table alike."""
    table = published_decode_runs().head(6).copy()
    table[column] = table[column].astype(object)
    table.loc[table.index[1], column] = value
    for call in (fit_regime_model, leave_one_source_out, modeled_vs_published):
        with pytest.raises(AnchorError, match=message):
            call(table)


@pytest.mark.parametrize("tok_s", [True, 1e308, 5e-324, float("inf"), "fast"])
def test_one_row_read_on_its_own_is_checked_as_a_table_row(tok_s):
    """``read_run`` refuses what the table refuses: no speed outside what a machine can
    reach, no true/false speed, no id that is not text."""
    row = _first_modeled_row("all_on_gpu")
    with pytest.raises(AnchorError, match="decode_tok_s must be a number in"):
        read_run(dict(row, decode_tok_s=tok_s))
    with pytest.raises(AnchorError, match="id is non-empty text"):
        read_run(dict(row, id=None))


def test_duplicate_ids_are_refused_and_a_reused_shipped_id_is_not_the_shipped_run():
    """Repeated ids would count one figure several times (and widen an interval): refused
    from a table and from a sequence of runs. A row of your own that reuses a shipped id
    gets no held-out figures of the shipped run."""
    table = published_decode_runs().head(6).copy()
    table.loc[table.index[2], "id"] = table.loc[table.index[1], "id"]
    with pytest.raises(AnchorError, match="empty or duplicated"):
        fit_regime_model(table)
    runs = [read_run(r) for r in published_decode_runs().head(4).to_dict("records")]
    with pytest.raises(AnchorError, match="given more than once"):
        leave_one_source_out([runs[0], runs[1], runs[0]])
    row = _first_modeled_row("all_on_gpu")
    mine = pd.DataFrame([dict(row, decode_tok_s=float(row["decode_tok_s"]) * 3,
                              source_url="https://example.org/my-own-measurement")])
    found = modeled_vs_published(mine)
    assert math.isnan(found.loc[0, "held-out tok/s"]) and found.loc[0, "source"] == ""


def test_a_fit_on_too_few_runs_is_refused_and_no_interval_is_built_from_too_few():
    """Fewer than three runs the model can express give no fit (every term would keep its
    prior); a regime's interval needs enough held-out errors to bound its level (four at
    80%), and a prediction without one says so."""
    table = published_decode_runs()
    for n in (0, 1, 2):
        with pytest.raises(AnchorError, match="a fit needs at least 3 runs"):
            fit_regime_model(table.head(0) if n == 0 else table[table["id"].isin(
                [r["id"] for r in table.to_dict("records") if regime_model().predict(r).tok_s is not None][:n])])
    few = [OutOfSample(f"r{i}", "all_on_gpu", f"s{i}", 10.0, 12.0) for i in range(3)]
    assert regime_factors(few) == {}
    enough = [OutOfSample(f"r{i}", "all_on_gpu", f"s{i}", 10.0, 10.0 + i) for i in range(4)]
    assert regime_factors(enough)["all_on_gpu"] > 1
    prediction = predict_decode(_first_modeled_row("all_on_gpu"), regime_model().fits)
    assert "no interval" in str(prediction)


def test_a_fitted_term_outside_its_range_is_refused():
    """A kernel time of 0 (or a share above 1) is no machine: a term given outside its
    fitted range is refused naming it and the range, never timed into hundreds of tok/s."""
    fits = dict(regime_model().fits)
    row = _first_modeled_row("all_on_gpu")
    for term, value in (("kernel_time", 0.0), ("kernel_time", 1.0), ("ggml_host_bandwidth_fraction", 2.0)):
        if term not in fits:
            continue
        with pytest.raises(WorkbenchError, match=rf"fitted term '{term}' = .* is not a number in \["):
            predict_decode(row, {**fits, term: value})
    assert predict_decode(row, {**fits, "kernel_time": np.float64(fits["kernel_time"])}).tok_s is not None


@pytest.mark.parametrize("regime", ["all_on_gpu", "experts_on_host_compute", "experts_copied"])
def test_a_speed_beyond_the_machine_is_neither_modeled_nor_fitted(regime):
    """A published speed more than twice the machine's ceiling (every active byte read once,
    its memories at their peaks side by side) is no batch-1 decode: not modeled, saying
    why, and left out of a fit; a speed below it is modeled as before."""
    model = regime_model()
    row = _first_modeled_row(regime)
    layout, machine = model.machine(row)
    bandwidth = machine.device_memory_bandwidth + (machine.host_memory_bandwidth if layout.host_bytes > 0 else 0.0)
    ceiling = bandwidth / (layout.device_bytes + layout.host_bytes)
    too_fast = model.predict(dict(row, decode_tok_s=str(3 * ceiling)))
    assert too_fast.tok_s is None and "the machine's ceiling" in too_fast.why
    assert model.predict(dict(row, decode_tok_s=str(1.5 * ceiling))).tok_s is not None
    runs = [read_run(r) for r in published_decode_runs().to_dict("records")]
    fast = [dataclasses.replace(r, tok_s=3 * ceiling) if r.id == row["id"] else r for r in runs]
    without = fit_regime_model([r for r in runs if r.id != row["id"]], loo=False).fits
    assert fit_regime_model(fast, loo=False).fits == pytest.approx(without)
