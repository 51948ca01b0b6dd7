"""Intervals earned by evidence, and the leave-one-runtime-out hold-out they are read from."""

import dataclasses
import math

import pytest

from workbench.speed.evidence import (INTERVAL_LEVEL, MIN_OWN_SOURCES, conformal_factor, earned_coverage, earned_interval,
                                      nested_coverage, regime_factors)
from workbench.speed.regime_model import OutOfSample, fit_regime_model, leave_one_runtime_out, regime_model
from workbench.speed.published_runs import AnchorError, published_runs
from workbench.machine.runtime_profiles import RuntimeProfileError, runtime_profiles


def _o(run_id, source, ratio, runtime="a", engine="", regime="all_on_gpu"):
    return OutOfSample(run_id, regime, source, 10.0, None if ratio is None else 10.0 * ratio, runtime=runtime,
                       engine=engine or runtime)  # fmt: skip


def test_the_conformal_factor_takes_the_rank_the_level_needs_and_none_from_too_few():
    """The factor is exp of the ⌈(n + 1)·level⌉-th smallest error; when that rank is beyond
    the errors there is no factor (NaN), never the largest error passed off as the level."""
    errors = [math.log(r) for r in (1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9)]
    assert conformal_factor(errors, 0.8) == pytest.approx(1.8)  # ceil(10 · 0.8) = 8th
    assert conformal_factor(errors, 0.5) == pytest.approx(1.5)  # ceil(10 · 0.5) = 5th
    assert math.isnan(conformal_factor(errors[:3], 0.8))  # ceil(4 · 0.8) = 4 > 3
    with pytest.raises(AnchorError, match="level"):
        conformal_factor(errors, 1.0)


def test_a_runtime_with_enough_sources_earns_its_own_interval():
    """A profile with at least three independent modeled sources takes its own
    leave-one-source-out errors and says on how many sources; the regime's wider
    leave-one-runtime-out errors do not enter it."""
    loso = [_o(f"r{i}", f"owner/repo#{i % 3}", 1 + 0.05 * i) for i in range(6)]
    loro = [_o(f"x{i}", "s", 3.0, runtime="b") for i in range(6)]
    interval = earned_interval("a", "all_on_gpu", loso, loro)
    assert interval.own and interval.evidence == f"validated on {MIN_OWN_SOURCES} sources"
    assert interval.factor == pytest.approx(1.25)  # ceil(7 · 0.8) = 6th of 1.00..1.25
    spelled = loso[:3] + [_o(o.id, o.source.replace("owner/repo", "Owner/Repo"), o.ratio) for o in loso[3:]]
    assert earned_interval("a", "all_on_gpu", spelled, loro).sources == 3  # one source, case aside


def test_a_runtime_without_enough_sources_takes_widened_runtime_held_out_errors():
    """A profile with fewer sources takes its regime's leave-one-runtime-out factor raised
    to 1 + 1/k (k engines behind those errors), labelled ``unvalidated runtime`` when none
    of its runs is modeled and ``validated on N source(s)`` otherwise; its own few errors,
    however small, do not narrow it."""
    loro = [_o(f"x{i}", f"s{i}", 1.5 if i % 2 else 1 / 1.5, runtime=f"e{i % 2}") for i in range(8)]
    unseen = earned_interval("new", "all_on_gpu", [], loro)
    assert unseen.evidence == "unvalidated runtime" and not unseen.own
    assert unseen.factor == pytest.approx(1.5 ** 1.5)  # two engines: 1 + 1/2
    few = earned_interval("a", "all_on_gpu", [_o("r", "s1", 1.0), _o("q", "s2", 1.01)], loro)
    assert few.evidence == "validated on 2 sources" and few.factor == pytest.approx(unseen.factor)
    one_engine = [o for o in loro if o.engine == "e0"]
    assert earned_interval("new", "all_on_gpu", [], one_engine).factor == pytest.approx(1.5 ** 2)


def test_nested_coverage_never_judges_a_group_by_its_own_errors():
    """A held-out group's run is judged against the interval the other groups' errors give:
    an engine whose error is large is not covered, though an interval built with it would be."""
    made = [_o(f"r{i}", f"s{i}", q, runtime=f"e{i}") for i, q in enumerate([1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 3.0])]
    covered = nested_coverage(made, lambda o: o.engine)
    assert covered["r6"] is False and all(covered[f"r{i}"] for i in range(6))


def test_one_engines_errors_do_not_stand_for_a_regime():
    """A regime whose held-out errors come from a single engine takes every regime's errors
    (one engine's scatter says nothing of another's); from two engines on, its own. So an
    engine held out of a two-engine regime is judged by the pooled errors, not by the one
    engine left beside it, and a prediction for a new engine there is widened by the
    engines of the pooled errors."""
    tight = [_o(f"t{i}", f"s{i}", 1.05, runtime="solo", regime="partial_offload") for i in range(9)]
    wide = [_o(f"w{i}", f"u{i}", 1.6 if i % 2 else 1 / 1.6, runtime=f"e{i % 2}") for i in range(9)]
    assert regime_factors(tight + wide)["partial_offload"] == pytest.approx(1.6)  # 16th of 18 pooled errors
    duo = [_o(f"v{i}", f"x{i}", 1.1, runtime="duo", regime="partial_offload") for i in range(9)]
    assert regime_factors(tight + duo + wide)["partial_offload"] == pytest.approx(1.1)  # two engines: its own
    unseen = earned_interval("new", "partial_offload", [], tight + wide)
    assert unseen.factor == pytest.approx(1.6 ** (1 + 1 / 3)) and "every regime's" in unseen.basis
    covered = nested_coverage(tight + duo + wide, lambda o: o.engine)
    assert covered["v0"] and covered["t0"]  # solo's errors alone (×/÷ 1.05) would not cover duo's 1.1


def test_earned_coverage_judges_each_run_as_the_evidence_rule_would_predict_it():
    """A run of a profile that keeps three sources without its own is judged by its
    leave-one-source-out prediction against its profile's other sources; a run of a
    profile that does not is judged by its leave-one-runtime-out prediction."""
    loso = [_o(f"r{i}", f"s{i}", 1.0 + 0.01 * i) for i in range(5)] + [_o("lone", "t", 1.0, runtime="b")]
    loro = [_o(f"r{i}", f"s{i}", 1.1) for i in range(5)] + [_o("lone", "t", 5.0, runtime="b")]
    judged = earned_coverage(loso, loro)
    assert [judged[f"r{i}"] for i in range(5)] == [(True, "validated on 4 sources")] * 4 + [(False, "validated on 4 sources")]
    # r4's ratio 1.04 lies beyond the largest of the others' (1.03): nested, its own error never widens its interval
    # its LORO ratio 5 against the other engine's errors widened (1.1 ** 2): its LOSO ratio of 1 is not what it is judged by
    assert judged["lone"] == (False, "unvalidated runtime")


def test_every_profile_names_its_engine_and_a_version_keeps_its_bases():
    """Each shipped profile names the engine it is a version, build or mode of; imp's earlier
    versions are imp; ExecuTorch's two launch modes are one engine; a bad engine is refused."""
    engines = {p.name: p.engine_name for p in runtime_profiles()}
    assert engines["imp_before_1370_staging"] == engines["imp"] == "imp"
    assert engines["executorch_eager"] == engines["executorch_graph"]
    assert engines["ggml_hip"] == engines["ggml"] != engines["ktransformers"]


def test_a_profile_with_a_bad_engine_is_refused(tmp_path):
    """An engine is a plain name: a path-like one is refused naming the row."""
    from workbench.machine.runtime_profiles import runtime_profiles_path

    text = runtime_profiles_path().read_text()
    bad = tmp_path / "runtime_profiles.csv"
    bad.write_text(text.replace("vllm,engine,vllm,", "vllm,engine,../vllm,", 1))
    with pytest.raises(RuntimeProfileError, match="engine is a plain name"):
        runtime_profiles(bad)


@pytest.mark.slow
def test_leave_one_runtime_out_fits_without_any_run_of_the_engine():
    """An engine's held-out predictions are what a model fitted on every run of the other
    engines predicts (all its profiles held out together: ggml's HIP and eager builds
    with it), and they do not move when its own published speeds are divided by ten."""
    runs = published_runs()
    profiles = runtime_profiles()
    engine = {p.name: p.engine_name for p in profiles}
    held = {o.id: o for o in leave_one_runtime_out(runs, profiles)}
    others = fit_regime_model([r for r in runs if engine.get(r.runtime) != "ggml"], profiles, loo=False)
    ggml = [r for r in runs if engine.get(r.runtime) == "ggml" and held[r.id].predicted is not None]
    assert {r.runtime for r in ggml} >= {"ggml", "ggml_hip", "ggml_eager"}
    for run in ggml:
        assert held[run.id].predicted == pytest.approx(others.predict(run).tok_s, rel=1e-6)
    scaled = [dataclasses.replace(r, tok_s=r.tok_s / 10) if engine.get(r.runtime) == "ggml" else r for r in runs]
    moved = {o.id: o for o in leave_one_runtime_out(scaled, profiles)}
    assert all(moved[r.id].predicted == pytest.approx(held[r.id].predicted) for r in ggml)


def test_a_backend_of_one_engine_earns_its_own_interval():
    """A llama.cpp Vulkan run is timed with ggml's physics (no Vulkan-specific term is cited)
    but its interval is earned on Vulkan runs: too few of them for an interval of its own,
    it takes the widened engine-held-out one, not the CUDA runs' narrower own interval."""
    model = regime_model()
    vulkan = [r for r in published_runs() if r.runtime == "ggml_vulkan"]
    assert vulkan and all("vulkan" in r.id for r in vulkan)
    run = vulkan[0]
    assert model.predict(run).tok_s == pytest.approx(model.predict(dataclasses.replace(run, runtime="ggml")).tok_s)
    own, cuda = model.interval("ggml_vulkan", run.regime), model.interval("ggml", run.regime)
    assert own is not None and cuda is not None
    assert cuda.own and not own.own and own.sources < MIN_OWN_SOURCES <= cuda.sources and own.factor > cuda.factor


def test_a_prediction_says_its_interval_and_the_evidence_behind_it():
    """The shipped model's predictions carry the interval their runtime earned: a runtime
    with no published run modeled (the workbench's own) is an unvalidated runtime, with
    a wider interval than a runtime validated on many sources in the same regime."""
    model = regime_model()
    ours = model.interval("workbench_graph", "all_on_gpu")
    ggml = model.interval("ggml", "all_on_gpu")
    assert ours is not None and ggml is not None
    assert ours.evidence == "unvalidated runtime" and ggml.evidence.startswith("validated on")
    assert ours.factor > 1 and ours.level == INTERVAL_LEVEL
    run = next(r for r in published_runs() if r.runtime == "ggml" and model.predict(r).tok_s is not None)
    p = model.predict(run)
    assert p.low < p.tok_s < p.high and p.evidence in str(p) and "80% interval" in str(p)
