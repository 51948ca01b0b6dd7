"""Passes over a device graph: requirements are checked before, invariants after."""

import dataclasses

import pytest

import workbench as wb
from conftest import moe_tiny
from workbench.moe.strategies import expert_cache
from workbench.passes import PROPAGATED, SCHEDULED, FunctionPass, PassError, run_passes, schedule_pass
from workbench.moe.strategies import expert_streaming


def _dg():
    _, _, _, program = moe_tiny()
    return wb.propagate(wb.place(program, lambda n: "cuda:0"), True, True, stream_constants=["layers.*.mlp.experts.*"])


def test_a_pass_whose_requirement_no_earlier_pass_ensures_is_refused_before_it_runs():
    """A pass requiring SCHEDULED before any schedule pass is a PassError naming it and
    the missing fact; after a schedule pass the same pass runs."""
    ran = []
    needs = FunctionPass("needs_order", lambda dg: ran.append(dg) or dg, requires=frozenset({PROPAGATED, SCHEDULED}))
    dg = _dg()
    with pytest.raises(PassError, match="pass 'needs_order' requires scheduled"):
        run_passes(dg, [needs], check=False)
    assert ran == []
    run_passes(dg, [schedule_pass("overlap"), needs], check=False)
    assert len(ran) == 1


def test_a_rewrite_invalidates_the_schedule():
    """A rewrite pass (by default) invalidates SCHEDULED: a pass that needs the order
    after it is refused."""
    needs = FunctionPass("needs_order", lambda dg: dg, requires=frozenset({SCHEDULED}))
    rewrite = FunctionPass("rewrite", lambda dg: dg)
    with pytest.raises(PassError, match="requires scheduled"):
        run_passes(_dg(), [schedule_pass("overlap"), rewrite, needs], check=False)


def test_checks_after_each_pass_catch_a_pass_that_breaks_the_graph(monkeypatch):
    """With checks on (argument or the debug flag), a pass that leaves a copy's record
    contradicting its node is a PassError naming the pass; with checks off it goes
    through."""
    def breaks(dg):
        first = dataclasses.replace(dg.copies[0], nbytes=dg.copies[0].nbytes + 1)
        return dataclasses.replace(dg, copies=(first, *dg.copies[1:]))

    bad = FunctionPass("breaks", breaks)
    dg = _dg()
    with pytest.raises(PassError, match=r"after pass 'breaks': device_graph.copies\[0\].nbytes"):
        run_passes(dg, [bad], check=True)
    monkeypatch.setenv("WORKBENCH_CHECK_PASSES", "1")
    with pytest.raises(PassError, match="after pass 'breaks'"):
        run_passes(dg, [bad])
    monkeypatch.setenv("WORKBENCH_CHECK_PASSES", "0")
    assert run_passes(dg, [bad]).copies[0].nbytes == dg.copies[0].nbytes + 1


def test_a_pass_must_return_a_device_graph():
    """Anything else is a PassError naming the pass and what it returned."""
    with pytest.raises(PassError, match="pass 'lost' returned NoneType"):
        run_passes(_dg(), [FunctionPass("lost", lambda dg: None)], check=False)


def test_strategies_are_lists_of_passes_that_keep_the_graph_checked():
    """A strategy's recipe names its passes in order (a cache rewrites its reads, then
    schedules), and applying it with checks after every pass finds no problem."""
    _, _, _, program = moe_tiny()
    cache = expert_cache(slots_per_layer=4)
    assert [p.name for p in cache.recipe(program).passes] == ["expert_cache.rewrite_reads", "schedule(overlap)"]
    assert [p.name for p in expert_streaming().recipe(program).passes] == ["schedule(overlap)"]
    for strategy in (cache, expert_streaming()):
        dg = strategy.apply(program, check=True)
        assert dg.copies


def test_a_core_strategy_is_its_list_of_passes_run_by_the_one_driver():
    """A Strategy subclass that only declares passes gets them run after propagation, in
    order, by run_passes: a pass requiring SCHEDULED before the schedule is refused, the
    same pass after it runs on the scheduled graph."""
    from workbench.strategy import Recipe, Strategy, all_on_device

    _, _, _, program = moe_tiny()
    seen = []
    needs = FunctionPass("needs_order", lambda dg: seen.append(dg) or dg, requires=frozenset({PROPAGATED, SCHEDULED}))

    @dataclasses.dataclass(frozen=True)
    class WithPasses(Strategy):
        first: bool = False

        def recipe(self, program):
            base = Strategy.recipe(self, program)
            order = (needs, *base.passes) if self.first else (*base.passes, needs)
            return Recipe(base.program, base.rules, base.streamed, order)

    core = all_on_device()
    ok = WithPasses(core.name, core.description, core.rules, core.skip_copies, device=core.device)
    dg = ok.apply(program, check=True)
    assert seen == [dg]
    with pytest.raises(PassError, match="pass 'needs_order' requires scheduled"):
        dataclasses.replace(ok, first=True).apply(program, check=True)
