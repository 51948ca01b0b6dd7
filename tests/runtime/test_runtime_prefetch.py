"""Expert prefetch on the executor (sim) and in ``estimate``: the reuse copy really takes
hit rows from the prefetched device buffer, its timeline event carries only the bytes
that crossed the link, and shape-only estimates charge ``CostModel.prefetch_hit_rate``."""

import functools

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.copy_ops import GATHER_H2D, GATHER_REUSE, SELECT_ROWS
from workbench.kernels import gather_reuse_variant
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.planning.arena_execution import run_in_arenas
from workbench.runtime import stage_inputs, to_host
from workbench.machine import CostModel, op_cost
from workbench.runtime.workload import Workload
from workbench.builtin_copies import sim_reuse_rows
from workbench.runtime.executor import estimate, run
from workbench.moe.strategies import expert_streaming

from conftest import assert_matches_eager, reference_routing

E, R, C = 16, 8, 4  # toy weight: 16 rows of (8, 4) float32 = 128 B each
ROW = R * C * 4
MODEL = CostModel(
    h2d_bandwidth=1e9, h2d_latency=1e-6, device_memory_bandwidth=4e9, launch_overhead=0.0, kernel_gap=0.0, min_kernel_time=0.0, name="round numbers"
)


class Toy(nn.Module):
    """Rows of a weight selected by ``idx`` (predicted by ``hint``), applied to ``x``."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(E, R, C, generator=torch.Generator().manual_seed(0)))

    def forward(self, x, idx, hint):  # x (N, C), idx (N,), hint (M,)
        rows = torch.ops.workbench.select_rows(self.w, idx, hint)  # (N, R, C)
        return torch.bmm(rows, x[:, :, None])[:, :, 0]  # (N, R)


@functools.lru_cache(maxsize=None)
def _toy_plan():
    model = Toy().eval()
    example = (torch.randn(4, C), torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 2, 3]))
    prog = wb.capture(model, example)
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), stream_constants=["w"])
    return model, wb.plan(dg, "best")


def _run_toy(idx, hint):
    model, plan = _toy_plan()
    x = torch.randn(len(idx), C, generator=torch.Generator().manual_seed(1))
    idx, hint = torch.tensor(idx), torch.tensor(hint)
    res = run(plan, x, idx, hint, backend="sim", cost_model=MODEL, validate=True)
    with torch.no_grad():
        assert_matches_eager(res.outputs, model(x, idx, hint))
    (event,) = [e for e in res.timeline if e.node.endswith("_gather")]
    return res, event


@pytest.mark.parametrize(
    "idx,hint,hits",
    [
        ([3, 9, 5, 12], [3, 9, 5, 12], 4),  # perfect hint: nothing crosses for the reuse copy
        ([3, 9, 5, 12], [12, 5, 9, 3], 4),  # same experts, other order
        ([3, 9, 5, 12], [0, 1, 2, 4], 0),  # disjoint hint: every row crosses
        ([3, 9, 5, 12], [9, 0, 12, 1], 2),  # half right
        ([7, 7, 2, 2], [7, 0, 1, 4], 2),  # a repeated expert hits twice
    ],
)
def test_reuse_copy_moves_exactly_the_missed_rows(idx, hint, hits):
    """The reuse copy's event carries misses × row bytes, lasts what the cost model says
    for those link bytes and the hit bytes copied on the device, and RunResult counts the
    hits; the outputs equal eager whatever the hint."""
    res, event = _run_toy(idx, hint)
    misses = len(idx) - hits
    assert event.kind == "h2d" and event.nbytes == misses * ROW
    assert event.duration_us == pytest.approx(MODEL.reuse_copy_time_us(misses * ROW, hits * ROW))
    (stat,) = res.prefetch
    assert (stat.rows, stat.hits, stat.row_bytes, stat.link_bytes) == (len(idx), hits, ROW, misses * ROW)
    assert res.prefetch_hit_rate == hits / len(idx)
    prefetch = [e for e in res.timeline if e.node.endswith("_prefetch")]
    assert [e.nbytes for e in prefetch] == [len(hint) * ROW]  # the prefetch moves every hinted row


def test_sim_reuse_gather_reads_hits_from_the_device_buffer():
    """On sim the hit rows really come from the prefetched device buffer (a buffer that
    differs from the host rows shows it) and the missed rows from host memory."""
    src = torch.arange(E * 3, dtype=torch.float32).reshape(E, 3)
    cached_index = torch.tensor([5, 2])
    cached = src[cached_index] - 500.0  # marked
    index = torch.tensor([2, 6, 5])
    dst = torch.full((3, 3), float("nan"))
    hits = sim_reuse_rows(dst, src, index, cached, cached_index, None, None)
    assert hits() == 2
    assert torch.equal(dst, torch.stack([src[2] - 500.0, src[6], src[5] - 500.0]))


def test_estimate_charges_the_expected_hit_rate():
    """Shape-only estimate charges a reuse copy (1 - prefetch_hit_rate) of its rows over
    the link and the rest on the device; the default (0.0) charges every row, and link
    bytes fall linearly with the rate."""
    _, plan = _toy_plan()
    total = 4 * ROW
    seen = []
    for rate in (0.0, 0.25, 0.5, 1.0):
        (event,) = [e for e in estimate(plan, MODEL, prefetch_hit_rate=rate) if e.node.endswith("_gather")]
        link = round((1 - rate) * total)
        assert event.nbytes == link
        assert event.duration_us == pytest.approx(MODEL.reuse_copy_time_us(link, total - link))
        seen.append(event.nbytes)
    assert seen == [total, 3 * total // 4, total // 2, 0]


def test_prefetch_hit_rate_is_the_workloads_and_validated():
    """prefetch_hit_rate is a number in [0, 1] given beside the machine (0.0, pessimistic, by
    default), never a cost model's figure; a file that still holds it reads as the same machine."""
    _, plan = _toy_plan()
    assert Workload().prefetch_hit_rate == 0.0 and not hasattr(CostModel(), "prefetch_hit_rate")
    for bad in (-0.1, 1.5, True, "0.5", float("nan")):
        with pytest.raises(ValueError, match=r"prefetch_hit_rate must be a number in \[0, 1\]"):
            Workload(bad)
        with pytest.raises(ValueError, match=r"prefetch_hit_rate must be a number in \[0, 1\]"):
            estimate(plan, MODEL, prefetch_hit_rate=bad)
    old_file = {**MODEL.to_dict(), "prefetch_hit_rate": 0.85}
    assert CostModel.from_dict(old_file) == MODEL


def test_reuse_copy_time_is_one_launch_for_both_kinds_of_rows():
    """Latency plus the longer of link time and on-device time: with no hits it is the
    plain h2d copy time; on-device rows alone cost read+write at memory bandwidth."""
    m = CostModel.preset("h200", link="pcie_gen5")
    assert m.reuse_copy_time_us(4096, 0) == pytest.approx(m.copy_time_us("h2d", 4096))
    assert m.reuse_copy_time_us(0, 1 << 20) == pytest.approx((m.h2d_latency + 2 * (1 << 20) / m.device_memory_bandwidth) * 1e6)
    assert m.reuse_copy_time_us(1 << 20, 1 << 20) == pytest.approx(m.copy_time_us("h2d", 1 << 20))
    with pytest.raises(ValueError, match="link_bytes must be an int >= 0"):
        m.reuse_copy_time_us(-1, 0)


def test_op_cost_charges_select_rows_like_index_select():
    """select_rows reads only the rows it picks (plus its index and hint), like
    index_select, not the whole weight stack."""
    x, idx, hint = torch.randn(256, 64, 32), torch.tensor([3, 7]), torch.tensor([3, 8])
    picked = op_cost(torch.ops.aten.index_select.default, (x, 0, idx))
    hinted = op_cost(SELECT_ROWS, (x, idx, hint))
    assert hinted.flops == picked.flops == 0
    assert hinted.bytes_touched == picked.bytes_touched + hint.numel() * hint.element_size()
    assert hinted.bytes_touched < x.numel() * x.element_size()


def test_gather_reuse_variant_needs_every_pointer_aligned():
    """16-byte loads only when source, prefetched buffer, destination, row size and row
    stride are all 16-byte aligned."""
    assert gather_reuse_variant(0, 16, 32, 64, 64) == "v16"
    assert gather_reuse_variant(0, 8, 32, 64, 64) == "b1"
    assert gather_reuse_variant(0, 16, 32, 60, 64) == "b1"


# -- the tiny MoE model -----------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _moe():
    cfg = MoEConfig.tiny()
    plain = QwenMoEDecoder(cfg).eval()
    hinted = QwenMoEDecoder(cfg, expert_prefetch=True).eval()
    inputs = plain.example_inputs(batch=2, position=1)
    return cfg, plain, hinted, inputs, wb.capture(hinted, inputs)


@pytest.mark.parametrize("skip", [False, True])
def test_prefetch_decode_step_equals_eager_and_plain_streaming(skip):
    """The prefetching decode step (batch 2) on sim equals eager PyTorch and the plain
    streaming run bit for bit, reading only its own device's memory (validate)."""
    cfg, plain, hinted, inputs, prog = _moe()
    with torch.no_grad():
        expected = plain(*inputs)
    dg = expert_streaming(skip_copies=skip, prefetch=True).apply(prog)
    res = run(wb.plan(dg, "best"), *stage_inputs(dg, inputs, "sim"), backend="sim", validate=True)
    plain_dg = expert_streaming(skip_copies=skip).apply(wb.capture(plain, inputs))
    plain_res = run(wb.plan(plain_dg, "best"), *stage_inputs(plain_dg, inputs, "sim"), backend="sim")
    for got, other, want in zip(res.outputs, plain_res.outputs, expected):
        assert torch.equal(to_host(got), to_host(other))
        torch.testing.assert_close(to_host(got), want, rtol=1e-5, atol=1e-5)


def test_prefetch_gathers_exactly_the_predicted_experts():
    """Each prefetch gathers layer i+1's predicted experts (checked against the hint
    computed by hand), and each reuse copy selects the layer's own router choice."""
    cfg, plain, hinted, inputs, prog = _moe()
    chosen, predicted = reference_routing(plain, inputs)
    dg = expert_streaming(prefetch=True).apply(prog)
    seen = []

    def hook(node, args, kwargs):
        if node.target in (GATHER_H2D, GATHER_REUSE):
            layer = int(dg.program.constants[node.args[0].name].split(".")[1])
            seen.append((node.target, node.name.endswith("_prefetch"), layer, args[1].clone()))
        return node.target(*args, **kwargs)

    run_in_arenas(wb.plan(dg, "best"), *inputs, run_node=hook)
    prefetches = [(layer, ids) for target, pre, layer, ids in seen if pre]
    reuses = [(layer, ids) for target, pre, layer, ids in seen if target is GATHER_REUSE]
    assert sorted(layer for layer, _ in prefetches) == sorted(2 * list(range(1, cfg.num_hidden_layers)))
    for layer, ids in prefetches:
        assert torch.equal(ids, predicted[layer])
    for layer, ids in reuses:
        assert torch.equal(ids.reshape(-1), chosen[layer].reshape(-1))


def test_timeline_moves_misses_times_row_bytes_per_router_choices():
    """Per reuse copy, the timeline's bytes equal (selected rows not in the hint) × slab
    bytes, with hits counted from the router's choices and the hand-computed hints; the
    run's hit rate is their total."""
    cfg, plain, hinted, inputs, prog = _moe()
    chosen, predicted = reference_routing(plain, inputs)
    dg = expert_streaming(prefetch=True).apply(prog)
    res = run(wb.plan(dg, "best"), *stage_inputs(dg, inputs, "sim"), backend="sim")
    H, I = cfg.hidden_size, cfg.moe_intermediate_size
    slab = {"w1": 2 * I * H * 4, "w2": H * I * 4}
    events = {e.node: e for e in res.timeline}
    stats = {s.node: s for s in res.prefetch}
    total_hits = total_rows = 0
    for node in dg.graph.nodes:
        if node.target is not GATHER_REUSE:
            continue
        fqn = dg.program.constants[node.args[0].name]
        layer, which = int(fqn.split(".")[1]), fqn.rsplit(".", 1)[1]
        pool = set(predicted[layer].reshape(-1).tolist())
        ids = chosen[layer].reshape(-1).tolist()
        hits = sum(1 for e in ids if e in pool)
        assert events[node.name].nbytes == (len(ids) - hits) * slab[which], node.name
        assert stats[node.name].hits == hits and stats[node.name].row_bytes == slab[which]
        total_hits, total_rows = total_hits + hits, total_rows + len(ids)
    assert len(stats) == 2 * (cfg.num_hidden_layers - 1)
    assert res.prefetch_hit_rate == pytest.approx(total_hits / total_rows)
    saved = sum(s.device_bytes for s in res.prefetch)
    assert res.copy_bytes_by_kind()["h2d"] == dg.copy_bytes()["h2d"] - saved
