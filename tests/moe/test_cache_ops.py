"""The expert-cache ops: the vectorised admit against a plain step-by-step reference, its
invariants as hypothesis properties, the lookups, and bad arguments."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.moe import RoutingTrace, replay
from workbench.moe.cache_ops import (
    ADMIT,
    ExpertCacheError,
    expert_cache_admit,
    expert_cache_hits,
    expert_cache_positions,
    ordered_after,
)
from cache_reference import reference_admit
from workbench.runtime import cuda_available, cuda_unavailable_reason



def _state(slots, experts, width=3):
    table = torch.arange(experts * width, dtype=torch.float32).reshape(experts, width)  # expert e's weights: row e
    return table, dict(
        slabs=[torch.zeros(slots, width)],
        slots=torch.full((slots,), -1),
        keys=torch.full((slots,), -1),
        requests=torch.zeros(experts, dtype=torch.long),
        clock=torch.zeros(1, dtype=torch.long),
    )


@st.composite
def admit_runs(draw):
    """A cache size and a sequence of steps, each k expert ids (repeats allowed within a step)
    and whether the router requested them (False: a prediction)."""
    experts = draw(st.integers(2, 9))
    k = draw(st.integers(1, min(4, experts)))
    slots = draw(st.integers(k, experts))
    steps = draw(st.lists(st.tuples(st.lists(st.integers(0, experts - 1), min_size=k, max_size=k), st.booleans()),
                          min_size=1, max_size=12))  # fmt: skip
    return experts, slots, steps


@settings(max_examples=150, deadline=None)
@given(admit_runs(), st.sampled_from(["lru", "lfu"]))
def test_vectorised_admit_equals_the_reference(run, policy):
    """Step after step, the op leaves exactly the slots, keys, requests, clock and slabs of the
    one-expert-at-a-time reference, and returns the slot table it leaves."""
    experts, slots, steps = run
    table, ours = _state(slots, experts)
    _, ref = _state(slots, experts)
    for ids, requested in steps:
        index = torch.tensor(ids)
        rows = [table[index]]
        returned = expert_cache_admit(index, rows, policy=policy, requested=requested, **ours)
        reference_admit(index, rows, policy=policy, requested=requested, **ref)
        for name in ("slots", "keys", "requests", "clock"):
            assert torch.equal(ours[name], ref[name]), name
        assert torch.equal(ours["slabs"][0], ref["slabs"][0])
        assert torch.equal(returned, ours["slots"]) and returned.data_ptr() != ours["slots"].data_ptr()


@settings(max_examples=150, deadline=None)
@given(admit_runs(), st.sampled_from(["lru", "lfu"]))
def test_admit_invariants(run, policy):
    """Capacity is never exceeded and no expert is held twice; after a step all its experts
    are resident; every filled slot holds exactly its expert's weights (cache_ops rule 4)."""
    experts, slots, steps = run
    table, state = _state(slots, experts)
    for ids, requested in steps:
        expert_cache_admit(torch.tensor(ids), [table[torch.tensor(ids)]], policy=policy, requested=requested, **state)
        held = [e for e in state["slots"].tolist() if e >= 0]
        assert len(held) <= slots and len(held) == len(set(held))
        assert set(ids) <= set(held)
        for s, e in enumerate(state["slots"].tolist()):
            if e >= 0:
                assert torch.equal(state["slabs"][0][s], table[e])


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(["lru", "lfu"]))
def test_admit_hits_equal_the_replay(data, policy):
    """Fed a trace token by token (one admit per token, requested), the cache hits exactly
    where cache_policies.replay says it does."""
    experts = data.draw(st.integers(2, 8))
    k = data.draw(st.integers(1, min(3, experts)))
    slots = data.draw(st.integers(k, experts))
    seed = data.draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    ids = np.stack([[rng.permutation(experts)[:k]] for _ in range(data.draw(st.integers(1, 16)))])  # (T, 1, k)
    table, state = _state(slots, experts)
    hits = []
    for t in range(len(ids)):
        index = torch.as_tensor(ids[t, 0])
        hits.append(int(expert_cache_hits(index, state["slots"]).sum()))
        expert_cache_admit(index, [table[index]], policy=policy, requested=True, **state)
    want = replay(RoutingTrace(ids, experts, True, "synthetic (test)"), policy, slots, 1).hits[:, 0]
    assert hits == want.tolist()


def test_lookups_find_each_rows_slot():
    """hits says which ids are held, positions the slot holding each (0 for a miss)."""
    slots = torch.tensor([5, -1, 2, 7])
    index = torch.tensor([2, 3, 7, 2])
    assert expert_cache_hits(index, slots).tolist() == [True, False, True, True]
    assert expert_cache_positions(index, slots).tolist() == [2, 0, 3, 2]
    x = torch.arange(4)
    after = ordered_after(x, [torch.zeros(2)])
    assert torch.equal(after, x) and after.data_ptr() != x.data_ptr()


def test_admit_refuses_mismatched_state():
    """The admit op checks its state's shapes and its policy."""
    rows = [torch.zeros(2, 3)]
    _, good = _state(4, 8)
    with pytest.raises(ExpertCacheError, match="rows must be"):
        expert_cache_admit(torch.tensor([1, 2, 3]), rows, policy="lru", requested=True, **good)
    with pytest.raises(ExpertCacheError, match="policy must be"):
        expert_cache_admit(torch.tensor([1, 2]), rows, policy="fifo", requested=True, **good)
    with pytest.raises(ExpertCacheError, match="cache has 1 slots"):
        _, small = _state(1, 8)
        expert_cache_admit(torch.tensor([1, 2]), rows, policy="lru", requested=True, **small)
    with pytest.raises(ExpertCacheError, match="integer expert ids"):
        expert_cache_hits(torch.tensor([0.5]), torch.tensor([1]))
    assert ADMIT is torch.ops.workbench.expert_cache_admit.default


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason())
def test_admit_on_a_cuda_device_equals_the_host():
    """On CUDA tensors the admit runs as device kernels (no host reads) and leaves the
    same state as on the host."""
    table, host = _state(5, 9)
    _, dev = _state(5, 9)
    dev = {k: ([t.cuda() for t in v] if isinstance(v, list) else v.cuda()) for k, v in dev.items()}
    for ids in ([1, 2], [3, 1], [4, 5], [6, 7], [1, 8]):
        index = torch.tensor(ids)
        expert_cache_admit(index, [table[index]], policy="lfu", requested=True, **host)
        expert_cache_admit(index.cuda(), [table[index].cuda()], policy="lfu", requested=True, **dev)
    for name in ("slots", "keys", "requests", "clock"):
        assert torch.equal(host[name], dev[name].cpu())
    assert torch.equal(host["slabs"][0], dev["slabs"][0].cpu())
