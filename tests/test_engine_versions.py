"""One engine at several versions: each run is timed with the copy and launch facts of
the engine as it was when the run was measured, each fact cited, none fitted."""

import dataclasses
import math
import re

import pytest

from workbench.machine.runtime_profiles import (MAX_BASE_DEPTH, RuntimeProfileError, profile_for, runtime_profiles,
                                                runtime_profiles_path)
from workbench.speed.timer import time_decode

from published_fixtures import model, runs  # noqa: F401  (fixtures)

IMP_PROFILES = ("imp", "imp_before_1376", "imp_before_1370", "imp_before_1370_staging")


@pytest.mark.parametrize("run_id, profile", [
    ("imp1365_q3_30b_q4km_5090_lru", "imp_before_1370"),
    ("imp1365_q3_30b_q4km_5090_staging", "imp_before_1370_staging"),
    ("imp1374_q3_30b_q4km_5090_budget15", "imp_before_1376"),
    ("imp1408_q3_30b_nvfp4_5090_lru", "imp"),
    ("imp2057_q38fn_nvfp4_5090_tg512", "imp"),
])  # fmt: skip
def test_a_run_is_timed_with_the_engine_as_it_was(runs, run_id, profile):
    """Each imp run resolves to the profile of the engine version its text states."""
    assert runs[run_id].runtime == profile


def test_a_version_phrase_needs_every_part():
    """The engine's name alone is today's engine; a version phrase alone names nothing."""
    assert profile_for("imp (kekzl/imp CUDA engine), host-resident experts").name == "imp"
    assert profile_for("imp (kekzl/imp CUDA engine) at PR #1374, before PR #1376").name == "imp_before_1376"
    assert profile_for("some engine, before PR #1376") is None


def test_no_imp_term_is_fitted():
    """Every imp figure is cited from the engine's own measurements: no fit: term."""
    profiles = {p.name: p for p in runtime_profiles()}
    for name in IMP_PROFILES:
        assert not profiles[name].fitted, (name, profiles[name].fitted)


def test_the_profile_reproduces_the_step_it_was_read_from(runs, model):
    """On the configuration kekzl/imp PR #1377 profiled (Qwen3-30B-A3B Q4_K_M, every MoE
    layer host-resident, a 27.58 ms step), launches are ~24 % and kernels ~26 % of the step:
    the eager launches and kernels per layer reach the timer as the profile states them."""
    layout, machine = model.machine(runs["imp1374_q3_30b_q4km_5090_budget15"])
    today = dataclasses.replace(machine, copy_overhead=0.0)
    t = time_decode(layout, today)
    step = 7.06 / 256
    assert t.kernels == pytest.approx(1341, rel=0.01)
    assert t.issue == pytest.approx(0.24 * step, rel=0.02)
    assert t.device == pytest.approx(0.26 * step, rel=0.02)
    assert t.hidden == 0.0


def test_the_mirror_copies_cost_each_missed_cell_until_they_were_removed(runs, model):
    """Before PR #1376 every missed cell (one of an expert's 3 projections) pays two
    bookkeeping copies; the same layout on today's engine pays none, so the copy parts
    differ by exactly cells missed × that cost, and more misses cost more."""
    layout, before = model.machine(runs["imp1374_q3_30b_q4km_5090_budget5"])
    profiles = {p.name: p for p in runtime_profiles()}
    per_cell = profiles["imp_before_1376"].values["copy_overhead"]
    assert per_cell > 0 and profiles["imp"].values["copy_overhead"] == 0
    after = dataclasses.replace(before, copy_overhead=0.0)
    gap = time_decode(layout, before).copy - time_decode(layout, after).copy
    assert gap == pytest.approx(layout.expert_loads * 3 * per_cell, rel=1e-9)
    fewer, _ = model.machine(runs["imp1374_q3_30b_q4km_5090_budget50"])
    assert fewer.expert_loads < layout.expert_loads


def test_the_serial_path_launches_more_per_layer_than_the_fused_one(runs, model):
    """Before PR #1370 a host-resident layer ran the serial per-expert path: 45 more
    launches per MoE layer than the fused kernels, so the same layout takes longer."""
    layout, serial = model.machine(runs["imp1365_q3_30b_q4km_5090_lru"])
    fused = dataclasses.replace(serial, kernels_per_layer=serial.kernels_per_layer - 45)
    assert time_decode(layout, serial).kernels - time_decode(layout, fused).kernels == pytest.approx(45 * layout.layers)
    assert time_decode(layout, serial).seconds > time_decode(layout, fused).seconds


def _profiles_with(tmp_path, rows: str):
    path = tmp_path / "profiles.csv"
    path.write_text(runtime_profiles_path().read_text() + rows)
    return {p.name: p for p in runtime_profiles(path)}


def test_a_version_keeps_its_bases_fields_and_sources_and_states_what_differs(tmp_path):
    """A profile with a base takes every field it does not state, with its source, from
    the chain of bases; what it states wins."""
    shipped = {p.name: p for p in runtime_profiles()}
    chained = shipped["imp_before_1370_staging"]
    assert chained.values["kernels_per_layer"] == shipped["imp_before_1370"].values["kernels_per_layer"]
    assert chained.values["copy_overhead"] == 0 < shipped["imp_before_1370"].values["copy_overhead"]
    assert chained.sources["kernel_gap"] == shipped["imp"].sources["kernel_gap"]
    profiles = _profiles_with(tmp_path, "imp_later,names,imp later build,a test\nimp_later,base,imp,a test\n"
                                        "imp_later,kernel_gap,1e-6,a test\n")
    later, imp = profiles["imp_later"], profiles["imp"]
    assert later.values["kernel_gap"] == 1e-6 and later.sources["kernel_gap"] == "a test"
    assert all(later.values[f] == imp.values[f] or math.isnan(imp.values[f])
               for f in imp.values if f != "kernel_gap")  # fmt: skip
    assert later.launch_mode == imp.launch_mode and later.names == "imp later build"


@pytest.mark.parametrize("rows, message", [
    ("x_new,names,x new,t\nx_new,base,no_such,t\n", r"base 'no_such' is none of .*imp"),
    ("x_a,names,x a,t\nx_a,base,x_b,t\nx_b,names,x b,t\nx_b,base,x_a,t\n", r"bases form a cycle \(x_a -> x_b -> x_a\)"),
    ("x_new,base,imp,t\n", r"profile 'x_new' has a base but no names of its own"),
])  # fmt: skip
def test_a_bad_base_is_refused_by_name(tmp_path, rows, message):
    """An unknown base, a cycle of bases or a derived profile that would share its base's
    names is refused, naming the profile."""
    with pytest.raises(RuntimeProfileError, match=message):
        _profiles_with(tmp_path, rows)


def _chain(depth: int, prefix: str = "v") -> str:
    """Profiles v1 … v<depth>, each the next version of the one before, v1 of ``imp``."""
    rows = []
    for i in range(1, depth + 1):
        rows.append(f"{prefix}{i},names,{prefix} build {i},t\n{prefix}{i},base,{'imp' if i == 1 else f'{prefix}{i - 1}'},t\n")
    return "".join(rows)


def test_a_chain_of_bases_resolves_up_to_its_stated_depth(tmp_path):
    """A chain as deep as the limit resolves, each version keeping the fields of the first
    base; one level deeper, or thousands deep, is refused naming the depth and the limit
    (``benchmarks/profile_chains.py`` times chains of growing depth)."""
    depth = MAX_BASE_DEPTH  # v<depth> follows that many bases down to imp
    profiles = _profiles_with(tmp_path, _chain(depth))
    assert profiles[f"v{depth}"].values["kernels_per_layer"] == profiles["imp"].values["kernels_per_layer"]
    with pytest.raises(RuntimeProfileError, match=rf"chain of bases is {MAX_BASE_DEPTH + 1} deep; at most {MAX_BASE_DEPTH}"):
        _profiles_with(tmp_path, _chain(depth + 1, "w"))
    with pytest.raises(RuntimeProfileError, match=rf"is {MAX_BASE_DEPTH + 1} deep; at most {MAX_BASE_DEPTH}"):
        _profiles_with(tmp_path, _chain(3000, "c"))


@pytest.mark.parametrize("rows, phrase", [
    ("imp_next,names,imp later build|IMP (kekzl/imp,t\nimp_next,base,imp,t\n", "imp (kekzl/imp"),  # its base's
    ("x_one,names,Some Engine,t\nx_one,base,imp,t\nx_two,names,some   engine,t\nx_two,base,imp,t\n", "some engine"),
    ("x_one,names,eng+v2,t\nx_one,base,imp,t\nx_two,names,V2 + ENG,t\nx_two,base,imp,t\n", "eng+v2"),
])  # fmt: skip
def test_a_phrase_that_names_two_profiles_is_refused_when_the_table_loads(tmp_path, rows, phrase):
    """Two profiles sharing a name phrase — spelled with other case, spacing or part order
    — would be picked by row order, or one never: the table is refused naming the phrase
    and both profiles."""
    with pytest.raises(RuntimeProfileError, match=rf"name phrase '{re.escape(phrase)}' names profiles"):
        _profiles_with(tmp_path, rows)
