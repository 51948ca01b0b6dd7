"""Published decode anchors against one decode physics: the graph and the facts of the same
run, timed by the same function on the same machine — computed, never written in."""

import dataclasses
import functools

import pytest

from workbench.app.anchors import ANCHOR_FORMATS, ANCHORS, UNMODELED_ANCHORS, Anchor, AnchorError, anchors_table, full_size_plan
from workbench.speed.regime_model import regime_model, runtime_profile
from workbench.models import MoEConfig
from workbench.machine import CostModel
from workbench.speed.graph_layout import layout_of
from workbench.speed.timer import time_decode


@functools.lru_cache(maxsize=None)
def _tiny_plan(int4: bool = False):
    return full_size_plan(MoEConfig.tiny(), formats=ANCHOR_FORMATS if int4 else None)


def test_the_graph_column_is_time_decode_of_the_plan_on_the_anchors_machine():
    """Each graph ms/token is ``time_decode(layout_of(plan), compose(gpu, runtime=the
    anchor's fitted profile))``, each facts ms/token the regime model's prediction of the
    anchor's published run, and each ratio over the published time: the table computes."""
    plan = _tiny_plan()
    table = anchors_table(plan)
    assert list(table.columns) == ["anchor", "hardware", "weights (graph; run)", "published ms/token", "graph ms/token",
                                   "facts ms/token", "graph / published", "facts / published"]  # fmt: skip
    assert table["weights (graph; run)"].str.startswith("as captured").all()
    assert anchors_table(_tiny_plan(int4=True))["weights (graph; run)"].str.startswith("int4_g128; format int4_g128").all()
    model = regime_model()
    for anchor, row in zip(ANCHORS, table.to_dict("records")):
        machine = CostModel.compose(gpu=anchor.gpu, runtime=runtime_profile(anchor.runtime, model.fits))
        assert row["graph ms/token"] == round(time_decode(layout_of(plan), machine).ms, 3)
        assert row["facts ms/token"] == pytest.approx(1e3 / model.predict(model_run(anchor.run_id)).tok_s, abs=1e-3)
        assert row["graph / published"] == round(row["graph ms/token"] / anchor.published_ms, 3)


def model_run(run_id):
    from workbench.speed.published_runs import published_runs

    return next(r for r in published_runs() if r.id == run_id)


def test_graph_replay_is_no_slower_than_eager_launches_of_the_same_plan():
    """The same plan under ExecuTorch's graph-replay profile is no slower than under its
    eager profile (same kernels, one launch instead of one per kernel)."""
    eager, graph = anchors_table(_tiny_plan())["graph ms/token"].tolist()
    assert graph <= eager


def test_unmodeled_anchors_say_why_and_cannot_be_modeled():
    """Anchors the built-in model cannot express carry a reason and are refused by the table."""
    assert all(a.runtime is None and a.reason for a in UNMODELED_ANCHORS)
    with pytest.raises(AnchorError, match="RTX 3090|Q4_K_M"):
        anchors_table(_tiny_plan(), anchors=list(UNMODELED_ANCHORS))
    assert isinstance(ANCHORS[0], Anchor) and {a.runtime for a in ANCHORS} == {"executorch_eager", "executorch_graph"}


def test_a_plan_quantized_to_int4_holds_its_weights_at_int4_bytes():
    """``full_size_plan(formats=...)`` quantizes before planning: every weight of the int4
    plan is stored at 4.25 bits, so its resident weight bytes are 4.25 over the captured
    dtype's bits of the unquantized plan's, and its token reads fewer bytes and is no
    slower (the same kernels)."""
    unquantized, int4 = _tiny_plan(), _tiny_plan(int4=True)
    weights = lambda p: sum(p.constant_bytes.values())  # noqa: E731
    bits = 8 * MoEConfig.tiny().torch_dtype.itemsize  # the captured dtype's
    assert weights(int4) == pytest.approx(weights(unquantized) * 4.25 / bits, rel=0.02)
    assert layout_of(int4).device_bytes < layout_of(unquantized).device_bytes
    t_full, t_int4 = (anchors_table(p, anchors=[ANCHORS[1]])["graph ms/token"].iloc[0] for p in (unquantized, int4))
    assert t_int4 <= t_full
    assert dataclasses.replace(ANCHORS[0], runtime="executorch_graph").runtime == "executorch_graph"
