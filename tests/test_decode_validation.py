"""How the decode model is judged: held-out tables, nested interval coverage, same-machine
ordering, and the simple peer on the same rows."""

import math

import pytest

from workbench.speed.regime_model import OutOfSample, regime_model
from workbench.speed.validation import coverage, llmfit_tok_s, ordering, peer_table, regime_table
from workbench.speed.published_runs import published_runs


def _o(run_id, source, published, predicted, regime="all_on_gpu", **kw):
    return OutOfSample(run_id, regime, source, published, predicted, **kw)


def test_the_regime_table_summarises_held_out_ratios():
    """Per regime: runs, sources, modeled runs and sources, the median, range and share
    within 0.5-2 of predicted / published over the modeled ones, and an "all" row."""
    made = [_o("a", "s1", 10, 10), _o("b", "s2", 10, 25), _o("c", "s3", 10, 8), _o("d", "s3", 10, None)]
    table = regime_table(made).set_index("regime")
    row = table.loc["all_on_gpu"]
    assert (row["runs"], row["sources"], row["modeled"], row["sources modeled"]) == (4, 3, 3, 3)
    assert row["median ratio"] == pytest.approx(1.0) and row["max ratio"] == pytest.approx(2.5)
    assert row["within 0.5-2"] == pytest.approx(2 / 3)
    assert table.loc["all", "runs"] == 4 and math.isnan(table.loc["experts_copied", "median ratio"])


def test_coverage_is_judged_by_intervals_built_without_the_source():
    """A held-out run is judged against the interval the *other* sources' errors give: a
    source whose own error is large is not covered even though it would widen an interval
    built with it."""
    made = [_o(f"r{i}", f"s{i}", 10, 10 * q) for i, q in enumerate([1.0, 1.1, 0.9, 1.05, 0.95, 3.0])]
    covered = coverage(made)
    assert covered["r5"] is False and all(covered[f"r{i}"] for i in range(5))


def test_ordering_compares_pairs_on_one_machine_that_differ_in_placement_or_runtime():
    """Pairs share GPU, host and family and differ in placement or runtime; a pair whose
    published speeds are within 2% is no evidence either way; ``ordered`` is whether the
    predictions agree on which is faster."""
    same = dict(gpu="rtx_4090", host="epyc_9355", family="m")
    made = [_o("fast", "s", 20, 18, runtime="a", placement="x", **same), _o("slow", "s", 10, 12, runtime="b", placement="x", **same),
            _o("tie", "s", 20.1, 5, runtime="c", placement="x", **same),
            _o("elsewhere", "s", 1, 50, runtime="d", placement="x", gpu="h200", host="epyc_9355", family="m")]  # fmt: skip
    pairs = ordering(made)
    assert set(zip(pairs["faster (published)"], pairs["slower (published)"])) == {("fast", "slow"), ("tie", "slow")}
    assert pairs.set_index("faster (published)").loc["fast", "ordered"]
    assert not pairs.set_index("faster (published)").loc["tie", "ordered"]


def test_the_peer_is_llmfits_formula():
    """llmfit: all on the GPU, GPU bandwidth over active bytes × 0.55 × its MoE overhead;
    experts in host memory, 0.8 / (A / DDR + A / (0.55 × GPU)); no copy mode."""
    runs = {r.id: r for r in published_runs()}
    gpt = runs["lcpp16834_gptoss20b_4090"]
    m = gpt.model
    active = m.expert_active * gpt.formats.experts / 8 + m.other_active * gpt.formats.other / 8
    assert llmfit_tok_s(gpt) == pytest.approx(1008e9 / active * 0.55 * 0.80)  # 32 experts
    host = runs["llmfit778_dscoderv2lite_2080_ncmoe16"]
    from workbench.machine.parts import part_figures

    m = host.model
    active = m.expert_active * host.formats.experts / 8 + m.other_active * host.formats.other / 8
    ddr = part_figures("host", host.host)["host_memory_bandwidth"]
    assert llmfit_tok_s(host) == pytest.approx(0.8 / (active / ddr + active / (448e9 * 0.55)))
    assert llmfit_tok_s(runs["moeinf_mixtral_a5000"]) is None


@pytest.mark.slow
def test_the_shipped_model_meets_its_targets_held_out():
    """On the shipped table, held out by source: the median within 0.8-1.25 in every regime
    with at least 4 modeled sources, at least 80% of rows within 0.5-2, nested intervals
    covering at least 80% with every regime's factor at most 2, at least 90% of
    same-machine pairs ordered, and closer to the published speeds than llmfit's formula
    on the rows both model."""
    model = regime_model()
    table = regime_table(model.out_of_sample).set_index("regime")
    judged = table[(table.index != "all") & (table["sources modeled"] >= 4)]
    assert judged["median ratio"].between(0.8, 1.25).all(), table
    assert table.loc["all", "within 0.5-2"] >= 0.8 and table.loc["all", "covered"] >= 0.8
    assert all(factor <= 2.0 for factor in model.intervals.values()), model.intervals
    assert ordering(model.out_of_sample)["ordered"].mean() >= 0.9
    peer = peer_table(model.out_of_sample, published_runs()).set_index("regime")
    assert peer.loc["all", "workbench median |log|"] < peer.loc["all", "llmfit median |log|"]
